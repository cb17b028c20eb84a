// verify/io/sha256.cpp: io::sha256 against FIPS 180-4's examples and Python's hashlib,
// independent of how the stream is split, and the same with and without the processor's SHA
// instructions.
#include <reshard/io/sha256.hpp>

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "io_test_util.hpp"

using reshard::io::sha256;

namespace {
std::string hex_of(std::string_view text, bool portable = false) {
  sha256 h(portable);
  h.update(std::as_bytes(std::span(text.data(), text.size())));
  return h.hex();
}
}  // namespace

TEST(sha256, the_standards_examples) {
  EXPECT_EQ(hex_of(std::string(1000000, 'a'), true), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  EXPECT_EQ(hex_of("abc", true), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex_of(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex_of("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex_of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(hex_of("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu"),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(hex_of(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(sha256, lengths_around_the_padding_boundaries_against_hashlib) {
  // every length from 0 to 200 bytes (55, 56, 63, 64, 119, 120: the padding's edge cases)
  reshard_test::temp_dir dir;
  std::string expect;
  std::vector<std::string> ours;
  for (std::size_t n = 0; n <= 200; ++n) {
    std::string text(n, '\0');
    for (std::size_t i = 0; i < n; ++i) text[i] = static_cast<char>((i * 131 + n * 7) & 0xff);
    reshard_test::write_bytes(dir / ("m" + std::to_string(n)), std::as_bytes(std::span(text.data(), text.size())));
    ours.push_back(hex_of(text));
  }
  auto r = reshard_test::run_python("sha256_reference.py", {dir.path().string(), "201"});
  ASSERT_EQ(r.status, 0) << r.output;
  std::vector<std::string> theirs;
  std::size_t at = 0;
  while (at < r.output.size()) {
    const auto nl = r.output.find('\n', at);
    theirs.push_back(r.output.substr(at, nl - at));
    at = nl == std::string::npos ? r.output.size() : nl + 1;
  }
  ASSERT_EQ(theirs.size(), ours.size()) << r.output;
  for (std::size_t n = 0; n < ours.size(); ++n) EXPECT_EQ(ours[n], theirs[n]) << "length " << n;
}

RC_GTEST_PROP(sha256, any_split_of_the_stream_gives_the_same_digest, ()) {
  const auto bytes = *rc::gen::container<std::vector<std::uint8_t>>(rc::gen::arbitrary<std::uint8_t>());
  sha256 whole;
  whole.update(std::as_bytes(std::span(bytes)));
  sha256 parts;
  std::size_t at = 0;
  while (at < bytes.size()) {
    const std::size_t n = *rc::gen::inRange<std::size_t>(1, bytes.size() - at + 1);
    parts.update(std::as_bytes(std::span(bytes).subspan(at, n)));
    at += n;
  }
  RC_ASSERT(parts.hex() == whole.hex());
  RC_ASSERT(whole.hex() == whole.hex());  // finish() leaves the state as it was
  sha256 portable(true);  // never the processor's SHA instructions: the same digest
  portable.update(std::as_bytes(std::span(bytes)));
  RC_ASSERT(portable.hex() == whole.hex());
}
