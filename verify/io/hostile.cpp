// Hostile inputs: sizes and counts that a small file claims but does not hold, and JSON nested
// 100000 deep. Each must be refused with a clear reshard::error, without allocating in proportion
// to what it claims (this binary replaces operator new to record the largest single allocation)
// and without overflowing the stack (nlohmann's value printing and copying recurse per level).
// The truncation and malformed-field cases themselves are in ckpt.cpp, safetensors.cpp and
// strategy.cpp; this file adds the allocation bound and the nesting depth.
#include <reshard/ext/json.hpp>
#include <reshard/io/ckpt.hpp>
#include <reshard/io/safetensors.hpp>
#include <reshard/io/strategy.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <string>
#include <string_view>

#include "../testing.hpp"

namespace {
std::atomic<std::size_t> largest{0};
}  // namespace

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"  // new and delete below pair malloc/free
#endif
void* operator new(std::size_t n) {
  for (std::size_t l = largest.load(); n > l && !largest.compare_exchange_weak(l, n);) {
  }
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace {

using namespace std::string_literals;
constexpr std::size_t small = std::size_t{1} << 20;  // the bound on any single allocation
constexpr std::int64_t tera = std::int64_t{1} << 40;
constexpr int deep = 100000;

struct outcome {
  std::string error;        // the reshard::error message ("" if none was thrown)
  std::size_t largest = 0;  // the largest single allocation while fn ran
};

template <class F>
outcome run(F&& fn) {
  outcome o;
  largest = 0;
  o.error = reshard_test::error_of(fn);
  o.largest = largest.load();
  return o;
}

::testing::AssertionResult refused(const outcome& o, std::string_view part) {
  if (o.error.find(part) == std::string::npos)
    return ::testing::AssertionFailure() << "message \"" << o.error << "\" lacks \"" << part << "\"";
  if (o.largest >= small)
    return ::testing::AssertionFailure() << "allocated " << o.largest << " bytes at once: " << o.error;
  return ::testing::AssertionSuccess() << o.error;
}

std::string varint(std::uint64_t v) {
  std::string s;
  do {
    auto b = static_cast<char>(v & 0x7F);
    v >>= 7;
    if (v) b = static_cast<char>(b | 0x80);
    s.push_back(b);
  } while (v);
  return s;
}
std::string len_field(int field, std::string_view payload) {
  return std::string(1, static_cast<char>(field << 3 | 2)) + varint(payload.size()) + std::string(payload);
}
std::span<const std::byte> bytes_of(std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); }

std::string safetensors_file(std::string_view header, std::string_view data) {
  std::string f(8, '\0');
  for (std::size_t i = 0; i < 8; ++i) f[i] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  return f + std::string(header) + std::string(data);
}

std::string nested(char open, char close, int depth, std::string_view inner = "") {
  std::string s;
  for (int i = 0; i < depth; ++i) s += open == '{' ? "{\"a\":" : std::string(1, open);
  s += inner.empty() ? (open == '{' ? "1" : "") : std::string(inner);
  return s + std::string(static_cast<std::size_t>(depth), close);
}

// ---------------------------------------------------------------------------------------------
// claimed sizes

TEST(hostile_ckpt, claims_are_refused_without_allocating) {
  const std::string w = len_field(1, "w");
  const auto ckpt = [](const std::string& value) { return len_field(1, value); };
  // a Value claiming 1 TB
  EXPECT_TRUE(refused(run([&] { reshard::io::index_ckpt(bytes_of("\x0a" + varint(tera) + w), "c.ckpt"); }),
                      "claims 1099511627776 bytes"));
  // tensor_content claiming 1 TB
  const std::string big = len_field(2, "Float32") + "\x1a" + varint(tera) + "abcd";
  EXPECT_TRUE(refused(run([&] { reshard::io::index_ckpt(bytes_of(ckpt(w + len_field(2, big))), "c.ckpt"); }),
                      "tensor_content claims 1099511627776 bytes but only 4 remain"));
  // packed dims claiming a billion entries
  const std::string dims = "\x0a" + varint(1'000'000'000) + "\x01\x02";
  EXPECT_TRUE(refused(run([&] { reshard::io::index_ckpt(bytes_of(ckpt(w + len_field(2, dims))), "c.ckpt"); }),
                      "packed dims claims 1000000000 bytes"));
  // dims [2^40, 2^40] of 4 bytes of content: the product is checked, nothing is allocated for it
  std::string t = "\x08" + varint(tera) + "\x08" + varint(tera) + len_field(2, "Int8") + len_field(3, "abcd");
  EXPECT_TRUE(refused(run([&] { reshard::io::index_ckpt(bytes_of(ckpt(w + len_field(2, t))), "c.ckpt"); }),
                      "overflow 2^63 bytes"));
}

TEST(hostile_safetensors, claims_are_refused_without_allocating) {
  // a tensor of 1 TB in a file of a few bytes
  const std::string one_tb = R"({"w":{"dtype":"U8","shape":[1099511627776],"data_offsets":[0,1099511627776]}})";
  EXPECT_TRUE(refused(run([&] { reshard::io::index_safetensors(bytes_of(safetensors_file(one_tb, "abc")), "s"); }),
                      "data_offsets [0,1099511627776] lie beyond the 3-byte data section"));
  // a header length of 1 TB
  std::string f = safetensors_file("{}", "");
  f.replace(0, 8, "\x00\x00\x00\x00\x00\x01\x00\x00"s);
  EXPECT_TRUE(refused(run([&] { reshard::io::index_safetensors(bytes_of(f), "s"); }),
                      "header length 1099511627776 exceeds the limit"));
  // data_offsets near 2^64
  const std::string wrap = R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[18446744073709551615,0]}})";
  EXPECT_TRUE(refused(run([&] { reshard::io::index_safetensors(bytes_of(safetensors_file(wrap, "a")), "s"); }),
                      "is not a pair [begin, end] with 0 <= begin <= end"));
}

TEST(hostile_strategy, claims_are_refused_without_allocating) {
  const std::string tail = "\x28\x00\x30\x00\x38\x00"s;  // field, step, size
  // a layout item claiming 1 TB
  EXPECT_TRUE(refused(run([&] {
                        reshard::io::decode_strategy_protobuf(bytes_of("\x08\x01\x1a"s + varint(tera) + len_field(1, "p")), "s");
                      }),
                      "parameter 'p': parallel_layout_item claims 1099511627776 bytes"));
  // a dev_matrix claiming a billion packed entries
  const std::string dev = len_field(1, "\x0a" + varint(1'000'000'000) + "\x02\x04");
  const std::string item = len_field(1, "p") + len_field(2, dev + tail);
  EXPECT_TRUE(refused(run([&] { reshard::io::decode_strategy_protobuf(bytes_of("\x08\x01"s + len_field(3, item)), "s"); }),
                      "parameter 'p': packed dev_matrix claims 1000000000 bytes"));
}

// ---------------------------------------------------------------------------------------------
// nesting 100000 deep: refused while parsing, at depth 64

TEST(hostile_json, deep_nesting_in_strategy_json) {
  for (const auto& v : {nested('[', ']', deep), nested('{', '}', deep)}) {
    const std::string text = R"({"current_stage": 1, "parallel_layout_item": {"w": )" + v + "}}";
    EXPECT_TRUE(refused(run([&] { reshard::io::decode_strategy_json(text, "s.json"); }),
                        "strategy: s.json: JSON nests arrays and objects deeper than 64 levels"));
  }
  EXPECT_TRUE(refused(run([&] { reshard::io::decode_strategy_json(nested('[', ']', deep), "s.json"); }),
                      "deeper than 64 levels"));
}

TEST(hostile_json, deep_nesting_in_safetensors_headers) {
  const std::string header = R"({"w": )" + nested('[', ']', deep) + "}";
  const std::string file = safetensors_file(header, "");
  EXPECT_TRUE(refused(run([&] { reshard::io::index_safetensors(bytes_of(file), "s"); }),
                      "safetensors: s: JSON nests arrays and objects deeper than 64 levels"));
}

TEST(hostile_json, deep_nesting_in_layout_json) {
  for (const auto& v : {nested('[', ']', deep), nested('{', '}', deep), "{\"dev_matrix\": " + nested('[', ']', deep) + "}"}) {
    EXPECT_TRUE(refused(run([&] { reshard::layout_from_json_text(v, "--src"); }),
                        "--src: JSON nests arrays and objects deeper than 64 levels"));
  }
}

TEST(hostile_json, nesting_up_to_the_limit_is_parsed) {
  // 64 levels in all parse (and are then refused for what they hold, not for their depth)
  const std::string text = R"({"current_stage": )" + nested('[', ']', 63) + "}";
  const auto o = run([&] { reshard::io::decode_strategy_json(text, "s.json"); });
  EXPECT_NE(o.error.find("current_stage [[[["), std::string::npos) << o.error;
  EXPECT_NE(run([&] { reshard::layout_from_json_text(nested('[', ']', 64), "--src"); }).error.find("got an array"),
            std::string::npos);
}

}  // namespace
