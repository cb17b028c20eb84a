// bench/mpi/redistribute.cpp: reshard::mpi::redistribute against its raw baselines, under mpirun.
//
// A plain timing program (Google Benchmark picks iteration counts per process, which would
// desynchronize collective calls). For each scenario every process runs each method `reps` times;
// one time is the slowest process's wall time of a call that starts after an MPI_Barrier
// (MPI_Allreduce MAX); we report the median and the minimum over the repetitions. Methods:
//
//   redistribute p2p        mpi::redistribute, plan derived beforehand, point-to-point (the
//                           default), returning a new vector
//   p2p, buffer+scratch     the same into a target buffer and staging memory (options.scratch)
//                           allocated beforehand and reused, as the floors' buffers are
//   a2av, buffer+scratch    the same with exchange::alltoallv
//   per-rank plan, ...      mpi::redistribute(comm, src, dst, ...): plan_for_rank inside the call
//   floor: Alltoallv        one MPI_Alltoallv of exactly the plan's cross-rank bytes, from and into
//                           contiguous buffers: no planning, no packing, no local copies
//   floor: Isend/Irecv      the same bytes as one message per peer pair
//   naive gather+scatter    MPI_Gatherv of every source shard to rank 0, merge, split, MPI_Scatterv
//
// Ratios are to the Alltoallv floor. Every scenario's result is checked against the naive one.
// RESHARD_BENCH_TINY=1 shrinks the tensors (used by ctest); RESHARD_BENCH_REPS sets repetitions.
#include "reshard/mpi/redistribute.hpp"

#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "reshard.hpp"

namespace {

using namespace reshard;
using bytes = std::vector<std::byte>;

int rank_ = 0, size_ = 1;

bool has(const layout& l, index_t r) { return r >= l.first_rank && r < l.first_rank + num_ranks(l); }

std::size_t shard_bytes(const layout& l, index_t r, std::size_t elem) {
  return has(l, r) ? static_cast<std::size_t>(volume(box_of(l, r))) * elem : 0;
}

// The slowest process's time of f(), after a barrier; `reps` times.
std::vector<double> time_it(int reps, const std::function<void()>& f) {
  std::vector<double> out;
  for (int k = 0; k < reps; ++k) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    f();
    double t = MPI_Wtime() - t0, slowest = 0;
    MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    out.push_back(slowest);
  }
  std::sort(out.begin(), out.end());
  return out;
}

struct scenario {
  std::string name;
  layout src, dst;
};

// The naive way: every source shard to rank 0, merged into the full tensor, split by the target
// layout and scattered. Returns this process's target shard.
bytes gather_scatter(const scenario& s, const bytes& mine, std::size_t elem) {
  const int p = size_;
  std::vector<int> scount(static_cast<std::size_t>(p)), sdispl(scount), tcount(scount), tdispl(scount);
  int stotal = 0, ttotal = 0;
  for (int r = 0; r < p; ++r) {
    scount[static_cast<std::size_t>(r)] = static_cast<int>(shard_bytes(s.src, r, elem));
    sdispl[static_cast<std::size_t>(r)] = stotal;
    stotal += scount[static_cast<std::size_t>(r)];
    tcount[static_cast<std::size_t>(r)] = static_cast<int>(shard_bytes(s.dst, r, elem));
    tdispl[static_cast<std::size_t>(r)] = ttotal;
    ttotal += tcount[static_cast<std::size_t>(r)];
  }
  bytes gathered(rank_ == 0 ? static_cast<std::size_t>(stotal) : 0);
  MPI_Gatherv(mine.data(), static_cast<int>(mine.size()), MPI_BYTE, gathered.data(), scount.data(),
              sdispl.data(), MPI_BYTE, 0, MPI_COMM_WORLD);
  bytes targets(rank_ == 0 ? static_cast<std::size_t>(ttotal) : 0);
  if (rank_ == 0) {
    bytes full(static_cast<std::size_t>(volume(s.src.shape)) * elem);
    std::vector<const std::byte*> in;
    for (index_t r = s.src.first_rank; r < s.src.first_rank + num_ranks(s.src); ++r)
      in.push_back(gathered.data() + sdispl[static_cast<std::size_t>(r)]);
    merge(s.src, in, full.data(), elem);
    std::vector<std::byte*> out;
    for (index_t r = s.dst.first_rank; r < s.dst.first_rank + num_ranks(s.dst); ++r)
      out.push_back(targets.data() + tdispl[static_cast<std::size_t>(r)]);
    split(s.dst, full.data(), out, elem);
  }
  bytes result(shard_bytes(s.dst, rank_, elem));
  MPI_Scatterv(targets.data(), tcount.data(), tdispl.data(), MPI_BYTE, result.data(),
               static_cast<int>(result.size()), MPI_BYTE, 0, MPI_COMM_WORLD);
  return result;
}

void run(const scenario& s, std::size_t elem, int reps) {
  const transfer_plan p = plan(s.src, s.dst);
  const plan_cost c = p.cost(static_cast<index_t>(elem));
  // This process's source shard, with distinct bytes.
  bytes mine(shard_bytes(s.src, rank_, elem));
  for (std::size_t i = 0; i < mine.size(); ++i)
    mine[i] = static_cast<std::byte>((i * 131 + static_cast<std::size_t>(rank_) * 7) & 0xFF);
  // Replicas hold the same data as their group's first rank: make it so.
  if (has(s.src, rank_)) {
    const auto group = replica_group(s.src, rank_);
    for (std::size_t i = 0; i < mine.size(); ++i)
      mine[i] = static_cast<std::byte>((i * 131 + static_cast<std::size_t>(group.front()) * 7) & 0xFF);
  }

  // Per-peer cross bytes of the plan, for the floors.
  std::vector<int> scount(static_cast<std::size_t>(size_), 0), rcount(scount), sdispl(scount),
      rdispl(scount);
  for (const transfer& x : p.transfers) {
    if (x.src == x.dst) continue;
    const auto b = static_cast<int>(volume(x.where) * static_cast<index_t>(elem));
    if (x.src == rank_) scount[static_cast<std::size_t>(x.dst)] += b;
    if (x.dst == rank_) rcount[static_cast<std::size_t>(x.src)] += b;
  }
  int st = 0, rt = 0;
  for (int r = 0; r < size_; ++r) {
    sdispl[static_cast<std::size_t>(r)] = st, st += scount[static_cast<std::size_t>(r)];
    rdispl[static_cast<std::size_t>(r)] = rt, rt += rcount[static_cast<std::size_t>(r)];
  }
  bytes sbuf(static_cast<std::size_t>(st), std::byte{1}), rbuf(static_cast<std::size_t>(rt));

  bytes out_p2p, out_naive, into(shard_bytes(s.dst, rank_, elem)), into_a2a(into.size()),
      into_rank(into.size()), scratch;
  struct row {
    const char* method;
    std::vector<double> t;
  };
  std::vector<row> rows;
  rows.push_back({"redistribute p2p", time_it(reps, [&] {
                    out_p2p = mpi::redistribute(MPI_COMM_WORLD, p, mine, elem);
                  })});
  rows.push_back({"p2p, buffer+scratch", time_it(reps, [&] {
                    mpi::redistribute(MPI_COMM_WORLD, p, mine, into, elem, {.scratch = &scratch});
                  })});
  rows.push_back({"a2av, buffer+scratch", time_it(reps, [&] {
                    mpi::redistribute(MPI_COMM_WORLD, p, mine, into_a2a, elem,
                                      {.method = mpi::exchange::alltoallv, .scratch = &scratch});
                  })});
  rows.push_back({"per-rank plan, buffer+scratch", time_it(reps, [&] {
                    mpi::redistribute(MPI_COMM_WORLD, s.src, s.dst, mine, into_rank, elem,
                                      {.scratch = &scratch});
                  })});
  const std::size_t floor_row = rows.size();
  rows.push_back({"floor: Alltoallv", time_it(reps, [&] {
                    MPI_Alltoallv(sbuf.data(), scount.data(), sdispl.data(), MPI_BYTE, rbuf.data(),
                                  rcount.data(), rdispl.data(), MPI_BYTE, MPI_COMM_WORLD);
                  })});
  std::vector<MPI_Request> req;  // the floor allocates nothing per repetition
  req.reserve(2 * static_cast<std::size_t>(size_));
  rows.push_back({"floor: Isend/Irecv", time_it(reps, [&] {
                    req.clear();
                    for (int r = 0; r < size_; ++r) {
                      const auto u = static_cast<std::size_t>(r);
                      if (rcount[u] == 0) continue;
                      req.emplace_back();
                      MPI_Irecv(rbuf.data() + rdispl[u], rcount[u], MPI_BYTE, r, 7, MPI_COMM_WORLD,
                                &req.back());
                    }
                    for (int r = 0; r < size_; ++r) {
                      const auto u = static_cast<std::size_t>(r);
                      if (scount[u] == 0) continue;
                      req.emplace_back();
                      MPI_Isend(sbuf.data() + sdispl[u], scount[u], MPI_BYTE, r, 7, MPI_COMM_WORLD,
                                &req.back());
                    }
                    MPI_Waitall(static_cast<int>(req.size()), req.data(), MPI_STATUSES_IGNORE);
                  })});
  rows.push_back({"naive gather+scatter", time_it(reps, [&] { out_naive = gather_scatter(s, mine, elem); })});

  int ok = out_p2p == out_naive && into == out_naive && into_a2a == out_naive &&
           into_rank == out_naive,
      all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (rank_ != 0) return;
  const double floor = rows[floor_row].t[rows[floor_row].t.size() / 2];
  std::printf("\n%s\n  %s -> %s\n  %.1f MiB tensor, %.1f MiB cross ranks in %lld messages, %.1f MiB "
              "local; result %s\n",
              s.name.c_str(), to_string(s.src).c_str(), to_string(s.dst).c_str(),
              static_cast<double>(volume(s.src.shape)) * static_cast<double>(elem) / 1048576.0,
              static_cast<double>(c.cross_bytes) / 1048576.0, static_cast<long long>(c.messages),
              static_cast<double>(c.local_bytes) / 1048576.0,
              all_ok ? "identical on every process" : "DIFFERS");
  std::printf("  | %-29s | %10s | %10s | %8s |\n", "method", "median ms", "min ms", "x floor");
  std::printf("  |%s|%s|%s|%s|\n", std::string(31, '-').c_str(), std::string(12, '-').c_str(),
              std::string(12, '-').c_str(), std::string(10, '-').c_str());
  for (const row& r : rows) {
    const double med = r.t[r.t.size() / 2];
    std::printf("  | %-29s | %10.3f | %10.3f | %8.2f |\n", r.method, med * 1e3, r.t.front() * 1e3,
                floor > 0 ? med / floor : 0.0);
  }
  if (!all_ok) std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  const char* tiny_env = std::getenv("RESHARD_BENCH_TINY");
  const bool tiny = tiny_env && *tiny_env && std::string(tiny_env) != "0";
  const char* reps_env = std::getenv("RESHARD_BENCH_REPS");
  const int reps = reps_env ? std::max(1, std::atoi(reps_env)) : tiny ? 2 : 15;
  const index_t p = size_, n = tiny ? 64 : 4096, h = tiny ? 32 : 2048;
  const std::size_t elem = 4;  // float32

  std::vector<scenario> all;
  // Rows to columns on all processes: every rank keeps 1/p and sends the rest in p - 1 pieces.
  all.push_back({"transpose split: rows over p -> columns over p",
                 mindspore_layout({p}, {0, -1}, {n, n}), mindspore_layout({p}, {-1, 0}, {n, n})});
  if (p >= 2) {
    // Disjoint meshes: the first half of the processes holds rows, the second half receives
    // columns; everything crosses.
    layout dst = mindspore_layout({p / 2}, {-1, 0}, {n, n});
    dst.first_rank = p / 2;
    all.push_back({"cross-mesh: rows on ranks 0..p/2-1 -> columns on ranks p/2..p-1",
                   mindspore_layout({p / 2}, {0, -1}, {n, n}), dst});
    // Rows over p -> rows over p - 1 (balanced) on ranks 1..p-1: contiguous pieces, sent and
    // received without staging.
    layout rows = mindspore_layout({p - 1}, {0, -1}, {n, n}, {.mode = split_mode::balanced});
    rows.first_rank = 1;
    all.push_back({"regroup rows: p ranks -> p-1 ranks (balanced), shifted by one",
                   mindspore_layout({p}, {0, -1}, {n, n}), rows});
  }
  if (p % 2 == 0 && p >= 4) {
    // A GPT MLP weight [h, 4h]: dp x tp = (p/2) x 2 with optimizer sharding over dp ->
    // tp = p (inference, no optimizer sharding).
    all.push_back({"training -> inference: mlp weight [h,4h], dp x tp = p/2 x 2 + opt -> tp = p",
                   mindspore_layout({p / 2, 2}, {-1, 0}, {h, 4 * h}, {.opt = {.step = 2, .size = -1}}),
                   mindspore_layout({p}, {-1, 0}, {h, 4 * h})});
  }
  if (rank_ == 0)
    std::printf("reshard::mpi::redistribute, %d processes, float32, %d repetitions per method "
                "(slowest process per repetition; median and min)\n",
                size_, reps);
  for (const scenario& s : all) run(s, elem, reps);
  MPI_Finalize();
  return 0;
}
