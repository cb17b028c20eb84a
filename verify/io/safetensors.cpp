// Tests of reshard/io/safetensors.hpp: round trips, the MindSpore conventions (sorted names,
// {"format":"ms"}, Int4 marker), header validation, cross-checks with an independent Python
// reader/writer, and the writer's atomicity.
#include <reshard/io/safetensors.hpp>

#include "io_test_util.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <rapidcheck/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

using namespace reshard::io;
using namespace reshard_test;

namespace {

std::string str(std::span<const std::byte> b) { return {reinterpret_cast<const char*>(b.data()), b.size()}; }

// A safetensors file from a header text and data.
std::string st_file(const std::string& header, const std::string& data) {
  std::string len(8, '\0');
  for (std::size_t i = 0; i < 8; ++i) len[i] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  return len + header + data;
}

std::string read_error(const temp_dir& dir, const std::string& bytes) {
  write_bytes(dir / "bad.safetensors", as_bytes(bytes));
  return error_of([&] { safetensors_file f(dir / "bad.safetensors"); });
}

const std::vector<std::int64_t> dims22{2, 2};
const float w_values[4] = {1, 2, 3, 4};
std::span<const std::byte> w_content() { return std::as_bytes(std::span(w_values)); }

}  // namespace

TEST(safetensors_write, layout_is_mindspores) {
  temp_dir dir;
  const std::int8_t q[3] = {1, -2, 3};
  const std::vector<std::int64_t> d3{3};
  const safetensors_tensor_view tensors[] = {{"w", dtype::float32, dims22, w_content()},
                                             {"b", dtype::int4, d3, std::as_bytes(std::span(q))}};
  write_safetensors(dir / "a.safetensors", tensors);
  const auto bytes = read_bytes(dir / "a.safetensors");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | std::to_integer<std::uint64_t>(bytes[static_cast<std::size_t>(i)]);
  EXPECT_EQ(n % 8, 0u);
  const std::string header = str(std::span(bytes).subspan(8, n));
  const auto j = nlohmann::json::parse(header);
  EXPECT_EQ(j["__metadata__"], (nlohmann::json{{"format", "ms"}, {"b", "Int4"}}));
  EXPECT_EQ(j["b"]["dtype"], "I8");
  EXPECT_EQ(j["b"]["data_offsets"], (nlohmann::json{0, 3}));  // "b" < "w": data in name order
  EXPECT_EQ(j["w"]["data_offsets"], (nlohmann::json{3, 19}));
  EXPECT_EQ(j["w"]["shape"], (nlohmann::json{2, 2}));
  EXPECT_EQ(header.find_last_not_of(' ') + 1, header.rfind('}') + 1);  // only space padding after the JSON
  EXPECT_EQ(to_hex(std::span(bytes).subspan(8 + n + 3)), to_hex(w_content()));

  safetensors_file f(dir / "a.safetensors");
  ASSERT_EQ(f.entries().size(), 2u);
  EXPECT_EQ(f.entries()[0].name, "b");
  EXPECT_EQ(f.at("b").type, dtype::int4);
  EXPECT_EQ(f.at("w").type, dtype::float32);
  EXPECT_EQ(f.at("w").shape, dims22);
  EXPECT_EQ(to_hex(f.at("w").data), to_hex(w_content()));
  EXPECT_EQ(f.metadata().at("format"), "ms");
  EXPECT_EQ(f.header_size(), n);
  EXPECT_EQ(f.find("nope"), nullptr);
  EXPECT_TRUE(throws_error([&] { (void)f.at("nope"); }, {"a.safetensors", "no tensor 'nope'"}));
}

TEST(safetensors_read, entries_survive_moving_the_file) {
  temp_dir dir;
  const safetensors_tensor_view t[] = {{"w", dtype::float32, dims22, w_content()}};
  write_safetensors(dir / "a.safetensors", t);
  safetensors_file f(dir / "a.safetensors");
  const auto* data = f.at("w").data.data();
  safetensors_file g(std::move(f));
  EXPECT_EQ(g.at("w").data.data(), data);
  EXPECT_EQ(to_hex(g.at("w").data), to_hex(w_content()));
}

TEST(safetensors_write, streaming_append_may_cross_tensors) {
  temp_dir dir;
  std::vector<std::byte> data(24);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>(i);
  {
    safetensors_writer w(dir / "s.safetensors", {{"b", dtype::int16, {4}}, {"a", dtype::uint8, {16}}}, {.metadata = {}});
    ASSERT_EQ(w.order().size(), 2u);
    EXPECT_EQ(w.order()[0].name, "a");
    w.append(std::span(data).first(5));
    w.append(std::span(data).subspan(5, 15));
    w.append(std::span(data).subspan(20));
    w.commit();
  }
  safetensors_file f(dir / "s.safetensors");
  EXPECT_TRUE(f.metadata().empty());
  EXPECT_EQ(to_hex(f.at("a").data), to_hex(std::span(data).first(16)));
  EXPECT_EQ(to_hex(f.at("b").data), to_hex(std::span(data).subspan(16)));
}

TEST(safetensors_write, errors_name_the_file_and_tensor) {
  temp_dir dir;
  const auto path = (dir / "o.safetensors").string();
  auto make = [&](std::vector<safetensors_tensor_info> t, safetensors_write_options o = {}) {
    safetensors_writer w(path, std::move(t), std::move(o));
  };
  EXPECT_TRUE(throws_error([&] { make({{"x", dtype::float32, {1}}, {"x", dtype::int8, {1}}}); }, {path, "'x'", "declared twice"}));
  EXPECT_TRUE(throws_error([&] { make({{"__metadata__", dtype::float32, {1}}}); }, {path, "reserved"}));
  EXPECT_TRUE(throws_error([&] { make({{"s", dtype::str, {1}}}); }, {path, "'s'", "str has no safetensors equivalent"}));
  EXPECT_TRUE(throws_error([&] { make({{"n", dtype::float32, {-1}}}); }, {path, "'n'", "negative"}));
  EXPECT_TRUE(throws_error([&] { make({{"bad\xff", dtype::float32, {1}}}); }, {path, "not valid UTF-8"}));
  EXPECT_TRUE(throws_error([&] { make({{"q", dtype::int4, {1}}}, {.metadata = {{"q", "other"}}}); },
                           {path, "'q'", "Int4 marker"}));
  EXPECT_TRUE(dir.files().empty());

  safetensors_writer w(path, {{"a", dtype::float32, {2}}, {"b", dtype::float32, {1}}});
  EXPECT_TRUE(throws_error([&] { w.write("b", w_content().first(4)); }, {path, "'b'", "out of order", "'a'"}));
  EXPECT_TRUE(throws_error([&] { w.write("a", w_content().first(4)); }, {path, "'a'", "4 data bytes, its shape needs 8"}));
  w.write("a", w_content().first(8));
  EXPECT_TRUE(throws_error([&] { w.append(w_content()); }, {path, "more data bytes"}));
  EXPECT_TRUE(throws_error([&] { w.commit(); }, {path, "only 8 of 12 data bytes written", "'b'"}));
}

TEST(safetensors_write, atomic) {
  temp_dir dir;
  write_text(dir / "o.safetensors", "precious");
  const safetensors_tensor_view t[] = {{"w", dtype::float32, dims22, w_content()}};
  EXPECT_TRUE(throws_error([&] { write_safetensors(dir / "o.safetensors", t); }, {"o.safetensors", "destination exists"}));
  EXPECT_EQ(str(read_bytes(dir / "o.safetensors")), "precious");
  write_safetensors(dir / "o.safetensors", t, {.overwrite = true});
  EXPECT_EQ(safetensors_file(dir / "o.safetensors").entries().size(), 1u);
  {
    safetensors_writer w(dir / "p.safetensors", {{"w", dtype::float32, {4}}});
    w.append(w_content().first(3));
  }  // abandoned: nothing appears
  EXPECT_EQ(dir.files(), std::vector<std::string>{"o.safetensors"});
}

RC_GTEST_PROP(safetensors_roundtrip, read_of_write_is_identity, ()) {
  std::vector<dtype> types;
  for (auto t : all_dtypes)
    if (t != dtype::str) types.push_back(t);
  std::map<std::string, std::pair<dtype, std::vector<std::int64_t>>> decl;
  const auto n = *rc::gen::inRange(0, 6);
  for (int i = 0; i < n; ++i) {
    auto name = *rc::gen::container<std::string>(rc::gen::inRange<char>('-', 'z'));  // printable ASCII
    if (name == "__metadata__") continue;
    std::vector<std::int64_t> shape;
    for (auto r = *rc::gen::inRange(0, 4); r > 0; --r) shape.push_back(*rc::gen::inRange<std::int64_t>(0, 5));
    decl[name] = {*rc::gen::elementOf(types), shape};
  }
  std::map<std::string, std::string> metadata;
  for (auto k = *rc::gen::inRange(0, 3); k > 0; --k)
    metadata[std::string("m").append(std::to_string(k))] = *rc::gen::container<std::string>(rc::gen::inRange<char>(' ', '~'));
  std::vector<std::vector<std::byte>> data;
  std::vector<safetensors_tensor_view> views;
  for (const auto& [name, d] : decl) {
    data.emplace_back(*byte_size(d.first, d.second));
    for (auto& b : data.back()) b = static_cast<std::byte>(*rc::gen::arbitrary<std::uint8_t>());
    views.push_back({name, d.first, d.second, data.back()});
  }
  temp_dir dir;
  write_safetensors(dir / "r.safetensors", views, {.metadata = metadata});
  safetensors_file f(dir / "r.safetensors");
  RC_ASSERT(f.entries().size() == decl.size());
  auto expected_meta = metadata;
  std::uint64_t at = 0;
  std::size_t i = 0;
  for (const auto& [name, d] : decl) {  // std::map: name order = data order
    const auto& e = f.entries()[i];
    RC_ASSERT(e.name == name);
    RC_ASSERT(e.type == d.first);
    RC_ASSERT(e.shape == d.second);
    RC_ASSERT(e.begin == at);
    RC_ASSERT(std::vector<std::byte>(e.data.begin(), e.data.end()) == data[i]);
    at = e.end;
    if (d.first == dtype::int4) expected_meta[name] = "Int4";
    ++i;
  }
  RC_ASSERT(f.metadata() == expected_meta);
  RC_ASSERT(f.header_size() % 8 == 0);
}

// ---------------------------------------------------------------------------------------------
// malformed input

TEST(safetensors_malformed, every_truncation_is_an_error) {
  temp_dir dir;
  const safetensors_tensor_view t[] = {{"w", dtype::float32, dims22, w_content()}};
  write_safetensors(dir / "full.safetensors", t);
  const auto full = read_bytes(dir / "full.safetensors");
  for (std::size_t n = 0; n < full.size(); ++n) {
    const auto msg = read_error(dir, str(std::span(full).first(n)));
    EXPECT_NE(msg.find("safetensors: " + (dir / "bad.safetensors").string() + ": "), std::string::npos)
        << "prefix " << n << ": " << msg;
  }
}

TEST(safetensors_malformed, header_errors) {
  temp_dir dir;
  auto has = [&](const std::string& bytes, std::string_view part) {
    const auto msg = read_error(dir, bytes);
    return msg.find(part) != std::string::npos && msg.find("bad.safetensors") != std::string::npos
               ? ::testing::AssertionSuccess()
               : ::testing::AssertionFailure() << "message \"" << msg << "\" lacks \"" << part << "\"";
  };
  const std::string w = R"("w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]})";
  const std::string data = str(w_content());
  EXPECT_EQ(read_error(dir, st_file("{" + w + "}", data)), "");
  EXPECT_TRUE(has("1234567", "fewer than the 8-byte header length"));
  EXPECT_TRUE(has(st_file("{" + w + "}", data).replace(0, 8, "\xff\xff\xff\xff\xff\xff\x00\x00", 8), "exceeds the limit"));
  EXPECT_TRUE(has(st_file("{" + w + "}", data).replace(0, 8, "\x00\x10\x00\x00\x00\x00\x00\x00", 8), "header length 4096 exceeds"));
  EXPECT_TRUE(has(st_file("[1,2]", ""), "does not start with '{'"));
  EXPECT_TRUE(has(st_file("{\"w\":", ""), "invalid JSON"));
  EXPECT_TRUE(has(st_file("{" + w + "," + w + "}", data), "key 'w' twice"));
  EXPECT_TRUE(has(st_file(R"({"w":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}})", "x"),
                  "tensor 'w': unknown or unsupported dtype 'F8_E4M3'"));
  EXPECT_TRUE(has(st_file(R"({"w":{"shape":[1],"data_offsets":[0,1]}})", "x"), "tensor 'w': missing string field dtype"));
  EXPECT_TRUE(has(st_file(R"({"w":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}})", "x"), "tensor 'w': shape [-1] holds -1"));
  EXPECT_TRUE(has(st_file(R"({"w":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}})", "x"), "not a non-negative integer"));
  EXPECT_TRUE(has(st_file(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0]}})", "x"), "tensor 'w': data_offsets [0] is not a pair"));
  EXPECT_TRUE(has(st_file(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[1,0]}})", "x"), "is not a pair [begin, end] with 0 <= begin <= end"));
  EXPECT_TRUE(has(st_file(R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[0,1]}})", "x"),
                  "tensor 'w': data_offsets [0,1] hold 1 bytes, shape [2] U8 needs 2"));
  EXPECT_TRUE(has(st_file(R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}})", "xy"), "lie beyond the 2-byte data section"));
  EXPECT_TRUE(has(st_file(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})", "xy"), "tensor 'w': data_offsets [1,2] should start at 0 (gap"));
  EXPECT_TRUE(has(st_file(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}})", "xyz"),
                  "tensor 'b': data_offsets [1,3] should start at 2 (overlaps"));
  EXPECT_TRUE(has(st_file("{" + w + "}", data + "extra"), "tensors cover 16 bytes but the data section has 21"));
  EXPECT_TRUE(has(st_file(R"({"__metadata__":{"format":1}})", ""), "__metadata__ value of 'format' is 1, not a string"));
  EXPECT_TRUE(has(st_file(R"({"__metadata__":[]})", ""), "__metadata__ is not an object"));
  EXPECT_TRUE(has(st_file(R"({"w":[1]})", ""), "tensor 'w': entry [1] is not an object"));
  EXPECT_TRUE(has(st_file(R"({"w":{"dtype":"U8","shape":[4611686018427387904,4],"data_offsets":[0,0]}})", ""), "overflows"));
}

TEST(safetensors_read, zero_sized_tensors_and_unordered_offsets) {
  temp_dir dir;
  const std::string header =
      R"({"z":{"dtype":"F16","shape":[0,4],"data_offsets":[2,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
      R"("a":{"dtype":"I16","shape":[],"data_offsets":[2,4]},"__metadata__":{"q":"Int4"}})";
  EXPECT_EQ(read_error(dir, st_file(header, "bbaa")), "");
  safetensors_file f(dir / "bad.safetensors");
  ASSERT_EQ(f.entries().size(), 3u);
  EXPECT_EQ(f.entries()[0].name, "a");
  EXPECT_EQ(str(f.at("a").data), "aa");
  EXPECT_TRUE(f.at("z").data.empty());
  EXPECT_EQ(f.at("a").type, dtype::int16);  // the Int4 marker names another tensor
}

// ---------------------------------------------------------------------------------------------
// cross-checks with verify/python/ms_files.py (an independent reader and writer)

TEST(safetensors_python, reads_python_files_and_python_reads_ours) {
  temp_dir dir;
  const auto gen = run_python("ms_files.py", {"gen-safetensors", dir.path().string()});
  ASSERT_EQ(gen.status, 0) << gen.output;
  const auto expect = nlohmann::json::parse(str(read_bytes(dir / "all.expect.json")));
  safetensors_file f(dir / "all.safetensors");
  ASSERT_EQ(f.entries().size(), expect["entries"].size());
  for (std::size_t i = 0; i < f.entries().size(); ++i) {
    const auto& e = f.entries()[i];
    const auto& x = expect["entries"][i];
    EXPECT_EQ(e.name, x["name"].get<std::string>());
    EXPECT_EQ(ms_name(e.type), x["dtype"].get<std::string>()) << e.name;
    EXPECT_EQ(e.shape, x["shape"].get<std::vector<std::int64_t>>()) << e.name;
    EXPECT_EQ(to_hex(e.data), x["content"].get<std::string>()) << e.name;
  }
  EXPECT_EQ(f.metadata(), (expect["metadata"].get<std::map<std::string, std::string>>()));

  std::vector<safetensors_tensor_view> views;
  for (const auto& e : f.entries()) views.push_back({e.name, e.type, e.shape, e.data});
  auto meta = f.metadata();
  meta.erase("q4");  // the writer adds the Int4 marker itself
  write_safetensors(dir / "ours.safetensors", views, {.metadata = meta});
  const auto check = run_python("ms_files.py", {"check-safetensors", (dir / "ours.safetensors").string(),
                                                (dir / "all.expect.json").string(), "--exact"});
  EXPECT_EQ(check.status, 0) << check.output;
  // and the checker notices a wrong file: the Python file itself is not in name order
  const auto strict = run_python("ms_files.py", {"check-safetensors", (dir / "all.safetensors").string(),
                                                 (dir / "all.expect.json").string(), "--exact"});
  EXPECT_EQ(strict.status, 1) << strict.output;
}
