// Fuzz target (round trip): tensors decoded from the input (fuzz/decode_io.hpp) are written with
// ckpt_writer and read back with ckpt_file: equal, in pieces of chunk_bytes, and a raw copy of
// the entries is byte-identical. The writer refuses exactly the invalid content.
#include "check.hpp"
#include "decode_io.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  reshard_fuzz::input in(data, size);
  const reshard_fuzz::ckpt_content c = reshard_fuzz::decode_ckpt(in);
  const auto dir = reshard_fuzz::scratch_dir();
  bool written = false;
  reshard_fuzz::expect_errors([&] { reshard_fuzz::write_ckpt(c, dir / "w.ckpt"), written = true; });
  FUZZ_CHECK(written == c.valid);
  if (written) reshard_fuzz::check_ckpt(c, dir / "w.ckpt", dir / "copy.ckpt");
  return 0;
}
