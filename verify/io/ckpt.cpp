// Tests of reshard/io/ckpt.hpp: the spec's golden encodings both ways, round trips as
// properties, cross-checks with protobuf's Python library, every malformed input and the
// writer's atomicity.
#include <reshard/io/checkpoint.hpp>
#include <reshard/io/ckpt.hpp>

#include "io_test_util.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <sys/stat.h>

using namespace reshard::io;
using namespace reshard_test;
using namespace std::string_literals;

namespace {

// docs/formats.md#3-checkpoint-files
constexpr std::string_view golden_w = "0a240a0177121f080208021207466c6f617433321a100000803f000000400000404000008040";
constexpr std::string_view golden_step = "0a200a0b676c6f62616c5f7374657012111205496e7436341a080500000000000000";
constexpr std::string_view golden_trailer = "6372635f6e756d000000000000a9f61be4";

const std::vector<std::int64_t> dims22{2, 2};
const float w_values[4] = {1, 2, 3, 4};
const std::int64_t step_value = 5;

std::span<const std::byte> w_content() { return std::as_bytes(std::span(w_values)); }
std::span<const std::byte> step_content() { return std::as_bytes(std::span(&step_value, 1)); }

void write_golden_pair(const fs::path& path, ckpt_write_options opts = {}) {
  ckpt_writer w(path, opts);
  w.write("w", dtype::float32, dims22, w_content());
  w.write("global_step", dtype::int64, {}, step_content());
  w.commit();
}

}  // namespace

// A ckpt source's size, identity and modification time come from the fstat of its opening (no
// second stat): they equal what stat says of the file.
TEST(ckpt_file, a_reader_takes_the_files_identity_from_its_opening) {
  temp_dir dir;
  write_golden_pair(dir / "a.ckpt");
  struct ::stat st {};
  ASSERT_EQ(::stat((dir / "a.ckpt").c_str(), &st), 0);
  const checkpoint_reader rd(dir / "a.ckpt");
  EXPECT_EQ(rd.file_size(), static_cast<std::uint64_t>(st.st_size));
  EXPECT_EQ(rd.file_id(), (std::pair<dev_t, ino_t>{st.st_dev, st.st_ino}));
  EXPECT_EQ(rd.mtime_ns(), static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec);
  EXPECT_EQ(rd.entries().size(), 2u);
}

namespace {

// Hand-built wire data for malformed files.
std::string varint(std::uint64_t v) {
  std::string s;
  do {
    std::uint8_t b = v & 0x7F;
    v >>= 7;
    if (v) b |= 0x80;
    s.push_back(static_cast<char>(b));
  } while (v);
  return s;
}
std::string len_field(int field, std::string_view payload) {
  return std::string(1, static_cast<char>(field << 3 | 2)) + varint(payload.size()) + std::string(payload);
}
std::string varint_field(int field, std::uint64_t v) { return std::string(1, static_cast<char>(field << 3)) + varint(v); }
std::string tensor_proto(const std::vector<std::int64_t>& dims, std::string_view type, std::string_view content) {
  std::string t;
  for (auto d : dims) t += varint_field(1, static_cast<std::uint64_t>(d));
  return t + len_field(2, type) + len_field(3, content);
}
std::string value_msg(std::string_view tag, std::string_view tensor) { return len_field(1, tag) + len_field(2, tensor); }
std::string checkpoint(std::string_view value) { return len_field(1, value); }
std::string floats(std::size_t n) { return std::string(4 * n, '\x01'); }

// Writes `bytes` to dir/name and returns the error message of reading it ("" if it reads).
std::string read_error(const temp_dir& dir, std::string_view bytes, const std::string& name = "bad.ckpt") {
  write_bytes(dir / name, as_bytes(bytes));
  return error_of([&] { ckpt_file f(dir / name); });
}

std::string str(std::span<const std::byte> b) { return {reinterpret_cast<const char*>(b.data()), b.size()}; }

}  // namespace

// ---------------------------------------------------------------------------------------------
// golden encodings

TEST(ckpt_golden, tensor_is_written_byte_exact) {
  temp_dir dir;
  ckpt_writer w(dir / "a.ckpt");
  w.write("w", dtype::float32, dims22, w_content());
  w.commit();
  EXPECT_EQ(to_hex(read_bytes(dir / "a.ckpt")), golden_w);
}

TEST(ckpt_golden, scalar_is_written_with_empty_dims) {
  temp_dir dir;
  ckpt_writer w(dir / "a.ckpt");
  w.write("global_step", dtype::int64, {}, step_content());
  w.commit();
  EXPECT_EQ(to_hex(read_bytes(dir / "a.ckpt")), golden_step);
}

TEST(ckpt_golden, crc_trailer_is_written_byte_exact) {
  temp_dir dir;
  write_golden_pair(dir / "a.ckpt", {.crc = true});
  EXPECT_EQ(to_hex(read_bytes(dir / "a.ckpt")), std::string(golden_w) + std::string(golden_step) + std::string(golden_trailer));
}

TEST(ckpt_golden, golden_files_read_back) {
  temp_dir dir;
  const auto bytes = from_hex(std::string(golden_w) + std::string(golden_step) + std::string(golden_trailer));
  write_bytes(dir / "g.ckpt", bytes);
  ckpt_file f(dir / "g.ckpt");
  EXPECT_TRUE(f.has_crc());
  ASSERT_EQ(f.entries().size(), 2u);
  const auto& w = f.at("w");
  EXPECT_EQ(w.type, dtype::float32);
  EXPECT_EQ(w.dims, dims22);
  EXPECT_FALSE(w.map_tensor);
  EXPECT_FALSE(w.is_scalar());
  EXPECT_EQ(to_hex(gather(w)), to_hex(w_content()));
  ASSERT_EQ(w.values.size(), 1u);
  EXPECT_EQ(to_hex(w.values[0]), std::string(golden_w).substr(4));  // the Value inside Checkpoint{...}
  const auto& s = f.at("global_step");
  EXPECT_EQ(s.type, dtype::int64);
  EXPECT_TRUE(s.dims.empty());
  EXPECT_TRUE(s.is_scalar());
  EXPECT_EQ(to_hex(gather(s)), to_hex(step_content()));
  // the content is a zero-copy view into the mapping
  EXPECT_GE(w.pieces[0].data(), f.bytes().data());
  EXPECT_LE(w.pieces[0].data() + w.pieces[0].size(), f.bytes().data() + f.bytes().size());
  EXPECT_EQ(f.find("absent"), nullptr);
  EXPECT_TRUE(throws_error([&] { (void)f.at("absent"); }, {"g.ckpt", "no parameter 'absent'"}));
}

TEST(ckpt_golden, entries_survive_moving_the_file) {
  temp_dir dir;
  write_golden_pair(dir / "g.ckpt");
  ckpt_file f(dir / "g.ckpt");
  const auto* piece = f.at("w").pieces[0].data();
  ckpt_file g(std::move(f));
  EXPECT_EQ(g.at("w").pieces[0].data(), piece);
  EXPECT_EQ(to_hex(gather(g.at("w"))), to_hex(w_content()));
  EXPECT_EQ(g.path(), dir / "g.ckpt");
}

TEST(ckpt_golden, index_in_memory) {
  const auto bytes = from_hex(std::string(golden_w) + std::string(golden_step));
  const auto index = index_ckpt(bytes, "mem");
  EXPECT_FALSE(index.crc);
  ASSERT_EQ(index.entries.size(), 2u);
  EXPECT_EQ(index.entries[0].name, "w");
  EXPECT_EQ(index.entries[1].name, "global_step");
}

// ---------------------------------------------------------------------------------------------
// writing

TEST(ckpt_write, large_contents_are_split_into_same_tag_values) {
  temp_dir dir;
  std::vector<std::byte> content(16);
  for (std::size_t i = 0; i < content.size(); ++i) content[i] = static_cast<std::byte>(i);
  ckpt_writer w(dir / "a.ckpt", {.chunk_bytes = 5});
  w.write("w", dtype::float32, dims22, content);
  w.write("e", dtype::float32, std::vector<std::int64_t>{0, 4}, {});
  w.write("x", dtype::int8, std::vector<std::int64_t>{5}, std::span(content).first(5));
  w.commit();
  ckpt_file f(dir / "a.ckpt");
  const auto& e = f.at("w");
  ASSERT_EQ(e.pieces.size(), 4u);
  EXPECT_EQ(e.pieces[0].size(), 5u);
  EXPECT_EQ(e.pieces[3].size(), 1u);
  EXPECT_EQ(e.values.size(), 4u);
  EXPECT_EQ(to_hex(gather(e)), to_hex(content));
  EXPECT_EQ(f.at("e").pieces.size(), 1u);  // an empty tensor is one Value with empty content
  EXPECT_EQ(f.at("e").content_size(), 0u);
  EXPECT_EQ(f.at("x").pieces.size(), 1u);  // exactly one chunk: not split
}

TEST(ckpt_write, default_chunk_is_mindspores) { EXPECT_EQ(ckpt_write_options{}.chunk_bytes, 536870912u); }

TEST(ckpt_write, streaming_equals_whole_writes) {
  temp_dir dir;
  std::vector<std::byte> content(40);
  for (std::size_t i = 0; i < content.size(); ++i) content[i] = static_cast<std::byte>(3 * i + 1);
  const std::vector<std::int64_t> dims{10};
  {
    ckpt_writer w(dir / "whole.ckpt", {.crc = true, .chunk_bytes = 7});
    w.write("t", dtype::int32, dims, content);
    w.commit();
  }
  {
    ckpt_writer w(dir / "streamed.ckpt", {.crc = true, .chunk_bytes = 7});
    w.begin("t", dtype::int32, dims, content.size());
    for (std::size_t at = 0, step = 1; at < content.size(); at += step, step = step % 9 + 2)
      w.append(std::span(content).subspan(at, std::min(step, content.size() - at)));
    w.end();
    w.commit();
  }
  EXPECT_EQ(to_hex(read_bytes(dir / "whole.ckpt")), to_hex(read_bytes(dir / "streamed.ckpt")));
}

TEST(ckpt_write, write_raw_copies_map_tensors_byte_exact) {
  temp_dir dir;
  const std::string map_value =
      len_field(1, "table") + len_field(3, len_field(1, tensor_proto({3}, "Int64", std::string(24, '\x07'))) +
                                               len_field(1, tensor_proto({3, 2}, "Float32", floats(6))));
  const std::string file = checkpoint(value_msg("a", tensor_proto({1}, "Int32", "abcd"))) + checkpoint(map_value) +
                           checkpoint(value_msg("z", tensor_proto({}, "str", "h\0\0\0i\0\0\0"s)));
  write_bytes(dir / "src.ckpt", as_bytes(file));
  ckpt_file src(dir / "src.ckpt");
  ASSERT_EQ(src.entries().size(), 3u);
  const auto& m = src.at("table");
  EXPECT_TRUE(m.map_tensor);
  EXPECT_TRUE(m.pieces.empty());
  ASSERT_EQ(m.values.size(), 1u);
  EXPECT_EQ(str(m.values[0]), map_value);
  EXPECT_EQ(src.at("z").type, dtype::str);
  {
    ckpt_writer w(dir / "copy.ckpt");
    for (const auto& e : src.entries()) w.write_raw(e);
    w.commit();
  }
  EXPECT_EQ(str(read_bytes(dir / "copy.ckpt")), file);
}

TEST(ckpt_write, errors_name_the_file_and_parameter) {
  temp_dir dir;
  const auto path = (dir / "o.ckpt").string();
  ckpt_writer w(path);
  EXPECT_TRUE(throws_error([&] { w.write("w", dtype::float32, dims22, w_content().first(12)); },
                           {"ckpt: " + path + ": parameter 'w': tensor_content has 12 bytes, dims [2,2] Float32 needs 16"}));
  w.write("a", dtype::float32, dims22, w_content());
  EXPECT_TRUE(throws_error([&] { w.write("a", dtype::float32, dims22, w_content()); }, {path, "'a'", "written twice"}));
  EXPECT_TRUE(throws_error([&] { w.write("s", dtype::str, std::vector<std::int64_t>{0}, w_content().first(6)); },
                           {path, "'s'", "not a multiple of 4"}));
  EXPECT_TRUE(throws_error([&] { w.write("n", dtype::float32, std::vector<std::int64_t>{-2, 2}, {}); },
                           {path, "'n'", "negative"}));
  EXPECT_TRUE(throws_error([&] { w.write("r", dtype::uint8, std::vector<std::int64_t>(65, 1), w_content().first(1)); },
                           {path, "'r'", "more than 64 dims"}));
  w.begin("b", dtype::float32, dims22, 16);
  w.append(w_content().first(8));
  EXPECT_TRUE(throws_error([&] { w.append(w_content()); }, {path, "'b'", "exceeds the 16 bytes"}));
  EXPECT_TRUE(throws_error([&] { w.end(); }, {path, "'b'", "got 8 content bytes of the 16 declared"}));
  EXPECT_THROW(w.append(w_content()), reshard::contract_violation);  // no tensor open any more
}

TEST(ckpt_write, empty_checkpoint_is_refused) {
  temp_dir dir;
  ckpt_writer w(dir / "o.ckpt");
  EXPECT_TRUE(throws_error([&] { w.commit(); }, {"o.ckpt", "no parameters written"}));
  EXPECT_FALSE(fs::exists(dir / "o.ckpt"));
}

TEST(ckpt_write, misuse_is_a_contract_violation) {
  temp_dir dir;
  ckpt_writer w(dir / "o.ckpt");
  EXPECT_THROW(w.append(w_content()), reshard::contract_violation);
  EXPECT_THROW(w.end(), reshard::contract_violation);
  w.begin("a", dtype::float32, dims22, 16);
  EXPECT_THROW(w.begin("b", dtype::float32, dims22, 16), reshard::contract_violation);
  EXPECT_THROW(w.commit(), reshard::contract_violation);
}

TEST(ckpt_write, chunk_size_must_be_positive) {
  temp_dir dir;
  EXPECT_TRUE(throws_error([&] { ckpt_writer w(dir / "o.ckpt", {.chunk_bytes = 0}); }, {"o.ckpt", "chunk_bytes"}));
  EXPECT_TRUE(dir.files().empty());
}

TEST(ckpt_write, existing_destination_is_refused_without_overwrite) {
  temp_dir dir;
  write_text(dir / "o.ckpt", "precious");
  EXPECT_TRUE(throws_error([&] { ckpt_writer w(dir / "o.ckpt"); }, {"ckpt: ", "o.ckpt", "destination exists"}));
  EXPECT_EQ(str(read_bytes(dir / "o.ckpt")), "precious");
  write_golden_pair(dir / "o.ckpt", {.overwrite = true});
  EXPECT_EQ(ckpt_file(dir / "o.ckpt").entries().size(), 2u);
  EXPECT_EQ(dir.files(), std::vector<std::string>{"o.ckpt"});
}

TEST(ckpt_write, no_temporary_is_left_after_an_exception) {
  temp_dir dir;
  auto produce = [&] {
    ckpt_writer w(dir / "o.ckpt");
    w.write("w", dtype::float32, dims22, w_content());
    w.write("bad", dtype::float32, dims22, w_content().first(4));  // throws reshard::error
    w.commit();
  };
  EXPECT_THROW(produce(), reshard::error);
  EXPECT_TRUE(dir.files().empty());
}

// ---------------------------------------------------------------------------------------------
// round trips

namespace {
struct tensor_case {
  std::string name;
  dtype type;
  std::vector<std::int64_t> dims;
  std::vector<std::byte> content;
};

tensor_case random_tensor(std::string name) {
  tensor_case t{std::move(name), *rc::gen::elementOf(all_dtypes), {}, {}};
  std::size_t bytes = 0;
  if (t.type == dtype::str) {
    t.dims = *rc::gen::element(std::vector<std::int64_t>{0}, std::vector<std::int64_t>{});
    bytes = 4 * *rc::gen::inRange<std::size_t>(0, 6);
  } else {
    switch (*rc::gen::inRange(0, 4)) {
      case 0: t.dims = {}; break;                            // scalar
      case 1: t.dims = {0}; break;                           // MindSpore scalar (one element)
      default: {
        const auto rank = *rc::gen::inRange<std::size_t>(1, 5);
        for (std::size_t i = 0; i < rank; ++i) t.dims.push_back(*rc::gen::inRange<std::int64_t>(0, 5));
      }
    }
    bytes = t.dims == std::vector<std::int64_t>{0} ? element_size(t.type) : *byte_size(t.type, t.dims);
  }
  for (std::size_t i = 0; i < bytes; ++i) t.content.push_back(static_cast<std::byte>(*rc::gen::arbitrary<std::uint8_t>()));
  return t;
}

std::vector<tensor_case> random_tensors() {
  std::vector<tensor_case> out;
  std::set<std::string> names;
  const auto n = *rc::gen::inRange(1, 8);
  for (int i = 0; i < n; ++i) {
    auto name = *rc::gen::arbitrary<std::string>();
    if (names.insert(name).second) out.push_back(random_tensor(std::move(name)));
  }
  return out;
}
}  // namespace

RC_GTEST_PROP(ckpt_roundtrip, read_of_write_is_identity, ()) {
  const auto tensors = random_tensors();
  const ckpt_write_options opts{.crc = *rc::gen::arbitrary<bool>(), .chunk_bytes = *rc::gen::inRange<std::uint64_t>(1, 65)};
  temp_dir dir;
  {
    ckpt_writer w(dir / "r.ckpt", opts);
    for (const auto& t : tensors) w.write(t.name, t.type, t.dims, t.content);
    w.commit();
  }
  ckpt_file f(dir / "r.ckpt");
  RC_ASSERT(f.has_crc() == opts.crc);
  RC_ASSERT(f.entries().size() == tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& e = f.entries()[i];
    const auto& t = tensors[i];
    RC_ASSERT(e.name == t.name);
    RC_ASSERT(e.type == t.type);
    RC_ASSERT(e.dims == t.dims);
    RC_ASSERT(gather(e) == t.content);
    const std::size_t n = t.content.size();
    const std::size_t pieces = n == 0 ? 1 : (n + opts.chunk_bytes - 1) / opts.chunk_bytes;
    RC_ASSERT(e.pieces.size() == pieces);
    RC_ASSERT(e.values.size() == pieces);
    for (std::size_t k = 0; k + 1 < e.pieces.size(); ++k) RC_ASSERT(e.pieces[k].size() == opts.chunk_bytes);
  }
}

// ckpt_file::find finds every parameter by its name (a table of the names' hashes, searched by
// binary search) and no other name, also names that share a prefix or differ in one byte; and
// checkpoint_reader's entries are views of that index, not copies: the same name, dims and
// pieces, at the same addresses, found through it.
RC_GTEST_PROP(ckpt_file, find_is_by_exact_name_and_the_reader_views_the_index, ()) {
  auto tensors = random_tensors();
  const std::string base = *rc::gen::arbitrary<std::string>();
  for (std::size_t i = 0, n = tensors.size(); i < n; ++i)  // near names: a shared prefix, one more byte
    if (*rc::gen::arbitrary<bool>()) {
      tensor_case t = random_tensor(base + tensors[i].name);
      if (std::none_of(tensors.begin(), tensors.end(), [&](const tensor_case& x) { return x.name == t.name; }))
        tensors.push_back(std::move(t));
    }
  temp_dir dir;
  {
    ckpt_writer w(dir / "r.ckpt");
    for (const auto& t : tensors) w.write(t.name, t.type, t.dims, t.content);
    w.commit();
  }
  const ckpt_file f(dir / "r.ckpt");
  const checkpoint_reader rd(dir / "r.ckpt");
  RC_ASSERT(f.entries().size() == tensors.size());
  RC_ASSERT(rd.entries().size() == tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    RC_ASSERT(f.find(tensors[i].name) == &f.entries()[i]);
    for (const std::string& other : {tensors[i].name + "x", tensors[i].name + std::string(1, '\0'), "x" + tensors[i].name})
      if (std::none_of(tensors.begin(), tensors.end(), [&](const tensor_case& x) { return x.name == other; })) {
        RC_ASSERT(f.find(other) == nullptr);
        RC_ASSERT(rd.find(other) == nullptr);
      }
    const tensor_ref* e = rd.find(tensors[i].name);
    RC_ASSERT(e == &rd.entries()[i]);
    RC_ASSERT(e->ckpt != nullptr);
    RC_ASSERT(std::string(e->name) == tensors[i].name);
    RC_ASSERT(e->name.data() == e->ckpt->name.data());  // a view, not a copy
    RC_ASSERT(e->dims == tensors[i].dims);
    RC_ASSERT(e->dims.data() == e->ckpt->dims.data());
    RC_ASSERT(e->pieces.data() == e->ckpt->pieces.data());
    RC_ASSERT(e->content_size() == tensors[i].content.size());
  }
}

// A file of at most ckpt_file::index_copy_bytes is indexed from a copy read by pread, its spans
// then moved onto the mapping (which indexing leaves untouched); a larger one from the mapping.
// Either way the index is index_ckpt's of the file's bytes: the same entries, each piece and
// serialized Value at the same offset, inside the mapping, and the same contents.
RC_GTEST_PROP(ckpt_file, small_files_are_indexed_from_a_copy_as_from_the_mapping, ()) {
  auto tensors = random_tensors();
  const bool large = *rc::gen::arbitrary<bool>();
  if (large) {  // a tensor that takes the file over the bound
    tensor_case big;
    big.name = "big" + std::string(1, '\0') + std::to_string(tensors.size());
    big.type = dtype::uint8;
    big.dims = {static_cast<std::int64_t>(ckpt_file::index_copy_bytes)};
    big.content.assign(static_cast<std::size_t>(ckpt_file::index_copy_bytes), std::byte{7});
    for (const auto& t : tensors)
      if (t.name == big.name) big.name += "x";  // (the others were made unique before)
    tensors.push_back(std::move(big));
  }
  // (a large file in pieces of at least 4 KiB: not a Value per byte of the big tensor)
  const std::uint64_t chunk = large ? *rc::gen::inRange<std::uint64_t>(4096, 65536) : *rc::gen::inRange<std::uint64_t>(1, 65);
  const ckpt_write_options opts{.crc = *rc::gen::arbitrary<bool>(), .chunk_bytes = chunk};
  temp_dir dir;
  {
    ckpt_writer w(dir / "r.ckpt", opts);
    for (const auto& t : tensors) w.write(t.name, t.type, t.dims, t.content);
    w.commit();
  }
  const std::vector<std::byte> bytes = read_bytes(dir / "r.ckpt");
  const ckpt_index want = index_ckpt(bytes, "mem");
  const ckpt_file f(dir / "r.ckpt");
  RC_ASSERT(f.untouched() == (bytes.size() <= ckpt_file::index_copy_bytes));
  RC_ASSERT(f.untouched() == !large);
  RC_ASSERT(f.has_crc() == want.crc);
  RC_ASSERT(f.entries().size() == want.entries.size());
  const std::byte* base = f.bytes().data();
  const auto same_place = [&](std::span<const std::byte> got, std::span<const std::byte> in_bytes) {
    RC_ASSERT(got.size() == in_bytes.size());
    RC_ASSERT(got.data() >= base);
    RC_ASSERT(got.data() + got.size() <= base + f.bytes().size());
    RC_ASSERT(got.data() - base == in_bytes.data() - bytes.data());
  };
  for (std::size_t i = 0; i < want.entries.size(); ++i) {
    const ckpt_entry& e = f.entries()[i];
    const ckpt_entry& w = want.entries[i];
    RC_ASSERT(e.name == w.name);
    RC_ASSERT(e.type == w.type);
    RC_ASSERT(e.dims == w.dims);
    RC_ASSERT(e.pieces.size() == w.pieces.size());
    RC_ASSERT(e.values.size() == w.values.size());
    for (std::size_t k = 0; k < e.pieces.size(); ++k) same_place(e.pieces[k], w.pieces[k]);
    for (std::size_t k = 0; k < e.values.size(); ++k) same_place(e.values[k], w.values[k]);
    RC_ASSERT(gather(e) == gather(w));
  }
}

RC_GTEST_PROP(ckpt_roundtrip, raw_copy_is_byte_identical, ()) {
  const auto tensors = random_tensors();
  const auto chunk = *rc::gen::inRange<std::uint64_t>(1, 33);
  temp_dir dir;
  {
    ckpt_writer w(dir / "a.ckpt", {.chunk_bytes = chunk});
    for (const auto& t : tensors) w.write(t.name, t.type, t.dims, t.content);
    w.commit();
  }
  {
    ckpt_file f(dir / "a.ckpt");
    ckpt_writer w(dir / "b.ckpt");
    for (const auto& e : f.entries()) w.write_raw(e);
    w.commit();
  }
  RC_ASSERT(read_bytes(dir / "a.ckpt") == read_bytes(dir / "b.ckpt"));
}

// ---------------------------------------------------------------------------------------------
// malformed input

TEST(ckpt_malformed, every_truncation_of_a_one_value_file_is_an_error) {
  temp_dir dir;
  const auto full = from_hex(golden_w);
  for (std::size_t n = 0; n < full.size(); ++n) {
    write_bytes(dir / "t.ckpt", std::span(full).first(n));
    const std::string msg = error_of([&] { ckpt_file f(dir / "t.ckpt"); });
    EXPECT_NE(msg.find("ckpt: " + (dir / "t.ckpt").string() + ": "), std::string::npos) << "prefix " << n << ": " << msg;
    if (n >= 5) {  // the tag is complete
      EXPECT_NE(msg.find("parameter 'w'"), std::string::npos) << "prefix " << n << ": " << msg;
    }
  }
}

TEST(ckpt_malformed, truncations_of_a_crc_file_error_unless_at_a_value_boundary) {
  temp_dir dir;
  const auto full = from_hex(std::string(golden_w) + std::string(golden_step) + std::string(golden_trailer));
  const std::size_t w_end = golden_w.size() / 2, body_end = w_end + golden_step.size() / 2;
  for (std::size_t n = 0; n < full.size(); ++n) {
    write_bytes(dir / "t.ckpt", std::span(full).first(n));
    if (n == w_end || n == body_end) {
      ckpt_file f(dir / "t.ckpt");  // a shorter, valid checkpoint without trailer
      EXPECT_FALSE(f.has_crc());
      EXPECT_EQ(f.entries().size(), n == w_end ? 1u : 2u);
    } else {
      EXPECT_TRUE(throws_error([&] { ckpt_file f(dir / "t.ckpt"); }, {(dir / "t.ckpt").string()})) << "prefix " << n;
    }
  }
}

TEST(ckpt_malformed, crc_mismatch) {
  temp_dir dir;
  auto bytes = from_hex(std::string(golden_w) + std::string(golden_step) + std::string(golden_trailer));
  bytes[30] ^= std::byte{1};  // inside w's content
  write_bytes(dir / "c.ckpt", bytes);
  EXPECT_TRUE(throws_error([&] { ckpt_file f(dir / "c.ckpt"); },
                           {"ckpt: " + (dir / "c.ckpt").string() + ": CRC mismatch", std::to_string(0xa9f61be4u)}));
  ckpt_file unchecked(dir / "c.ckpt", {.verify_crc = false});
  EXPECT_EQ(unchecked.entries().size(), 2u);
  bytes[30] ^= std::byte{1};
  bytes[bytes.size() - 8] = std::byte{1};  // a trailer value over 2^32
  write_bytes(dir / "c.ckpt", bytes);
  EXPECT_TRUE(throws_error([&] { ckpt_file f(dir / "c.ckpt"); }, {"CRC mismatch", "over 2^32"}));
}

TEST(ckpt_malformed, dims_and_content_disagree) {
  temp_dir dir;
  fs::create_directories(dir / "rank_0");
  const auto path = dir / "rank_0" / "a.ckpt";
  write_bytes(path, as_bytes(checkpoint(value_msg("w", tensor_proto({2, 2}, "Float32", floats(3))))));
  EXPECT_EQ(error_of([&] { ckpt_file f(path); }),
            "ckpt: " + path.string() + ": parameter 'w': tensor_content has 12 bytes, dims [2,2] Float32 needs 16");
  EXPECT_TRUE(throws_error([&] { ckpt_file f(path); }, {}));
  // MindSpore's scalar dims [0] hold one element
  EXPECT_EQ(read_error(dir, checkpoint(value_msg("lr", tensor_proto({0}, "Float32", floats(1))))), "");
  EXPECT_NE(read_error(dir, checkpoint(value_msg("lr", tensor_proto({0}, "Float32", floats(2))))).find(
                "parameter 'lr': tensor_content has 8 bytes, dims [0] (scalar) Float32 needs 4"),
            std::string::npos);
  // pieces of one parameter add up
  const std::string two = checkpoint(value_msg("p", tensor_proto({3}, "Float32", floats(2)))) +
                          checkpoint(value_msg("p", tensor_proto({3}, "Float32", floats(2))));
  EXPECT_NE(read_error(dir, two).find("parameter 'p': tensor_content has 16 bytes, dims [3] Float32 needs 12"),
            std::string::npos);
}

TEST(ckpt_malformed, unknown_tensor_type) {
  temp_dir dir;
  const auto msg = read_error(dir, checkpoint(value_msg("w", tensor_proto({2}, "Float8", "ab"))));
  EXPECT_NE(msg.find((dir / "bad.ckpt").string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("parameter 'w': unknown tensor_type 'Float8'"), std::string::npos) << msg;
  // hostile bytes in a name or type print escaped
  const auto esc = read_error(dir, checkpoint(value_msg("a\nb", tensor_proto({2}, "F'\x01", "ab"))));
  EXPECT_NE(esc.find("parameter 'a\\x0ab': unknown tensor_type 'F\\x27\\x01'"), std::string::npos) << esc;
}

TEST(ckpt_malformed, encrypted_files_are_refused) {
  temp_dir dir;
  const std::pair<const char*, const char*> magics[] = {
      {"d85e3a7f", "AES-GCM"}, {"d95e3a7f", "AES-CBC"}, {"da5e3a7f", "SM4-CBC"}};
  for (auto [hex, cipher] : magics) {
    auto bytes = from_hex(hex);
    bytes.resize(64, std::byte{0x33});
    write_bytes(dir / "e.ckpt", bytes);
    EXPECT_TRUE(throws_error([&] { ckpt_file f(dir / "e.ckpt"); },
                             {(dir / "e.ckpt").string(), "encrypted", cipher, "decrypt it with MindSpore"}));
  }
}

TEST(ckpt_malformed, hostile_sizes_error_before_allocating) {
  temp_dir dir;
  const std::int64_t tera = std::int64_t{1} << 40;
  // a Value claiming 1 TB
  EXPECT_NE(read_error(dir, "\x0a" + varint(tera) + value_msg("w", "")).find("claims 1099511627776 bytes"),
            std::string::npos);
  // a Value whose (known) tag is followed by content claiming 1 TB
  const std::string big_content = len_field(2, "Float32") + "\x1a" + varint(tera) + "abcd";
  auto msg = read_error(dir, checkpoint(len_field(1, "w") + len_field(2, big_content)));
  EXPECT_NE(msg.find("parameter 'w': tensor_content claims 1099511627776 bytes but only 4 remain"), std::string::npos)
      << msg;
  // packed dims claiming a billion bytes
  msg = read_error(dir, checkpoint(value_msg("w", "\x0a" + varint(1'000'000'000) + "\x01\x02")));
  EXPECT_NE(msg.find("parameter 'w': packed dims claims 1000000000 bytes"), std::string::npos) << msg;
  // dims whose product overflows, and whose product is huge but fits
  msg = read_error(dir, checkpoint(value_msg("w", tensor_proto({tera, tera, tera}, "Float32", floats(1)))));
  EXPECT_NE(msg.find("parameter 'w': dims [1099511627776,1099511627776,1099511627776] Float32 overflow"),
            std::string::npos)
      << msg;
  msg = read_error(dir, checkpoint(value_msg("w", tensor_proto({1 << 20, 1 << 20}, "Float32", floats(4)))));
  EXPECT_NE(msg.find("needs 4398046511104"), std::string::npos) << msg;
  // too many dims; a negative dim (10-byte varint)
  msg = read_error(dir, checkpoint(value_msg("w", tensor_proto(std::vector<std::int64_t>(65, 1), "Int8", "a"))));
  EXPECT_NE(msg.find("parameter 'w': more than 64 dims"), std::string::npos) << msg;
  msg = read_error(dir, checkpoint(value_msg("w", tensor_proto({-1, 2}, "Int8", "ab"))));
  EXPECT_NE(msg.find("parameter 'w': negative dimension -1 in dims"), std::string::npos) << msg;
}

TEST(ckpt_malformed, structural_errors) {
  temp_dir dir;
  const auto ok = [&](const std::string& bytes) { return read_error(dir, bytes); };
  auto has = [](const std::string& msg, std::string_view part) { return msg.find(part) != std::string::npos; };
  EXPECT_TRUE(has(ok(""), "file is empty"));
  EXPECT_TRUE(has(ok(str(from_hex(golden_trailer))), "CRC mismatch"));  // a trailer over no bytes
  {  // a file that is only a valid trailer
    const std::string crc_only = "crc_num" + std::string(10, '\0');
    EXPECT_TRUE(has(ok(crc_only), "holds no parameters")) << ok(crc_only);
  }
  EXPECT_TRUE(has(ok(checkpoint(len_field(2, tensor_proto({1}, "Int8", "a")))), "Value at byte 2: missing required field tag"));
  EXPECT_TRUE(has(ok(checkpoint(len_field(1, "w"))), "parameter 'w': holds neither a tensor nor a maptensor"));
  EXPECT_TRUE(has(ok(checkpoint(value_msg("w", len_field(3, "ab")))),
                  "parameter 'w': TensorProto is missing required field tensor_type"));
  EXPECT_TRUE(has(ok(checkpoint(value_msg("w", len_field(2, "Int8")))),
                  "parameter 'w': TensorProto is missing required field tensor_content"));
  EXPECT_TRUE(has(ok(checkpoint(value_msg("w", varint_field(2, 5)))), "parameter 'w': tensor_type has wire type 0"));
  EXPECT_TRUE(has(ok(varint_field(1, 7)), "Checkpoint.value has wire type 0"));
  EXPECT_TRUE(has(ok(checkpoint(value_msg("w", tensor_proto({1}, "Int8", "a")) + len_field(2, tensor_proto({1}, "Int8", "a")))),
                  "parameter 'w': more than one tensor/maptensor"));
  EXPECT_TRUE(has(ok(checkpoint(value_msg("w", tensor_proto({1}, "Int8", "a") + len_field(2, "Int8")))),
                  "parameter 'w': tensor_type appears twice"));
  // a parameter repeated after another one, and pieces that disagree
  const std::string a = checkpoint(value_msg("a", tensor_proto({1}, "Int8", "a")));
  const std::string b = checkpoint(value_msg("b", tensor_proto({1}, "Int8", "b")));
  EXPECT_TRUE(has(ok(a + b + a), "parameter 'a': appears again at byte"));
  {  // the first repeat in file order is named, at the byte of its Value's payload
    const std::string c = checkpoint(value_msg("c", tensor_proto({1}, "Int8", "c")));
    const std::size_t head = a.size() - value_msg("a", tensor_proto({1}, "Int8", "a")).size();  // tag and length
    const std::string at = std::to_string(a.size() + b.size() + c.size() + head);
    EXPECT_TRUE(has(ok(a + b + c + b + a), "parameter 'b': appears again at byte " + at + " after"))
        << ok(a + b + c + b + a);
    const std::string at2 = std::to_string(c.size() + b.size() + 2 * a.size() + head);  // a + a: one tensor
    EXPECT_TRUE(has(ok(c + b + a + a + c + b), "parameter 'c': appears again at byte " + at2 + " after"))
        << ok(c + b + a + a + c + b);
  }
  EXPECT_TRUE(has(ok(a + checkpoint(value_msg("a", tensor_proto({1}, "UInt8", "a")))),
                  "parameter 'a': piece 2 has dims [1] UInt8, the first piece has [1] Int8"));
  EXPECT_TRUE(has(ok(a + checkpoint(len_field(1, "a") + len_field(3, ""))), "parameter 'a': consecutive Values mix"));
  // a group wire type (unsupported) and a zero field number
  EXPECT_TRUE(has(ok(a + "\x13"), "unknown field 2 with unsupported wire type 3"));
  EXPECT_TRUE(has(ok(a + "\x02\x00"s), "field number 0"));
}

TEST(ckpt_malformed, unknown_fields_are_skipped) {
  temp_dir dir;
  const std::string tensor = varint_field(9, 300) + tensor_proto({2}, "Int8", "ab") + "\x55" + "abcd";  // field 10, fixed32
  const std::string value = value_msg("w", tensor) + len_field(7, "extra") + "\x49" + "12345678";         // field 9, fixed64
  EXPECT_EQ(read_error(dir, varint_field(5, 1) + checkpoint(value) + len_field(6, "zz")), "");
  ckpt_file f(dir / "bad.ckpt");
  EXPECT_EQ(str(gather(f.at("w"))), "ab");
}

TEST(ckpt_read, packed_dims_are_accepted) {
  temp_dir dir;
  const std::string packed_dims = len_field(1, varint(2) + varint(300));
  EXPECT_EQ(read_error(dir, checkpoint(value_msg("w", packed_dims + len_field(2, "Int8") + len_field(3, std::string(600, 'q'))))),
            "");
  ckpt_file f(dir / "bad.ckpt");
  EXPECT_EQ(f.at("w").dims, (std::vector<std::int64_t>{2, 300}));
}

// ---------------------------------------------------------------------------------------------
// cross-checks with protobuf's Python library (verify/python/ms_files.py)

namespace {
const std::vector<std::string> python_cases{"dtypes", "multipiece", "crc", "packed", "maptensor"};

void expect_matches(const ckpt_file& f, const nlohmann::json& expect, const std::string& what) {
  EXPECT_EQ(f.has_crc(), expect["crc"].get<bool>()) << what;
  const auto& entries = expect["entries"];
  ASSERT_EQ(f.entries().size(), entries.size()) << what;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const auto& e = f.entries()[i];
    const auto& x = entries[i];
    const std::string where = what + " parameter " + x["name"].get<std::string>();
    EXPECT_EQ(e.name, x["name"].get<std::string>()) << where;
    if (x["kind"] == "map") {
      EXPECT_TRUE(e.map_tensor) << where;
      ASSERT_EQ(e.values.size(), x["values"].size()) << where;
      for (std::size_t k = 0; k < e.values.size(); ++k)
        EXPECT_EQ(to_hex(e.values[k]), x["values"][k].get<std::string>()) << where;
      continue;
    }
    EXPECT_FALSE(e.map_tensor) << where;
    EXPECT_EQ(ms_name(e.type), x["tensor_type"].get<std::string>()) << where;
    EXPECT_EQ(e.dims, x["dims"].get<std::vector<std::int64_t>>()) << where;
    EXPECT_EQ(to_hex(gather(e)), x["content"].get<std::string>()) << where;
    std::vector<std::size_t> sizes;
    for (auto p : e.pieces) sizes.push_back(p.size());
    EXPECT_EQ(sizes, x["pieces"].get<std::vector<std::size_t>>()) << where;
  }
}

nlohmann::json load_json(const fs::path& p) {
  const auto b = read_bytes(p);
  return nlohmann::json::parse(str(b));
}
}  // namespace

// The files of `ms_files.py gen-ckpt`, generated once for the suite.
class ckpt_python : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new temp_dir;
    const auto gen = run_python("ms_files.py", {"gen-ckpt", dir_->path().string()});
    generated_ = gen.status == 0;
    if (!generated_) ADD_FAILURE() << "gen-ckpt failed:\n" << gen.output;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(generated_) << "the Python generator did not run"; }
  static fs::path file(const std::string& name) { return dir_->path() / name; }

  static inline temp_dir* dir_ = nullptr;
  static inline bool generated_ = false;
};

TEST_F(ckpt_python, reads_files_made_by_protobuf) {
  for (const auto& c : python_cases) {
    ckpt_file f(file(c + ".ckpt"));
    expect_matches(f, load_json(file(c + ".expect.json")), c);
  }
  ckpt_file d(file("dtypes.ckpt"));
  EXPECT_TRUE(d.at("global_step").is_scalar());
  EXPECT_TRUE(d.at("learning_rate").is_scalar());  // dims [0]
  EXPECT_FALSE(d.at("empty").is_scalar());         // dims [0,3]
  EXPECT_EQ(d.at("param.Int4").content_size(), 8u);  // qint4x2: one byte per element
  EXPECT_EQ(d.at("layer-1.wéight").dims, dims22);
}

TEST_F(ckpt_python, rewrites_are_parsed_by_protobuf) {
  temp_dir out_dir;
  std::vector<std::string> args{"check-ckpt"};
  for (const auto& c : python_cases) {
    ckpt_file f(file(c + ".ckpt"));
    const auto out = out_dir / (c + ".ckpt");
    ckpt_writer w(out, {.crc = f.has_crc(), .chunk_bytes = 32});
    for (const auto& e : f.entries()) {
      if (e.map_tensor) {
        w.write_raw(e);
        continue;
      }
      w.begin(e.name, e.type, e.dims, e.content_size());
      for (auto p : e.pieces) w.append(p);
      w.end();
    }
    w.commit();
    args.push_back(out.string());
    args.push_back(file(c + ".expect.json").string());
  }
  args.insert(args.end(), {"--chunk", "32", "--exact"});
  const auto check = run_python("ms_files.py", args);
  EXPECT_EQ(check.status, 0) << check.output;
}

TEST_F(ckpt_python, single_piece_rewrites_are_byte_identical) {
  temp_dir out_dir;
  for (std::string c : {"dtypes", "crc", "maptensor"}) {
    ckpt_file f(file(c + ".ckpt"));
    const auto out = out_dir / (c + ".ckpt");
    {
      ckpt_writer w(out, {.crc = f.has_crc()});
      for (const auto& e : f.entries()) {
        if (e.map_tensor)
          w.write_raw(e);
        else
          w.write(e.name, e.type, e.dims, gather(e));
      }
      w.commit();
    }
    EXPECT_EQ(to_hex(read_bytes(out)), to_hex(read_bytes(file(c + ".ckpt")))) << c;
  }
}

TEST(ckpt_python_random, checkpoint_is_parsed_by_protobuf_and_the_checker_can_fail) {
  temp_dir dir;
  std::mt19937 rng(12345);
  const std::vector<std::string> parts{"layer", "-", "0", ".", "wéight", "β", "adam_m", "_", "embedding"};
  nlohmann::json expect{{"crc", true}, {"entries", nlohmann::json::array()}};
  std::set<std::string> names;
  {
    ckpt_writer w(dir / "r.ckpt", {.crc = true, .chunk_bytes = 7});
    for (int i = 0; i < 40; ++i) {
      std::string name;
      for (int k = 0, n = 1 + static_cast<int>(rng() % 4); k < n; ++k) name += parts[rng() % parts.size()];
      if (!names.insert(name).second) continue;
      const dtype t = all_dtypes[rng() % all_dtypes.size()];
      std::vector<std::int64_t> dims;
      std::size_t bytes = 0;
      if (t == dtype::str) {
        dims = {0};
        bytes = 4 * (rng() % 5);
      } else {
        for (std::size_t r = rng() % 4; r > 0; --r) dims.push_back(static_cast<std::int64_t>(rng() % 4));
        bytes = *byte_size(t, dims);
      }
      std::vector<std::byte> content(bytes);
      for (auto& b : content) b = static_cast<std::byte>(rng());
      w.write(name, t, dims, content);
      expect["entries"].push_back({{"name", name}, {"kind", "tensor"}, {"tensor_type", std::string(ms_name(t))},
                                   {"dims", dims}, {"content", to_hex(content)}});
    }
    w.commit();
  }
  write_text(dir / "r.expect.json", expect.dump());
  const auto check = run_python("ms_files.py", {"check-ckpt", (dir / "r.ckpt").string(), (dir / "r.expect.json").string(),
                                                "--chunk", "7", "--exact"});
  EXPECT_EQ(check.status, 0) << check.output;

  // the same check fails when the expectation is wrong
  auto wrong = expect;
  for (auto& e : wrong["entries"])
    if (!e["content"].get<std::string>().empty()) {
      auto c = e["content"].get<std::string>();
      c[0] = c[0] == '0' ? '1' : '0';
      e["content"] = c;
      break;
    }
  write_text(dir / "wrong.expect.json", wrong.dump());
  const auto bad = run_python("ms_files.py", {"check-ckpt", (dir / "r.ckpt").string(),
                                              (dir / "wrong.expect.json").string(), "--chunk", "7"});
  EXPECT_EQ(bad.status, 1) << bad.output;
  EXPECT_NE(bad.output.find("content"), std::string::npos) << bad.output;
}
