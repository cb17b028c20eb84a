// Fuzz target: reading a MindSpore .ckpt (index_ckpt). Byte 0, bit 0: verify the CRC trailer.
#include "check.hpp"
#include "decode.hpp"

#include <reshard/io/ckpt.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  reshard_fuzz::input in(data, size);
  const reshard::io::ckpt_read_options opts{.verify_crc = in.flag()};
  return reshard_fuzz::expect_errors([&] {
    for (const auto& e : reshard::io::index_ckpt(in.rest(), "fuzz.ckpt", opts).entries)
      FUZZ_CHECK(reshard::io::gather(e).size() == e.content_size() && !e.values.empty());
  });
}
