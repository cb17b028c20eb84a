// Fuzz target: reading a protobuf strategy file; what reads must encode and read back equal.
#include "check.hpp"
#include "decode_io.hpp"

#include <reshard/io/strategy.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace reshard::io;
  const reshard_fuzz::input in(data, size);
  return reshard_fuzz::expect_errors([&] {
    const strategy_file s = decode_strategy_protobuf(in.rest(), "fuzz.ckpt");
    const std::string again = encode_strategy_protobuf(s);
    FUZZ_CHECK(decode_strategy_protobuf(reshard_fuzz::as_bytes(again), "again") == s);
  });
}
