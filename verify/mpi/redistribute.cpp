// verify/mpi/redistribute.cpp (mpi.redistribute, 4 processes): reshard::mpi::redistribute moves
// every shard where the target layout puts it.
//
// A seeded loop over random layout pairs of at most 4 ranks each, drawn with verify/gen's
// RapidCheck generators from a seed that is the same on every process (so every process draws the
// same pairs): M != N, replication, optimizer sharding, uneven splits, 0-d and empty tensors;
// each mesh placed at a random offset inside the 4 processes (source ranks 0-1 and target ranks
// 2-3, overlapping meshes, one process holding both or neither). Every case runs one of the entry
// points (whole plan -> vector, whole plan -> caller's buffer, per-rank plan from the layouts,
// typed) with one of the exchanges (point-to-point, Alltoallv), sometimes with every transfer cut
// in two (several pieces per message), sometimes with the communicator's
// processes playing global ranks 100.. (options.first_rank). Every process compares what it got
// with the full tensor split by the target layout (verify/laws' naive slicer, not convert()).
//
// RESHARD_MPI_SEED and RESHARD_MPI_CASES (environment, passed to all processes by mpirun)
// change the seed and the number of cases.
#include "reshard/mpi/redistribute.hpp"

#include <mpi.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gen/layouts.hpp"
#include "harness.hpp"
#include "laws/data.hpp"
#include "reshard.hpp"

namespace {

using namespace reshard;
using bytes = std::vector<std::byte>;

std::uint64_t env_or(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 0) : fallback;
}

bool has(const layout& l, index_t r) { return r >= l.first_rank && r < l.first_rank + num_ranks(l); }

// Rank r's shard of `full` under `l` (empty when r is not a rank of l).
bytes shard_of(const layout& l, const bytes& full, std::size_t elem, index_t r) {
  if (!has(l, r)) return {};
  return laws::naive_split(l, full, elem).buf[static_cast<std::size_t>(r - l.first_rank)];
}

enum class entry { plan_vector, plan_span, by_rank, typed, count };
const char* name(entry e) {
  switch (e) {
    case entry::plan_vector: return "plan->vector";
    case entry::plan_span: return "plan->span";
    case entry::by_rank: return "layouts (plan_for_rank)";
    case entry::typed: return "typed";
    default: return "?";
  }
}

struct scenario {
  layout src, dst;
  std::size_t elem = 4;
  entry how = entry::plan_vector;
  mpi::redistribute_options opt{};
  std::uint64_t salt = 0;
  bool split_pieces = false;  ///< cut every transfer in two: several pieces per message
};

// plan(src, dst) with every transfer whose dim 0 spans 2 or more cut in two halves: still a
// valid plan, but (source, target) pairs now exchange several pieces, packed into one message.
transfer_plan plan_of(const scenario& s) {
  transfer_plan p = plan(s.src, s.dst);
  if (!s.split_pieces) return p;
  std::vector<transfer> cut;
  for (const transfer& x : p.transfers) {
    if (x.where.extent.empty() || x.where.extent[0] < 2) {
      cut.push_back(x);
      continue;
    }
    transfer a = x, b = x;
    a.where.extent[0] = x.where.extent[0] / 2;
    b.where.offset[0] += a.where.extent[0];
    b.where.extent[0] -= a.where.extent[0];
    cut.push_back(a);
    cut.push_back(b);
  }
  p.transfers = std::move(cut);
  return p;
}

std::string describe(const scenario& s) {
  return to_string(s.src) + " -> " + to_string(s.dst) + ", " + std::to_string(s.elem) +
         "-byte elements, " + name(s.how) + ", " + mpi::to_string(s.opt.method) +
         (s.opt.first_rank ? ", processes play ranks " + std::to_string(s.opt.first_rank) + ".." : "") +
         (s.split_pieces ? ", transfers cut in two" : "");
}

// Runs one scenario on this process and checks its target shard.
void run(reshard_mpi_test::harness& h, const scenario& s) {
  const index_t me = s.opt.first_rank + h.rank();
  const bytes full = laws::distinct_tensor(s.src.shape, s.elem, s.salt);
  const bytes mine = shard_of(s.src, full, s.elem, me);
  const bytes want = shard_of(s.dst, full, s.elem, me);
  bytes got;
  switch (s.how) {
    case entry::plan_vector:
      got = mpi::redistribute(MPI_COMM_WORLD, plan_of(s), mine, s.elem, s.opt);
      break;
    case entry::plan_span: {
      // staging reused from case to case on odd-numbered processes (a local choice)
      static std::vector<std::byte> scratch;
      mpi::redistribute_options o = s.opt;
      if (h.rank() % 2) o.scratch = &scratch;
      got.assign(want.size(), std::byte{0xCD});
      mpi::redistribute(MPI_COMM_WORLD, plan_of(s), mine, got, s.elem, o);
      break;
    }
    case entry::by_rank:
      if (s.salt % 2) {
        got = mpi::redistribute(MPI_COMM_WORLD, s.src, s.dst, mine, s.elem, s.opt);
      } else {
        got.assign(want.size(), std::byte{0xCD});
        mpi::redistribute(MPI_COMM_WORLD, s.src, s.dst, mine, got, s.elem, s.opt);
      }
      break;
    default: {  // typed: 4-byte elements as std::uint32_t; plan or layouts
      std::vector<std::uint32_t> in(mine.size() / 4);
      if (!mine.empty()) std::memcpy(in.data(), mine.data(), mine.size());
      const std::vector<std::uint32_t> out =
          s.salt % 2 ? mpi::redistribute<std::uint32_t>(MPI_COMM_WORLD, plan_of(s), in, s.opt)
                     : mpi::redistribute<std::uint32_t>(MPI_COMM_WORLD, s.src, s.dst, in, s.opt);
      got.resize(out.size() * 4);
      if (!out.empty()) std::memcpy(got.data(), out.data(), got.size());
    }
  }
  if (got == want) {
    h.check(true, "");
    return;
  }
  std::string why = "got " + std::to_string(got.size()) + " bytes, want " + std::to_string(want.size());
  if (got.size() == want.size()) {
    std::size_t i = 0;
    while (got[i] == want[i]) ++i;
    why = "element " + std::to_string(i / s.elem) + " of its target shard differs";
  }
  h.check(false, "global rank " + std::to_string(me) + ": " + why + " in " + describe(s));
}

// The i-th random scenario: identical on every process (the seed is shared).
scenario random_scenario(std::uint64_t seed, std::uint64_t i, int processes) {
  verify::gen_options o;
  o.max_ranks = processes;
  o.max_volume = 1024;
  o.offsets = false;  // meshes are placed below, inside the communicator
  const auto lp = verify::layout_pairs(o)(rc::Random(seed * 1000003 + i), static_cast<int>(i % 100)).value();
  std::mt19937_64 rng(seed ^ (0x9E3779B97F4A7C15ull * (i + 1)));
  scenario s{lp.src, lp.dst};
  s.src.first_rank = static_cast<index_t>(rng() % static_cast<std::uint64_t>(processes - num_ranks(s.src) + 1));
  s.dst.first_rank = static_cast<index_t>(rng() % static_cast<std::uint64_t>(processes - num_ranks(s.dst) + 1));
  static constexpr std::size_t sizes[] = {1, 2, 3, 4, 8};
  s.elem = sizes[rng() % 5];
  s.how = static_cast<entry>(i % static_cast<std::uint64_t>(entry::count));
  if (s.how == entry::typed) s.elem = 4;
  s.opt.method = rng() % 2 ? mpi::exchange::alltoallv : mpi::exchange::point_to_point;
  if (rng() % 4 == 0) {  // the processes play global ranks 100..
    s.opt.first_rank = 100;
    s.src.first_rank += 100;
    s.dst.first_rank += 100;
  }
  s.salt = i;
  s.split_pieces = s.how != entry::by_rank && rng() % 4 == 0;
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int code = 0;
  {
    reshard_mpi_test::harness h(MPI_COMM_WORLD, "mpi.redistribute");
    const int p = h.size();

    // Named cases first: cross-mesh halves, gather, scatter, the same layout, M != N overlapping.
    const index_list shape{8, 6};
    auto at = [](layout l, index_t first) { l.first_rank = first; return l; };
    const layout rows2 = mindspore_layout({2}, {0, -1}, shape), cols2 = mindspore_layout({2}, {-1, 0}, shape);
    const layout grid4 = mindspore_layout({2, 2}, {1, 0}, shape), rows3 = mindspore_layout({3}, {-1, 0}, shape);
    const std::vector<std::pair<const char*, scenario>> named = {
        {"ranks 0-1 rows -> ranks 2-3 columns", {rows2, at(cols2, 2)}},
        {"4 ranks 2x2 -> 1 rank (gather at rank 3)", {grid4, full_layout(shape, 3)}},
        {"1 rank -> 4 ranks 2x2 (scatter from rank 2)", {full_layout(shape, 2), grid4}},
        {"4 ranks -> the same layout (all local)", {grid4, grid4}},
        {"2 ranks -> 3 ranks, overlapping (0-1 -> 1-3)", {rows2, at(rows3, 1)}},
        {"replicated on 4 -> rows on 2", {mindspore_layout({4}, {-1, -1}, shape), at(rows2, 2)}},
    };
    if (p >= 4) {
      for (const auto& [what, base] : named) {
        for (int k = 0; k < 4; ++k) {
          scenario s = base;
          s.how = static_cast<entry>(k);
          s.opt.method = k % 2 ? mpi::exchange::alltoallv : mpi::exchange::point_to_point;
          s.salt = static_cast<std::uint64_t>(k);
          h.run(what, [&] { run(h, s); });
          s.split_pieces = s.how != entry::by_rank;
          h.run(what + std::string(", transfers cut in two"), [&] { run(h, s); });
        }
      }
    }

    const std::uint64_t seed = env_or("RESHARD_MPI_SEED", 0x5eed5);
    const std::uint64_t cases = env_or("RESHARD_MPI_CASES", 400);
    long long disjoint = 0, uneven = 0, both = 0;
    for (std::uint64_t i = 0; i < cases; ++i) {
      const scenario s = random_scenario(seed, i, p);
      const index_t m = num_ranks(s.src), n = num_ranks(s.dst);
      disjoint += s.src.first_rank + m <= s.dst.first_rank || s.dst.first_rank + n <= s.src.first_rank;
      uneven += m != n;
      both += m == p && n == p;
      h.run("case " + std::to_string(i) + " " + describe(s), [&] { run(h, s); });
    }
    if (h.rank() == 0)
      std::printf("mpi.redistribute: seed %llu, %llu random cases (%lld with M != N, %lld on disjoint "
                  "meshes, %lld with both layouts on all %d processes)\n",
                  static_cast<unsigned long long>(seed), static_cast<unsigned long long>(cases),
                  uneven, disjoint, both, p);
    code = h.finish();
  }
  MPI_Finalize();
  return code;
}
