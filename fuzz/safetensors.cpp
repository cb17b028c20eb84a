// Fuzz target: reading a safetensors file. Byte 0, bit 0 clear: the rest is the file; set: two
// bytes give the header length N, then N bytes of header JSON and the data (the 8-byte length
// prefix is made from N, so that mutations explore the header rather than break its length).
#include "check.hpp"
#include "decode.hpp"

#include <reshard/io/safetensors.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  reshard_fuzz::input in(data, size);
  const bool framed = in.flag();
  const std::size_t n = framed ? in.uint(65535) : 0;
  std::vector<std::byte> file(framed ? 8 : 0);
  for (std::size_t i = 0; i < file.size(); ++i) file[i] = std::byte((std::min(n, in.rest().size()) >> (8 * i)) & 255);
  file.insert(file.end(), in.rest().begin(), in.rest().end());
  return reshard_fuzz::expect_errors([&] {
    for (const auto& e : reshard::io::index_safetensors(file, "fuzz.safetensors").entries)
      FUZZ_CHECK(e.data.size() == *reshard::io::byte_size(e.type, e.shape) && e.end - e.begin == e.data.size());
  });
}
