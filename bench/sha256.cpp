// bench/sha256.cpp: reshard::io::sha256 (the manifests' digest) beside plain memcpy of the same
// bytes, with the processor's SHA instructions (when it has them) and in portable C++.
//
// One benchmark per variant and size (checksum_sizes: 4 MiB, what one write(2) of the engine
// hashes at most; 64 MiB, beyond the caches) hashes the buffer and, in the same run, copies it
// with memcpy (time_beside_memcpy, common.hpp: timed by hand with the timing paused, once per
// iteration). Counters:
//   bytes_per_second   bytes hashed per second
//   memcpy_GBps        bytes copied by memcpy per second (1e9 bytes)
//   vs_memcpy          hash time / memcpy time
// RESHARD_BENCH_TINY: 64 KiB and 1 MiB.
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "common.hpp"
#include "reshard/io/sha256.hpp"

namespace {

using namespace reshard_bench;

void bm_sha256(benchmark::State& state, bool portable, std::size_t bytes) {
  const std::vector<std::byte> src = sample_bytes(bytes);
  time_beside_memcpy(state, src, [portable](std::span<const std::byte> b) {
    reshard::io::sha256 h(portable);
    h.update(b);
    return h.hex();
  });
}

}  // namespace

int main(int argc, char** argv) {
  register_checksums("sha256", {"default", "portable"}, bm_sha256);
  return run_benchmarks(argc, argv);
}
