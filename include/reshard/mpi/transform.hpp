// reshard/mpi/transform.hpp: one checkpoint transform (io::transform_checkpoints) split among the
// processes of an MPI communicator, e.g. `mpirun -n K reshard transform ...` (opt-in:
// reshard::mpi and reshard::io).
//
// Every process sizes the targets from one target per pipeline stage (io::transform_stage_bytes:
// the indexes of the few source files those read), splits them as `reshard execute --part I/K`
// does (io::balance_targets: contiguous runs of target ranks, balanced by bytes), and plans,
// checks and writes its own run (io::transform_job_for_ranks), opening only the source files its
// targets read: no process reads every source's index, and neighbouring targets, which read
// neighbouring sources (io::transform_replica_policy: a replicated slice from the source rank
// nearest the target), share a process. Of the source rank directories no target of a process
// reads, each process checks its share exist (1/K of them, not all M). A target's plan does not depend on the other targets
// planned beside it, so the files are byte for byte those of the one-process
// io::transform_checkpoints.
//
// All or nothing, across processes. The processes agree (MPI_Allreduce of a verdict) three times:
//   1. after every check (strategies, sources, CRC trailers, existing outputs): if any process
//      failed, no process writes anything;
//   2. when every process has written its files, still staged as `<file>.reshard-<pid>.<n>.part`: if
//      any failed, every process removes its staged files, and no output appears;
//   3. after each process renamed its files into place. Only a failure between 2 and 3 (a rename
//      refused, a process killed while renaming) leaves some outputs in place: each one complete
//      and correct, the others absent.
// A process that dies (killed, out of memory) never reaches the next agreement; the MPI launcher
// then ends the job with an error, and what the dead process staged stays as `*.part` files,
// never under an output's name. When a check fails, every process throws the same error: each
// distinct message once, with the processes that reported it.
//
//   @post the files written by transform_checkpoints(comm, args...) on K processes ==
//         the files written by io::transform_checkpoints(args...), byte for byte
#pragma once

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "reshard/error.hpp"
#include "reshard/io/dcp_writer.hpp"
#include "reshard/io/manifest.hpp"
#include "reshard/io/plan_file.hpp"
#include "reshard/io/summary.hpp"
#include "reshard/io/strategy_layouts.hpp"
#include "reshard/io/transform.hpp"
#include "reshard/io/work_split.hpp"
#include "reshard/mpi/common.hpp"

namespace reshard::mpi {

struct parallel_transform_options {
  /// Called on every process with its own progress (its targets only), as
  /// io::transform_options::progress is in one process; that one is called on process 0 only,
  /// with the progress of all processes.
  std::function<void(const io::transform_progress&)> local_progress{};
  /// The merged summary lists the tensors of every file written (written_file::tensors), as one
  /// process's does. false: each file's path, size and digest only, which the processes gather
  /// at a fraction of the cost (at 3072 files of 24 tensors, 0.9 of 2.7 s went to gathering the
  /// tensors); with transform_options::manifest they are gathered anyway (the manifest lists them).
  bool file_tensors = true;
};

/// What a transform split among processes did: the sums over all processes (source_files and
/// source_bytes count a file once per process that read it), the longest time and the largest
/// peak resident memory of one process, every output and file written (by target rank), every
/// cast and every distinct warning (io::merge_summaries). The same on every process.
struct parallel_transform_summary : io::transform_summary {
  std::vector<std::vector<std::int64_t>> shares;  ///< the target ranks of each process
  io::transform_summary local;                    ///< this process's own share
};

namespace detail {

// What errors are prefixed with (check_mpi, expect_comm: mpi/common.hpp).
inline constexpr const char* transform_op = "transform_checkpoints";

// A process that waits for the others (its share done first) polls without spinning: it
// sleeps between polls, from 50 µs up to 1 ms, and leaves the core to the processes still
// working (MPI implementations busy-poll in blocking calls). Not longer: a poll costs a few
// µs, and a pause is time the job may go on waiting after the others are done.
class idle_backoff {
 public:
  void pause() {
    std::this_thread::sleep_for(pause_);
    pause_ = std::min<std::chrono::microseconds>(pause_ * 2, std::chrono::milliseconds(1));
  }
  void reset() { pause_ = std::chrono::microseconds(50); }

 private:
  std::chrono::microseconds pause_{50};
};

// Waits for `request` without spinning (idle_backoff).
inline void wait_idle(MPI_Request& request) {
  idle_backoff backoff;
  while (true) {
    int done = 0;
    check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), transform_op, "MPI_Test");
    if (done) return;
    backoff.pause();
  }
}

// Every process's `mine`, in process order, on every process (collective).
inline std::vector<std::string> allgather_text(MPI_Comm comm, const std::string& mine) {
  int size = 1;
  check_mpi(MPI_Comm_size(comm, &size), transform_op, "MPI_Comm_size");
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(static_cast<std::size_t>(size)), displs(static_cast<std::size_t>(size));
  check_mpi(MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, comm), transform_op, "MPI_Allgather");
  int total = 0;
  for (int p = 0; p < size; ++p) displs[static_cast<std::size_t>(p)] = total, total += lens[static_cast<std::size_t>(p)];
  std::string all(static_cast<std::size_t>(total), '\0');
  check_mpi(MPI_Allgatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, comm),
            transform_op, "MPI_Allgatherv");
  std::vector<std::string> out;
  out.reserve(static_cast<std::size_t>(size));
  for (int p = 0; p < size; ++p)
    out.push_back(all.substr(static_cast<std::size_t>(displs[static_cast<std::size_t>(p)]),
                             static_cast<std::size_t>(lens[static_cast<std::size_t>(p)])));
  return out;
}

// A failure every process agreed on: rethrown as is, never agreed on again.
struct agreed_error : reshard::error {
  using reshard::error::error;
};
struct agreed_internal_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// One agreement: every process passes its verdict (0 ok, 1 bad input, 2 internal error) and
// message; if any is not 0, every process throws the distinct messages, each once, naming the
// processes that reported it when not all did.
inline void agree(MPI_Comm comm, int verdict, const std::string& message) {
  int size = 1, worst = 0;
  check_mpi(MPI_Comm_size(comm, &size), transform_op, "MPI_Comm_size");
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Iallreduce(&verdict, &worst, 1, MPI_INT, MPI_MAX, comm, &request), transform_op, "MPI_Iallreduce");
  wait_idle(request);
  if (worst == 0) return;
  const std::vector<std::string> said = allgather_text(comm, verdict == 0 ? std::string() : message);
  std::vector<std::pair<std::string, std::vector<int>>> distinct;  // in order of the first process
  for (int p = 0; p < size; ++p) {
    const std::string& m = said[static_cast<std::size_t>(p)];
    if (m.empty()) continue;
    auto it = std::find_if(distinct.begin(), distinct.end(), [&](const auto& d) { return d.first == m; });
    if (it == distinct.end()) distinct.push_back({m, {p}});
    else it->second.push_back(p);
  }
  std::string text;
  for (const auto& [m, procs] : distinct) {
    if (!text.empty()) text += '\n';
    text += m;
    if (static_cast<int>(procs.size()) == size && size > 1) continue;  // every process said it
    if (size == 1) continue;
    text += procs.size() == 1 ? " (process " : " (processes ";
    for (std::size_t k = 0; k < procs.size(); ++k) {
      if (k) text += ", ";
      text += std::to_string(procs[k]);
    }
    text += " of ";
    text += std::to_string(size);
    text += ')';
  }
  if (text.empty()) text = "transform_checkpoints: a process failed without a message";
  if (worst == 1) throw agreed_error(text);
  throw agreed_internal_error(text);
}

// The verdict and message of the exception in flight.
inline std::pair<int, std::string> verdict_of(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const reshard::error& x) {
    return {1, x.what()};
  } catch (const std::exception& x) {
    return {2, x.what()};
  } catch (...) {
    return {2, "unknown exception"};
  }
}

// Progress of all processes on process 0, over a communicator of its own: every other process
// sends {bytes done, files done} (one message in flight at a time, at most 10 a second, plus one
// when a file is done) and a last message when its share is written; process 0 adds them to its
// own and calls the user's progress.
class progress_relay {
 public:
  progress_relay(MPI_Comm comm, bool enabled, std::uint64_t bytes_total, std::size_t files_total,
                 std::function<void(const io::transform_progress&)> user)
      : enabled_(enabled), bytes_total_(bytes_total), files_total_(files_total), user_(std::move(user)) {
    if (!enabled_) return;
    check_mpi(MPI_Comm_dup(comm, &comm_), transform_op, "MPI_Comm_dup");
    check_mpi(MPI_Comm_rank(comm_, &me_), transform_op, "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(comm_, &size_), transform_op, "MPI_Comm_size");
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    any_thread_ = level >= MPI_THREAD_SERIALIZED;
    latest_.assign(static_cast<std::size_t>(size_), {0, 0});
    done_.assign(static_cast<std::size_t>(size_), 0);
  }
  progress_relay(const progress_relay&) = delete;
  progress_relay& operator=(const progress_relay&) = delete;
  ~progress_relay() {
    if (comm_ != MPI_COMM_NULL) {
      if (pending_ != MPI_REQUEST_NULL) MPI_Wait(&pending_, MPI_STATUS_IGNORE);
      MPI_Comm_free(&comm_);
    }
  }

  // This process's progress (calls serialized by the engine).
  void local(const io::transform_progress& p) {
    if (!enabled_) return;
    latest_[static_cast<std::size_t>(me_)] = {p.bytes_done, p.files_done};
    if (!any_thread_) {
      int main = 0;
      MPI_Is_thread_main(&main);
      if (!main) return;
    }
    if (me_ == 0) {
      drain(false);
      draw(p.rank, p.parameter);
      return;
    }
    const auto now = std::chrono::steady_clock::now();
    const bool file_done = p.files_done != last_files_;
    if (!file_done && now - last_sent_ < std::chrono::milliseconds(100)) return;
    if (pending_ != MPI_REQUEST_NULL) {
      int complete = 0;
      check_mpi(MPI_Test(&pending_, &complete, MPI_STATUS_IGNORE), transform_op, "MPI_Test");
      if (!complete) return;
    }
    buffer_[0] = p.bytes_done;
    buffer_[1] = p.files_done;
    last_sent_ = now;
    last_files_ = p.files_done;
    check_mpi(MPI_Isend(buffer_, 2, MPI_UINT64_T, 0, 1, comm_, &pending_), transform_op, "MPI_Isend");
  }

  // This process's share is written (or abandoned): the others tell process 0, which waits for
  // them all and draws the last state. Every process calls it once, at the same agreement.
  void finish() {
    if (!enabled_ || finished_) return;
    finished_ = true;
    if (me_ != 0) {
      if (pending_ != MPI_REQUEST_NULL) check_mpi(MPI_Wait(&pending_, MPI_STATUS_IGNORE), transform_op, "MPI_Wait");
      const auto& mine = latest_[static_cast<std::size_t>(me_)];
      buffer_[0] = mine.first;
      buffer_[1] = mine.second;
      check_mpi(MPI_Send(buffer_, 2, MPI_UINT64_T, 0, 2, comm_), transform_op, "MPI_Send");
      return;
    }
    done_[0] = 1;
    drain(true);
    draw(-1, {});
  }

 private:
  void drain(bool wait) {
    idle_backoff backoff;
    while (true) {
      if (std::all_of(done_.begin(), done_.end(), [](char c) { return c != 0; })) return;
      MPI_Status st;
      int flag = 0;
      check_mpi(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm_, &flag, &st), transform_op, "MPI_Iprobe");
      if (!flag && !wait) return;
      if (!flag) {  // waiting for the others: without spinning
        backoff.pause();
        continue;
      }
      backoff.reset();
      std::uint64_t in[2] = {0, 0};
      check_mpi(MPI_Recv(in, 2, MPI_UINT64_T, st.MPI_SOURCE, st.MPI_TAG, comm_, MPI_STATUS_IGNORE), transform_op, "MPI_Recv");
      latest_[static_cast<std::size_t>(st.MPI_SOURCE)] = {in[0], in[1]};
      if (st.MPI_TAG == 2) done_[static_cast<std::size_t>(st.MPI_SOURCE)] = 1;
      if (wait) draw(-1, {});
    }
  }

  void draw(index_t rank, std::string_view parameter) {
    if (!user_) return;
    io::transform_progress all;
    for (const auto& [b, f] : latest_) all.bytes_done += b, all.files_done += static_cast<std::size_t>(f);
    all.bytes_total = bytes_total_;
    all.files_total = files_total_;
    if (all.files_done == files_total_) {  // the last state, drawn once
      if (drew_last_) return;
      drew_last_ = true;
    }
    all.rank = rank >= 0 ? rank : last_rank_;
    all.parameter = parameter;
    last_rank_ = all.rank;
    user_(all);
  }

  bool enabled_;
  std::uint64_t bytes_total_;
  std::size_t files_total_;
  std::function<void(const io::transform_progress&)> user_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int me_ = 0, size_ = 1;
  bool any_thread_ = false, finished_ = false, drew_last_ = false;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> latest_;
  std::vector<char> done_;
  MPI_Request pending_ = MPI_REQUEST_NULL;
  std::uint64_t buffer_[2] = {0, 0};
  std::chrono::steady_clock::time_point last_sent_{};
  std::uint64_t last_files_ = 0;
  index_t last_rank_ = 0;
};

// The summaries of all processes merged (io::merge_summaries: every field; `elapsed` is this
// process's wall time), the same on every process: each process's summary travels as the
// library's JSON of it (io::to_json, with the tensors of the files written at `level`), made
// from s.local as it is (not from a copy: with its files' tensors, a copy of it cost more than
// its JSON at `files`), and the parts read back are moved into the merge, not copied.
inline void combine(MPI_Comm comm, parallel_transform_summary& s, double elapsed, io::summary_detail level) {
  std::string text;
  {
    nlohmann::json mine = io::to_json(s.local, level);
    mine["seconds"] = elapsed;
    text = mine.dump();
  }
  std::vector<io::transform_summary> parts;
  for (const auto& part : allgather_text(comm, text)) parts.push_back(io::summary_from_json(nlohmann::json::parse(part)));
  static_cast<io::transform_summary&>(s) = io::merge_summaries(std::span<io::transform_summary>(parts), true);
}

}  // namespace detail

/// io::transform_checkpoints(src_dir, dst_dir, prefix, src_strategy, dst_strategy, opts), the
/// target ranks split among the processes of `comm` by bytes. Collective: every process passes
/// the same arguments (paths on a file system they share). opts.progress is called on process
/// 0 only, with the progress of all processes. Throws the same reshard::error on every process if
/// any failed; a process's staged files are removed when its job ends uncommitted.
inline parallel_transform_summary transform_checkpoints(MPI_Comm comm, const std::filesystem::path& src_dir,
                                                        const std::filesystem::path& dst_dir, std::string_view prefix,
                                                        const std::filesystem::path& src_strategy,
                                                        const std::filesystem::path& dst_strategy,
                                                        const io::transform_options& opts = {},
                                                        const parallel_transform_options& popts = {}) {
  using detail::agree;
  using detail::check_mpi;
  using detail::transform_op;
  const detail::comm_info c = detail::expect_comm(comm, transform_op);
  const int me = c.me, size = c.size;
  const auto start = std::chrono::steady_clock::now();
  if (opts.dry_run)  // the same on every process: all refuse together
    reshard::report_error(std::string(transform_op) + ": dry_run is not supported across processes; preview with "
                     "io::transform_checkpoints in one process (the plan does not depend on the processes)");

  // 1. every process sizes the targets from one target per pipeline stage (a few source
  //    indexes: io::transform_stage_bytes), splits them as `reshard execute --part I/K` does
  //    (io::balance_targets: contiguous runs of ranks balanced by bytes), and plans and checks
  //    its own run of targets only (io::transform_job_for_ranks: it opens the source files those
  //    targets read, and no other)
  parallel_transform_summary s;
  int reached = 0;  // agreements this process has taken part in
  io::transform_options o = opts;
  // the manifest lists every process's files: written once, by process 0, after the combine (the
  // processes' jobs compute the digests)
  o.digests = opts.digests || !opts.manifest.empty();
  o.manifest.clear();
  std::optional<detail::progress_relay> relay;
  o.progress = [&](const io::transform_progress& p) {
    if (popts.local_progress) popts.local_progress(p);
    if (relay) relay->local(p);
  };
  std::optional<io::transform_job> job;
  // this process's targets and tensor bytes, then everyone's; whether process 0 shows progress
  std::uint64_t counts[3] = {0, 0, me == 0 && opts.progress ? 1u : 0u};
  try {
    std::vector<std::uint64_t> sizes;
    try {
      sizes = io::transform_stage_bytes(src_dir, src_strategy, dst_strategy, opts);
    } catch (const reshard::error&) {
      // sizes are a hint: split by count, and let the jobs report what is wrong (as one
      // process would, for the targets that meet it)
      sizes.assign(static_cast<std::size_t>(io::strategy_layouts(dst_strategy).ranks()), 0);
    }
    s.shares = io::balance_targets(sizes, static_cast<std::size_t>(size));
    if (opts.format == io::checkpoint_format::dcp) {  // the same split on every process: said once, as agreed
      std::vector<std::vector<io::dcp_run_target>> runs;
      for (const auto& share : s.shares) {
        auto& run = runs.emplace_back();
        for (std::int64_t t : share) run.push_back({t, dst_dir});
      }
      io::check_whole_dcp_target(transform_op, dst_dir, static_cast<index_t>(sizes.size()), runs, "processes",
                                 "run it under mpirun -n 1, or without mpirun");
    }
    const std::vector<std::int64_t>& mine = s.shares[static_cast<std::size_t>(me)];
    if (!mine.empty()) {
      // the source rank directories its targets do not read: each process with targets checks
      // its share of them exist (a missing one fails all, as it fails one process), not all M
      std::pair<index_t, index_t> check{0, 0};  // (this process among those with targets, their number)
      for (int p = 0; p < size; ++p)
        if (!s.shares[static_cast<std::size_t>(p)].empty()) check.first += p < me ? 1 : 0, ++check.second;
      job.emplace(io::transform_job_for_ranks(src_dir, dst_dir, prefix, src_strategy, dst_strategy, mine, o, check));
      job->check();
      counts[0] = job->plan().targets.size();
      counts[1] = job->plan().bytes_written;
    }
    reached = 1;
    agree(comm, 0, {});
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, counts, 3, MPI_UINT64_T, MPI_SUM, comm), transform_op, "MPI_Allreduce");
    relay.emplace(comm, counts[2] != 0, counts[1], static_cast<std::size_t>(counts[0]),
                  me == 0 ? opts.progress : nullptr);

    // 2. each process writes its targets, stepped in agreement with the others: after writing
    //    (staged), after renaming
    if (job) job->stage();
    reached = 2;
    relay->finish();
    agree(comm, 0, {});
    if (job) s.local = job->commit();
    reached = 3;
    agree(comm, 0, {});
  } catch (const detail::agreed_error&) {
    throw;
  } catch (const detail::agreed_internal_error&) {
    throw;
  } catch (...) {
    const auto [verdict, message] = detail::verdict_of(std::current_exception());
    // take part in the agreement the others are waiting at, and in none after it
    if (reached >= 1 && relay) relay->finish();
    agree(comm, verdict, message);
    throw;  // not reached: agree throws on a verdict other than 0
  }

  detail::combine(comm, s, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                  popts.file_tensors || !opts.manifest.empty() ? io::summary_detail::tensors : io::summary_detail::files);
  s.outputs.clear();  // by target rank, as one process lists them
  for (const auto& share : s.shares)
    for (std::int64_t t : share) s.outputs.push_back(io::rank_checkpoint_path(dst_dir, prefix, t, opts.format));
  // the files written in the order of the outputs (a Hugging Face shard by its directory); a
  // lookup table, not a search per comparison (that was quadratic in the targets)
  std::unordered_map<std::string, std::size_t> position;
  for (std::size_t i = 0; i < s.outputs.size(); ++i) position.emplace(s.outputs[i].native(), i);
  const auto position_of = [&](const io::written_file& w) {
    auto hit = position.find(w.path.native());
    if (hit == position.end()) hit = position.find(w.path.parent_path().native());
    return hit == position.end() ? s.outputs.size() : hit->second;
  };
  std::vector<std::pair<std::size_t, std::size_t>> order;  // (position, index in s.written)
  for (std::size_t i = 0; i < s.written.size(); ++i) order.emplace_back(position_of(s.written[i]), i);
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<io::written_file> sorted;
  sorted.reserve(s.written.size());
  for (const auto& [pos, i] : order) sorted.push_back(std::move(s.written[i]));
  s.written = std::move(sorted);
  if (me == 0 && !opts.manifest.empty()) io::write_manifest(opts.manifest, s.written, opts.force);
  return s;
}

}  // namespace reshard::mpi
