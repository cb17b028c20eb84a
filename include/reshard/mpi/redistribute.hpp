// reshard/mpi/redistribute.hpp: executes a redistribution plan over MPI (opt-in: reshard::mpi).
//
// MPI process p of the communicator plays global rank options.first_rank + p (by default p):
// it holds the source shard of that rank if the plan's source layout has it, and receives the
// target shard of that rank if the target layout has it. A process may hold both, one or neither,
// so M -> N conversions, disjoint meshes (source ranks 0-3, target ranks 4-7) and processes that
// take no part all work. Every process passes the same plan.
//
// redistribute() is collective over the communicator. Before any data moves, one MPI_Allreduce
// compares a hash of the plan (layouts and transfers), the element size and the options across
// processes, and carries every process's verdict on its own input; if the processes disagree or
// any process's input is bad, EVERY process throws reshard::error and no data moves. So a wrong
// communicator size, a plan that differs between processes or a shard of the wrong size is an
// error everywhere, never a hang or a crash.
//
//   @post redistribute(comm, plan(A, B), shard of x under A at rank p, e) == shard of x under B
//         at rank p, on every process p (empty where p holds no rank of B)
//   @post redistribute(comm, A, B, ...) sends exactly the transfers of
//         plan(A, B, replica_policy::round_robin)
#pragma once

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "reshard/box.hpp"
#include "reshard/convert.hpp"
#include "reshard/error.hpp"
#include "reshard/layout.hpp"
#include "reshard/mpi/common.hpp"
#include "reshard/plan.hpp"
#include "reshard/rank_plan.hpp"

namespace reshard::mpi {

/// How the pieces travel between processes.
enum class exchange : std::uint8_t {
  /// MPI_Irecv/MPI_Isend of one packed message per peer (default): each process posts only the
  /// messages of its own transfers, so the cost follows the number of peers, not of processes. A
  /// piece that is contiguous in its shard is sent from, or received into, the shard directly.
  point_to_point,
  /// One MPI_Alltoallv over the whole communicator (packed buffers, ordered by peer). Falls back
  /// to point_to_point, on every process alike, when a count or displacement exceeds INT_MAX.
  alltoallv,
};

constexpr const char* to_string(exchange e) {
  return e == exchange::alltoallv ? "alltoallv" : "point_to_point";
}

struct redistribute_options {
  exchange method = exchange::point_to_point;
  index_t first_rank = 0;  ///< global rank played by process 0; process p plays first_rank + p
  int tag = 0x5e5;         ///< tag of the point-to-point messages
  unsigned threads = 1;    ///< threads that pack and unpack (as convert_options::threads)
  /// Staging memory for packed messages, kept by the caller between calls: grown when too small,
  /// never shrunk. Null: each call allocates its own. Reusing it avoids touching fresh pages on
  /// every call. Local to the process (not compared between processes).
  std::vector<std::byte>* scratch = nullptr;
};

namespace detail {

using reshard::detail::copy_job;

// Largest point-to-point message: counts are ints; larger messages go in chunks of this size
// (MPI keeps messages of one sender, tag and communicator in order).
inline constexpr std::size_t max_message_bytes = std::size_t{1} << 30;

// 64-bit hash of what all processes must agree on (splitmix64 steps over 64-bit words).
class hasher {
 public:
  void add(std::uint64_t v) {
    h_ ^= v + 0x9E3779B97F4A7C15ull + (h_ << 6) + (h_ >> 2);
    h_ = mix(h_);
  }
  void add(const index_list& e) {
    add(e.size());
    for (index_t v : e) add(static_cast<std::uint64_t>(v));
  }
  void add(const layout& l) {
    add(l.dev_matrix);
    add(l.dim_axes.size());
    for (const auto& ax : l.dim_axes) {
      add(ax.size());
      for (int a : ax) add(static_cast<std::uint64_t>(a));
    }
    add(l.shape);
    add(static_cast<std::uint64_t>(l.mode));
    add(l.split_sizes.size());
    for (const auto& s : l.split_sizes) add(s);
    add(static_cast<std::uint64_t>(l.opt.step));
    add(static_cast<std::uint64_t>(l.opt.size));
    add(static_cast<std::uint64_t>(l.first_rank));
  }
  std::uint64_t value() const { return h_; }

 private:
  static std::uint64_t mix(std::uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  std::uint64_t h_ = 0x5265736861726421ull;
};

// One message: the pieces exchanged with one peer, packed back to back in plan order.
struct message {
  int peer = 0;  // communicator rank
  std::vector<const transfer*> pieces;
  std::size_t bytes = 0;
  std::size_t offset = 0;            // in the staging buffer (when not direct)
  const std::byte* send_direct = nullptr;  // contiguous piece sent straight from the shard
  std::byte* recv_direct = nullptr;        // contiguous piece received straight into the shard
  int pending = 0;                         // chunks not yet received
};

// Everything one process does, worked out (and checked) before any data moves.
struct work {
  std::span<const std::byte> src;
  std::span<std::byte> dst;
  box src_box, dst_box;
  std::vector<const transfer*> locals;
  std::vector<message> sends, recvs;
  std::unique_ptr<std::byte[]> owned;  // staging when the caller gives no scratch (not zeroed)
  std::byte* send_stage = nullptr;     // packed outgoing messages
  std::byte* recv_stage = nullptr;     // packed incoming messages
  std::size_t send_bytes = 0, recv_bytes = 0;
  std::size_t elem = 0;
};

inline std::string rank_phrase(int process, index_t global) {
  return "process " + std::to_string(process) + " (global rank " + std::to_string(global) + ")";
}

inline bool has_rank(const layout& l, index_t r) {
  return r >= l.first_rank && r < l.first_rank + num_ranks(l);
}

inline bool inside(const box& in, const box& out) {
  if (in.offset.size() != out.offset.size()) return false;
  for (std::size_t i = 0; i < in.offset.size(); ++i)
    if (in.extent[i] < 0 || in.offset[i] < out.offset[i] ||
        in.offset[i] + in.extent[i] > out.offset[i] + out.extent[i])
      return false;
  return true;
}

// Groups (peer, piece) pairs into messages, peers ascending, pieces in plan order.
inline std::vector<message> group(std::vector<std::pair<int, const transfer*>> v,
                                  std::size_t elem) {
  std::stable_sort(v.begin(), v.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<message> out;
  for (const auto& [peer, x] : v) {
    if (out.empty() || out.back().peer != peer) {
      out.emplace_back();
      out.back().peer = peer;
    }
    out.back().pieces.push_back(x);
    out.back().bytes += static_cast<std::size_t>(volume(x->where)) * elem;
  }
  return out;
}

// Checks the plan against the communicator and this process's buffers, and lays out its
// messages. Throws reshard::error on bad input. `output(bytes)` returns the target buffer.
template <class Output>
work prepare(int size, int me_process, const transfer_plan& p, std::span<const std::byte> src,
             Output&& output, std::size_t elem, const redistribute_options& o) {
  const std::string op = "redistribute";
  if (elem == 0) report_error(op + ": element size is 0");
  validate(p.src, "redistribute: source layout");
  validate(p.dst, "redistribute: target layout");
  reshard::detail::expect_same_shape(p.src, p.dst, "redistribute");
  const index_t m = num_ranks(p.src), n = num_ranks(p.dst);
  const index_t lo = std::min(p.src.first_rank, p.dst.first_rank);
  const index_t hi = std::max(p.src.first_rank + m, p.dst.first_rank + n);
  if (lo < o.first_rank || hi > o.first_rank + size)
    report_error(op + ": the plan " + to_string(p.src) + " -> " + to_string(p.dst) +
                 " needs global ranks " + std::to_string(lo) + ".." + std::to_string(hi - 1) +
                 ", but the communicator has " + std::to_string(size) +
                 " processes, playing global ranks " + std::to_string(o.first_rank) + ".." +
                 std::to_string(o.first_rank + size - 1) + " (process p plays global rank " +
                 std::to_string(o.first_rank) + " + p)");
  const index_t me = o.first_rank + me_process;
  const std::string who = rank_phrase(me_process, me);
  // no per-rank tables: a process asks only for its own boxes and those of its transfers' ranks
  const partition gs(p.src, partition::mode::arithmetic), gd(p.dst, partition::mode::arithmetic);
  work w;
  w.elem = elem;
  const bool holds_src = has_rank(p.src, me), holds_dst = has_rank(p.dst, me);
  if (holds_src) w.src_box = gs.box_of_rank(me);
  if (holds_dst) w.dst_box = gd.box_of_rank(me);

  // This process's transfers, each checked: ranks of the layouts, box inside both shards.
  std::vector<std::pair<int, const transfer*>> sends, recvs;
  index_t received = 0;
  bool reads_src = false;
  for (const transfer& x : p.transfers) {
    if (x.src != me && x.dst != me) continue;
    const auto t = [&x] {  // for messages only: not formatted per transfer
      return "transfer " + std::to_string(x.src) + "->" + std::to_string(x.dst) + " " +
             to_string(x.where);
    };
    if (!has_rank(p.src, x.src) || !has_rank(p.dst, x.dst))
      report_error(op + ": " + t() + " names a rank outside " + to_string(p.src) + " -> " +
                   to_string(p.dst));
    if (x.where.offset.size() != p.src.shape.size() ||
        x.where.extent.size() != p.src.shape.size())
      report_error(op + ": " + t() + " has " + std::to_string(x.where.offset.size()) +
                   " dims, the tensor " + std::to_string(p.src.shape.size()));
    if (volume(x.where) == 0) continue;
    const box sb = gs.box_of_rank(x.src);
    const box db = gd.box_of_rank(x.dst);
    if (!inside(x.where, sb) || !inside(x.where, db))
      report_error(op + ": " + t() + " is not inside the source box " + to_string(sb) +
                   " and the target box " + to_string(db) + " of " + to_string(p.src) + " -> " +
                   to_string(p.dst));
    if (x.dst == me) received += volume(x.where);
    if (x.src == me) reads_src = true;
    if (x.src == x.dst)
      w.locals.push_back(&x);
    else if (x.src == me)
      sends.push_back({static_cast<int>(x.dst - o.first_rank), &x});
    else
      recvs.push_back({static_cast<int>(x.src - o.first_rank), &x});
  }
  if (holds_dst && received != volume(w.dst_box))
    report_error(op + ": the plan gives " + who + " " + std::to_string(received) + " of the " +
                 std::to_string(volume(w.dst_box)) + " elements of its target box " +
                 to_string(w.dst_box) + " in " + to_string(p.dst));

  // The caller's buffers.
  const auto expect_bytes = [&](const box& b) { return static_cast<std::size_t>(volume(b)) * elem; };
  if (holds_src) {
    const std::size_t want = expect_bytes(w.src_box);
    if (src.size() != want && !(src.empty() && !reads_src))
      report_error(op + ": " + who + " was given " + std::to_string(src.size()) +
                   " bytes of source data, but its box " + to_string(w.src_box) + " in " +
                   to_string(p.src) + " holds " + std::to_string(volume(w.src_box)) +
                   " elements of " + std::to_string(elem) + " bytes = " + std::to_string(want) +
                   " bytes");
  } else if (!src.empty()) {
    report_error(op + ": " + who + " holds no rank of the source layout " + to_string(p.src) +
                 " but was given " + std::to_string(src.size()) + " bytes of source data");
  }
  w.src = src;
  w.dst = output(holds_dst ? expect_bytes(w.dst_box) : 0, who, to_string(w.dst_box), p.dst);

  // Messages; a single piece contiguous in the shard needs no staging.
  w.sends = group(std::move(sends), elem);
  w.recvs = group(std::move(recvs), elem);
  std::size_t send_total = 0, recv_total = 0;
  for (message& msg : w.sends) {
    if (msg.pieces.size() == 1 && o.method == exchange::point_to_point) {
      const copy_job j = reshard::detail::make_copy_job(w.src.data(), w.src_box, nullptr,
                                                        msg.pieces[0]->where, msg.pieces[0]->where, elem);
      if (j.dims == 0) msg.send_direct = j.src;
    }
    if (!msg.send_direct) msg.offset = send_total, send_total += msg.bytes;
  }
  for (message& msg : w.recvs) {
    if (msg.pieces.size() == 1 && o.method == exchange::point_to_point) {
      const copy_job j = reshard::detail::make_copy_job(nullptr, msg.pieces[0]->where, w.dst.data(),
                                                        w.dst_box, msg.pieces[0]->where, elem);
      if (j.dims == 0) msg.recv_direct = j.dst;
    }
    if (!msg.recv_direct) msg.offset = recv_total, recv_total += msg.bytes;
  }
  std::byte* stage = nullptr;
  if (o.scratch) {
    if (o.scratch->size() < send_total + recv_total) o.scratch->resize(send_total + recv_total);
    stage = o.scratch->data();
  } else if (send_total + recv_total > 0) {
    w.owned = std::make_unique_for_overwrite<std::byte[]>(send_total + recv_total);
    stage = w.owned.get();
  }
  w.send_stage = stage;
  w.recv_stage = stage ? stage + send_total : nullptr;
  w.send_bytes = send_total;
  w.recv_bytes = recv_total;
  return w;
}

// Copies every piece of `msg` between the shard and its packed form at `packed`.
inline void pack(const work& w, const message& msg, std::byte* packed, unsigned threads) {
  std::vector<copy_job> jobs;
  for (const transfer* x : msg.pieces) {
    jobs.push_back(reshard::detail::make_copy_job(w.src.data(), w.src_box, packed, x->where,
                                                  x->where, w.elem));
    packed += static_cast<std::size_t>(volume(x->where)) * w.elem;
  }
  reshard::detail::run_jobs(jobs, threads);
}
inline void unpack(const work& w, const message& msg, const std::byte* packed, unsigned threads) {
  std::vector<copy_job> jobs;
  for (const transfer* x : msg.pieces) {
    jobs.push_back(reshard::detail::make_copy_job(packed, x->where, w.dst.data(), w.dst_box,
                                                  x->where, w.elem));
    packed += static_cast<std::size_t>(volume(x->where)) * w.elem;
  }
  reshard::detail::run_jobs(jobs, threads);
}
inline void copy_locals(const work& w, unsigned threads) {
  std::vector<copy_job> jobs;
  for (const transfer* x : w.locals)
    jobs.push_back(reshard::detail::make_copy_job(w.src.data(), w.src_box, w.dst.data(),
                                                  w.dst_box, x->where, w.elem));
  reshard::detail::run_jobs(jobs, threads);
}

inline void exchange_point_to_point(MPI_Comm comm, int me, work& w,
                                    const redistribute_options& o) {
  std::vector<MPI_Request> rreq, sreq;
  std::vector<std::size_t> rmsg;  // message of each receive request
  for (std::size_t i = 0; i < w.recvs.size(); ++i) {
    message& msg = w.recvs[i];
    std::byte* base = msg.recv_direct ? msg.recv_direct : w.recv_stage + msg.offset;
    for (std::size_t at = 0; at < msg.bytes; at += max_message_bytes) {
      const auto len = static_cast<int>(std::min(max_message_bytes, msg.bytes - at));
      rreq.emplace_back();
      rmsg.push_back(i);
      ++msg.pending;
      check_mpi(MPI_Irecv(base + at, len, MPI_BYTE, msg.peer, o.tag, comm, &rreq.back()),
                "redistribute", "MPI_Irecv");
    }
  }
  // Send to peers me+1, me+2, ... (mod size) first, so that processes do not all start with
  // the same peer; pack each message just before sending it.
  const auto first = std::lower_bound(w.sends.begin(), w.sends.end(), me + 1,
                                      [](const message& m, int p) { return m.peer < p; });
  std::vector<message*> order;
  for (auto it = first; it != w.sends.end(); ++it) order.push_back(&*it);
  for (auto it = w.sends.begin(); it != first; ++it) order.push_back(&*it);
  for (message* msg : order) {
    const std::byte* base = msg->send_direct;
    if (!base) {
      pack(w, *msg, w.send_stage + msg->offset, o.threads);
      base = w.send_stage + msg->offset;
    }
    for (std::size_t at = 0; at < msg->bytes; at += max_message_bytes) {
      const auto len = static_cast<int>(std::min(max_message_bytes, msg->bytes - at));
      sreq.emplace_back();
      check_mpi(MPI_Isend(base + at, len, MPI_BYTE, msg->peer, o.tag, comm, &sreq.back()),
                "redistribute", "MPI_Isend");
    }
  }
  copy_locals(w, o.threads);  // while messages travel
  for (std::size_t done = 0; done < rreq.size(); ++done) {
    int k = MPI_UNDEFINED;
    check_mpi(MPI_Waitany(static_cast<int>(rreq.size()), rreq.data(), &k, MPI_STATUS_IGNORE),
              "redistribute", "MPI_Waitany");
    if (k == MPI_UNDEFINED) break;
    message& msg = w.recvs[rmsg[static_cast<std::size_t>(k)]];
    if (--msg.pending == 0 && !msg.recv_direct)
      unpack(w, msg, w.recv_stage + msg.offset, o.threads);
  }
  if (!sreq.empty())
    check_mpi(MPI_Waitall(static_cast<int>(sreq.size()), sreq.data(), MPI_STATUSES_IGNORE),
              "redistribute", "MPI_Waitall");
}

inline void exchange_alltoallv(MPI_Comm comm, int size, work& w, const redistribute_options& o) {
  std::vector<int> scount(static_cast<std::size_t>(size), 0), sdispl(scount), rcount(scount),
      rdispl(scount);
  for (const message& msg : w.sends) {
    pack(w, msg, w.send_stage + msg.offset, o.threads);
    scount[static_cast<std::size_t>(msg.peer)] = static_cast<int>(msg.bytes);
    sdispl[static_cast<std::size_t>(msg.peer)] = static_cast<int>(msg.offset);
  }
  for (const message& msg : w.recvs) {
    rcount[static_cast<std::size_t>(msg.peer)] = static_cast<int>(msg.bytes);
    rdispl[static_cast<std::size_t>(msg.peer)] = static_cast<int>(msg.offset);
  }
  copy_locals(w, o.threads);
  check_mpi(MPI_Alltoallv(w.send_stage, scount.data(), sdispl.data(), MPI_BYTE,
                          w.recv_stage, rcount.data(), rdispl.data(), MPI_BYTE, comm),
            "redistribute", "MPI_Alltoallv");
  for (const message& msg : w.recvs) unpack(w, msg, w.recv_stage + msg.offset, o.threads);
}

// The whole operation. `plan_of(rank, storage)` gives the plan, or this rank's part of it (built
// in `storage`); `hash` is what the processes must agree on.
template <class PlanOf, class Output>
void run(MPI_Comm comm, PlanOf&& plan_of, std::uint64_t hash, std::span<const std::byte> src,
         Output&& output, std::size_t elem, const redistribute_options& o) {
  const comm_info c = expect_comm(comm, "redistribute");
  const int size = c.size, me = c.me;

  // Local checks; their verdict travels with the hash, so that every process stops together.
  std::string problem;
  work w;
  transfer_plan storage;  // a rank's part of the plan, when derived here
  const transfer_plan* p = nullptr;
  try {
    p = &plan_of(o.first_rank + me, storage);
    w = prepare(size, me, *p, src, output, elem, o);
  } catch (const std::bad_alloc&) {
    problem = "redistribute: " + rank_phrase(me, o.first_rank + me) + " ran out of memory";
  } catch (const std::exception& e) {
    problem = e.what();
  }
  bool big = false;  // an Alltoallv count or displacement would not fit an int
  if (problem.empty() && o.method == exchange::alltoallv) {
    const auto fits = [](std::size_t v) { return v <= static_cast<std::size_t>(INT_MAX); };
    big = !fits(w.send_bytes) || !fits(w.recv_bytes);
  }
  std::uint64_t mine[4] = {hash, ~hash,
                           problem.empty() ? 0u : static_cast<std::uint64_t>(size - me),
                           big ? 1u : 0u};
  std::uint64_t all[4] = {};
  check_mpi(MPI_Allreduce(mine, all, 4, MPI_UINT64_T, MPI_MAX, comm), "redistribute",
            "MPI_Allreduce");
  if (all[0] != hash || ~all[1] != hash)
    report_error("redistribute: the processes of the communicator were given different plans, "
                 "element sizes or options (their hashes differ); " +
                 rank_phrase(me, o.first_rank + me) + " has " +
                 (p ? to_string(p->src) + " -> " + to_string(p->dst) : std::string("no plan")) +
                 ", element size " + std::to_string(elem) + ", " + to_string(o.method) +
                 "; no data was moved");
  if (!problem.empty()) report_error(problem + " (no process moved data)");
  if (all[2] != 0) {
    const auto bad = static_cast<int>(static_cast<std::uint64_t>(size) - all[2]);
    report_error("redistribute: " + rank_phrase(bad, o.first_rank + bad) +
                 " rejected its input (see its error), so no process moved data");
  }
  // Big messages: the packed buffers are laid out for point-to-point too.
  if (o.method == exchange::alltoallv && all[3] == 0)
    exchange_alltoallv(comm, size, w, o);
  else
    exchange_point_to_point(comm, me, w, o);
}

inline std::uint64_t hash_options(hasher& h, std::size_t elem, const redistribute_options& o) {
  h.add(elem);
  h.add(static_cast<std::uint64_t>(o.method));
  h.add(static_cast<std::uint64_t>(o.first_rank));
  h.add(static_cast<std::uint64_t>(static_cast<std::int64_t>(o.tag)));
  return h.value();
}

inline std::uint64_t plan_hash(const transfer_plan& p, std::size_t elem,
                               const redistribute_options& o) {
  hasher h;
  h.add(1);  // a whole plan
  h.add(p.src);
  h.add(p.dst);
  h.add(p.transfers.size());
  for (const transfer& x : p.transfers) {
    h.add(static_cast<std::uint64_t>(x.src));
    h.add(static_cast<std::uint64_t>(x.dst));
    h.add(x.where.offset);
    h.add(x.where.extent);
  }
  return hash_options(h, elem, o);
}

inline std::uint64_t layouts_hash(const layout& src, const layout& dst, std::size_t elem,
                                  const redistribute_options& o) {
  hasher h;
  h.add(2);  // layouts, each process deriving its part with plan_for_rank
  h.add(src);
  h.add(dst);
  return hash_options(h, elem, o);
}

// Output into a caller's buffer of exactly the target shard's size.
struct into_span {
  std::span<std::byte> dst;
  std::span<std::byte> operator()(std::size_t bytes, const std::string& who,
                                  const std::string& box_text, const layout& l) const {
    if (dst.size() != bytes)
      report_error("redistribute: " + who + " was given a target buffer of " +
                   std::to_string(dst.size()) + " bytes, but " +
                   (bytes ? "its box " + box_text + " in " + to_string(l) + " needs " +
                                std::to_string(bytes) + " bytes"
                          : "it holds no rank of the target layout " + to_string(l) +
                                " (pass an empty buffer)"));
    return dst;
  }
};

// Output into a vector the call allocates.
template <class T>
struct into_vector {
  std::vector<T>* out;
  std::span<std::byte> operator()(std::size_t bytes, const std::string&, const std::string&,
                                  const layout&) const {
    out->resize(bytes / sizeof(T));
    return std::as_writable_bytes(std::span<T>(*out));
  }
};

}  // namespace detail

/// Executes plan `p` over `comm`: process q plays global rank o.first_rank + q. `local_source`
/// is the shard of that rank under p.src (row-major, its box, element_bytes per element), empty
/// when the rank holds no source shard (or when the plan reads nothing from it); `local_target`
/// receives the rank's shard under p.dst and must have exactly its size (empty when the rank
/// holds no target shard). Collective: every process of `comm` calls it with the same plan,
/// element size and options. Throws reshard::error on every process if any process's input is
/// bad or the processes disagree; nothing is written then.
// @post local_target == the shard of the tensor under p.dst at this process's rank
inline void redistribute(MPI_Comm comm, const transfer_plan& p,
                         std::span<const std::byte> local_source,
                         std::span<std::byte> local_target, std::size_t element_bytes,
                         redistribute_options o = {}) {
  detail::run(comm, [&](index_t, transfer_plan&) -> const transfer_plan& { return p; },
              detail::plan_hash(p, element_bytes, o), local_source,
              detail::into_span{local_target}, element_bytes, o);
}

/// As above, returning this process's target shard (empty if it holds no rank of p.dst).
inline std::vector<std::byte> redistribute(MPI_Comm comm, const transfer_plan& p,
                                           std::span<const std::byte> local_source,
                                           std::size_t element_bytes,
                                           redistribute_options o = {}) {
  std::vector<std::byte> out;
  detail::run(comm, [&](index_t, transfer_plan&) -> const transfer_plan& { return p; },
              detail::plan_hash(p, element_bytes, o), local_source,
              detail::into_vector<std::byte>{&out}, element_bytes, o);
  return out;
}

/// Typed convenience: shards of T (trivially copyable), element size sizeof(T).
template <class T>
std::vector<T> redistribute(MPI_Comm comm, const transfer_plan& p, std::span<const T> local_source,
                            redistribute_options o = {}) {
  static_assert(std::is_trivially_copyable_v<T>, "redistribute: T must be trivially copyable");
  std::vector<T> out;
  detail::run(comm, [&](index_t, transfer_plan&) -> const transfer_plan& { return p; },
              detail::plan_hash(p, sizeof(T), o), std::as_bytes(local_source),
              detail::into_vector<T>{&out}, sizeof(T), o);
  return out;
}

/// Scalable form: each process derives only its own transfers with plan_for_rank(src, dst, its
/// rank), and the processes compare only the layouts. It moves the same data between the same
/// ranks as redistribute(comm, plan(src, dst, replica_policy::round_robin), ...): one replica
/// policy. Planning costs each process O(its own transfers), not the whole plan.
inline std::vector<std::byte> redistribute(MPI_Comm comm, const layout& src, const layout& dst,
                                           std::span<const std::byte> local_source,
                                           std::size_t element_bytes,
                                           redistribute_options o = {}) {
  std::vector<std::byte> out;
  detail::run(comm, [&](index_t me, transfer_plan& part) -> const transfer_plan& {
                return part = plan_for_rank(src, dst, me);
              },
              detail::layouts_hash(src, dst, element_bytes, o), local_source,
              detail::into_vector<std::byte>{&out}, element_bytes, o);
  return out;
}

/// Scalable form into a caller's buffer of exactly the target shard's size.
inline void redistribute(MPI_Comm comm, const layout& src, const layout& dst,
                         std::span<const std::byte> local_source,
                         std::span<std::byte> local_target, std::size_t element_bytes,
                         redistribute_options o = {}) {
  detail::run(comm,
              [&](index_t me, transfer_plan& part) -> const transfer_plan& {
                return part = plan_for_rank(src, dst, me);
              },
              detail::layouts_hash(src, dst, element_bytes, o), local_source,
              detail::into_span{local_target}, element_bytes, o);
}

/// Typed form of the scalable redistribute.
template <class T>
std::vector<T> redistribute(MPI_Comm comm, const layout& src, const layout& dst,
                            std::span<const T> local_source, redistribute_options o = {}) {
  static_assert(std::is_trivially_copyable_v<T>, "redistribute: T must be trivially copyable");
  std::vector<T> out;
  detail::run(comm, [&](index_t me, transfer_plan& part) -> const transfer_plan& {
                return part = plan_for_rank(src, dst, me);
              },
              detail::layouts_hash(src, dst, sizeof(T), o), std::as_bytes(local_source),
              detail::into_vector<T>{&out}, sizeof(T), o);
  return out;
}

}  // namespace reshard::mpi
