// Fuzz target (round trip): tensors and metadata decoded from the input (fuzz/decode_io.hpp) are
// written with write_safetensors and read back with safetensors_file: equal, Int4 markers
// included. The writer refuses exactly the invalid content.
#include "check.hpp"
#include "decode_io.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  reshard_fuzz::input in(data, size);
  const reshard_fuzz::safetensors_content c = reshard_fuzz::decode_safetensors(in);
  const auto path = reshard_fuzz::scratch_dir() / "w.safetensors";
  bool written = false;
  reshard_fuzz::expect_errors([&] { reshard_fuzz::write_safetensors(c, path), written = true; });
  FUZZ_CHECK(written == c.valid);
  if (written) reshard_fuzz::check_safetensors(c, path);
  return 0;
}
