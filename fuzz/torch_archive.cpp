// Fuzz target: torch.save archives (io/torch_archive.hpp), the whole input being the archive:
// every entry lies inside the input, and a tensor read has prod(shape) elements, inside its
// storage entry.
#include "check.hpp"
#include "decode.hpp"

#include <reshard/io/torch_archive.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace reshard::io;
  const reshard_fuzz::input in(data, size);
  const auto bytes = in.rest();
  return reshard_fuzz::expect_errors([&] {
    const torch_archive a(bytes, "fuzz.distcp");
    for (const auto& e : a.entries())
      FUZZ_CHECK(e.data.data() >= bytes.data() && e.data.data() + e.data.size() <= bytes.data() + bytes.size());
    const auto t = read_torch_tensor(a);
    const auto s = a.at(t.storage_key).data;
    FUZZ_CHECK(t.data.size() == *byte_size(t.type, t.shape));
    FUZZ_CHECK(t.data.data() >= s.data() && t.data.data() + t.data.size() <= s.data() + s.size());
  });
}
