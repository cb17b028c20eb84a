// Fuzz target: reading a JSON strategy file; what reads must encode and read back equal.
#include "check.hpp"
#include "decode_io.hpp"

#include <reshard/io/strategy.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace reshard::io;
  const reshard_fuzz::input in(data, size);
  return reshard_fuzz::expect_errors([&] {
    const strategy_file s = decode_strategy_json(in.rest_text(), "fuzz.json");
    FUZZ_CHECK(decode_strategy_json(encode_strategy_json(s), "again.json") == s);
  });
}
