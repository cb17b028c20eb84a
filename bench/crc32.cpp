// bench/crc32.cpp: reshard::io::crc32 (the crc_num trailer's and the DCP zip entries' checksum)
// beside plain memcpy of the same bytes, by carry-less multiplication (PCLMULQDQ, when the
// processor has it: what crc32() runs) and by the slicing-by-8 tables alone (what crc32() runs
// without it, and on the last bytes of every buffer).
//
// One benchmark per variant and size (checksum_sizes: 4 MiB, what one write(2) of the engine
// checksums at most; 64 MiB, beyond the caches) checksums the buffer and, in the same run,
// copies it with memcpy (time_beside_memcpy, common.hpp: timed by hand with the timing paused,
// once per iteration). The two variants must give the same CRC, or the benchmark fails.
// Counters:
//   bytes_per_second   bytes checksummed per second
//   memcpy_GBps        bytes copied by memcpy per second (1e9 bytes)
//   vs_memcpy          CRC time / memcpy time
// RESHARD_BENCH_TINY: 64 KiB and 1 MiB.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common.hpp"
#include "reshard/io/crc32.hpp"

namespace {

using namespace reshard_bench;

// The CRC-32 by the slicing-by-8 tables alone (crc32() without PCLMULQDQ).
std::uint32_t crc32_by_tables(std::span<const std::byte> data) {
  return ~reshard::io::detail::crc_by_tables(~std::uint32_t{0}, data.data(), data.size());
}

void bm_crc32(benchmark::State& state, bool tables, std::size_t bytes) {
  const std::vector<std::byte> src = sample_bytes(bytes);
  if (reshard::io::crc32(src) != crc32_by_tables(src)) {
    state.SkipWithError("crc32() and the tables disagree");
    return;
  }
  time_beside_memcpy(state, src, [tables](std::span<const std::byte> b) {
    return tables ? crc32_by_tables(b) : reshard::io::crc32(b);
  });
}

}  // namespace

int main(int argc, char** argv) {
  register_checksums("crc32", {"default", "tables"}, bm_crc32);
  return run_benchmarks(argc, argv);
}
