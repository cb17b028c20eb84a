// reshard/io/plan_executor.hpp: the copy executor of checkpoint plans. It runs the items of a
// plan's targets (checkpoint_plan.hpp) into sinks (tensor_sink.hpp), reading the source files the
// plan names and nothing else: a raw item is copied as stored (or cast), a sliced item is
// assembled from its transfers. It does not decide anything the plan says; everything that
// writes, loads or verifies a checkpoint runs through it (transform_job, execute_plan).
//
// Memory: a target tensor is assembled in chunks of at most `buffer_bytes` (contiguous row ranges
// of the target box), each filled from the transfers it meets with the core's copy jobs
// (convert.hpp) and streamed to the sink. read_mode::pread (the default) fills a chunk with
// pread(2) (each source range at once, into a scratch buffer, or run by run); read_mode::mmap
// copies from the mappings, whose pages the page budget (page_budget.hpp) releases. Either way
// the peak resident memory is a few buffers per job beside the file indexes.
//
// Read groups: consecutive targets that read overlapping ranges of the same source files
// (read_groups: four row blocks written as a 2x4 grid, where the four targets of a grid row each
// need a quarter of every row of the same two files) are executed together, chunk round by chunk round (run_targets), and the ranges of
// one file their chunks need are read as one: each byte once, where alone each target read the
// rows whole and kept a quarter. Each target of a group gets a share of the job's buffer. A
// group that has more than one thread and writes directly to a disk writes each member's chunk c
// on a thread of its own while it reads chunk c + 1 (assemble, overlap_writes): the writes keep
// the disk busy while the group reads. With pread, the group's small source files (a few tensors
// each, as thousands of ranks save) of which it takes every tensor are read whole when it starts,
// one pread(2) per file instead of one per tensor (read_whole_files).
//
// Checks: before it reads an item, the executor checks the item against the source file's index
// (the tensor exists, with the plan's dtype, the dims of the box the plan says the sender holds,
// and for a raw copy the stored ranges the plan names), so a plan that disagrees with its
// sources is an error naming the file and the parameter, never wrong bytes.
//
// The reads of a chunk round (clusters of file ranges by pread, or copies from the mappings) are in
// chunk_reads.hpp; this header assembles items from them, target by target or in read groups.
#pragma once

#include <reshard/box.hpp>
#include <reshard/convert.hpp>
#include <reshard/error.hpp>
#include <reshard/layout.hpp>
#include <reshard/parallel.hpp>
#include <reshard/io/cast.hpp>
#include <reshard/io/checkpoint.hpp>
#include <reshard/io/checkpoint_plan.hpp>
#include <reshard/io/chunk_reads.hpp>
#include <reshard/io/detail/text.hpp>
#include <reshard/io/dtype.hpp>
#include <reshard/io/memory_fit.hpp>
#include <reshard/io/page_budget.hpp>
#include <reshard/io/summary.hpp>
#include <reshard/io/tensor_sink.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace reshard::io {

/// Where a transform stands; passed to transform_options::progress (calls are serialized).
struct transform_progress {
  index_t rank = 0;                 ///< the target rank being written
  std::string_view parameter;       ///< the parameter just written (or being written)
  std::uint64_t bytes_done = 0;     ///< tensor bytes written so far, all targets
  std::uint64_t bytes_total = 0;    ///< tensor bytes to write, all targets
  std::size_t files_done = 0;       ///< target files complete
  std::size_t files_total = 0;
};

namespace detail {

// The chunks of a row-major slice of shape `e` (element size `elem`) of at most `limit` bytes
// each (at least one innermost row of the chosen dim): boxes in slice-local coordinates, in
// order, each a contiguous byte range of the slice.
template <class F>
void for_each_chunk(const index_list& e, std::size_t elem, std::uint64_t limit, F&& f) {
  const std::size_t n = e.size();
  box whole{index_list(n, 0), e};
  if (n == 0 || volume(e) == 0) {
    f(whole);
    return;
  }
  // inner[d]: bytes of one index of dim d (everything after it)
  std::vector<std::uint64_t> inner(n);
  std::uint64_t acc = elem;
  for (std::size_t d = n; d-- > 0;) {
    inner[d] = acc;
    acc *= static_cast<std::uint64_t>(e[d]);
  }
  if (acc <= limit) {
    f(whole);
    return;
  }
  std::size_t d = 0;
  while (d + 1 < n && inner[d] > limit) ++d;
  const index_t k = static_cast<index_t>(std::max<std::uint64_t>(1, limit / inner[d]));
  std::vector<index_t> idx(d, 0);  // odometer over dims before d
  box c{index_list(n, 0), e};
  for (std::size_t i = 0; i < d; ++i) c.extent[i] = 1;
  while (true) {
    for (std::size_t i = 0; i < d; ++i) c.offset[i] = idx[i];
    for (index_t a = 0; a < e[d]; a += k) {
      c.offset[d] = a;
      c.extent[d] = std::min(k, e[d] - a);
      f(static_cast<const box&>(c));
    }
    std::size_t i = d;
    while (i > 0) {
      --i;
      if (++idx[i] < e[i]) break;
      idx[i] = 0;
      if (i == 0) return;
    }
    if (d == 0) return;
  }
}

}  // namespace detail

namespace detail {
// The elements [first, last] of `held` (row-major) that box `where` inside it spans.
inline std::pair<index_t, index_t> held_span(const box& held, const box& where) {
  index_t lo = 0, hi = 0;
  for (std::size_t d = 0; d < held.extent.size(); ++d) {
    lo = lo * held.extent[d] + (where.offset[d] - held.offset[d]);
    hi = hi * held.extent[d] + (where.offset[d] + where.extent[d] - 1 - held.offset[d]);
  }
  return {lo, hi};
}
// Do targets a and b read overlapping ranges of one file in one of their sliced items (the same
// item of both: the same source tensor of the same rank)? Targets that read the same files but
// disjoint ranges (row blocks of column blocks) gain nothing together, and a group holds a file
// writer per target.
inline bool share_reads(const checkpoint_plan& plan, const plan_target& a, const plan_target& b) {
  for (std::size_t k = 0; k < a.items.size() && k < b.items.size(); ++k) {
    const plan_item &x = a.items[k], &y = b.items[k];
    if (x.transfers.empty() || y.transfers.empty() || y.source_name != x.source_name) continue;
    const auto holds = plan.holds.find(x.source_name);
    if (holds == plan.holds.end()) continue;
    for (const plan_transfer& u : x.transfers)
      for (const plan_transfer& v : y.transfers) {
        if (u.rank != v.rank || volume(u.where) == 0 || volume(v.where) == 0) continue;
        const box* hu = held_box(holds->second, u.rank, u.where);
        const box* hv = held_box(holds->second, v.rank, v.where);
        if (!hu || hu != hv) continue;
        const auto su = held_span(*hu, u.where), sv = held_span(*hv, v.where);
        if (su.first <= sv.second && sv.first <= su.second) return true;
      }
  }
  return false;
}
}  // namespace detail

/// The targets of `plan` in read groups, for plan_executor::run_targets: runs of consecutive
/// targets with as many items, each reading an overlapping range of a file with the one before it
/// (detail::share_reads: a sliced item of both reads the same source tensor of one rank), at most
/// `most` to a group; a target with no sliced item is a group alone. The targets of a group need
/// the same rows of the same files when they split them differently (4 row blocks read as a 2x4
/// grid: the 4 targets of a row read the same 2 files; or 8 column blocks read as 12, where 3
/// consecutive targets take all the columns of 2 sources' rows, each also reading its own rank's
/// replicated tensors), and executed together they read each such range once, with no gap
/// between the columns one target takes and the next. Every target is in exactly one group, the
/// groups in the plan's order.
inline std::vector<std::vector<std::size_t>> read_groups(const checkpoint_plan& plan, std::size_t most) {
  std::vector<std::vector<std::size_t>> out;
  for (std::size_t i = 0; i < plan.targets.size(); ++i) {
    const plan_target& t = plan.targets[i];
    const bool joins = !out.empty() && out.back().size() < most &&
                       plan.targets[out.back().front()].items.size() == t.items.size() &&
                       detail::share_reads(plan, plan.targets[out.back().back()], t);
    if (joins) {
      out.back().push_back(i);
    } else {
      out.push_back({i});
    }
  }
  return out;
}

/// The source files of a plan, by rank.
using plan_sources = std::map<index_t, const checkpoint_reader*>;

/// The source files a plan's execution reads, checked against the plan (plan_executor's sources;
/// thread-safe, shared by the jobs of a run): every source rank a target reads is open, or an
/// error names the target; a tensor is found and checked against what the plan says the file
/// holds before a byte of it is read; the page budget of what the jobs touch (page_budget: each
/// file's pages released once no target needs it any more); and the tensor bytes taken from
/// each file. `op` names the workflow in messages.
class plan_source_files {
 public:
  plan_source_files(const checkpoint_plan& plan, plan_sources sources, std::uint64_t budget_bytes, std::string op)
      : plan_(plan), sources_(std::move(sources)), op_(std::move(op)), budget_(budget_bytes, uses()) {}

  plan_source_files(const plan_source_files&) = delete;
  plan_source_files& operator=(const plan_source_files&) = delete;

  /// Source rank r's file (one the plan reads).
  const checkpoint_reader& reader(index_t r) const { return *sources_.at(r); }

  /// The tensor it.source_name of source rank r's file, checked against the plan: present (at
  /// `held`, the box the plan says the file holds, when given), of the plan's dtype, and with
  /// held's dims and bytes.
  const tensor_ref& tensor(index_t r, const plan_item& it, const box* held) const {
    const checkpoint_reader& rd = reader(r);
    const tensor_ref* e = held ? rd.find(it.source_name, *held) : rd.find(it.source_name);
    const auto fail = [&](const std::string& why) {
      report_error(op_ + ": " + rd.path().string() + ": parameter " + detail::quote_name(it.source_name) + ": " + why +
                   " (the plan does not match this source file)");
    };
    if (!e) fail(rd.find(it.source_name) ? "no chunk stored at " + to_string(*held) : std::string("missing"));
    if (e->type != it.from)
      fail("dtype " + std::string(ms_name(e->type)) + ", the plan reads " + std::string(ms_name(it.from)));
    if (held) {
      const index_list dims = e->is_scalar() ? index_list{} : index_list(e->dims.begin(), e->dims.end());
      if (e->is_scalar() != (held->extent.size() == 0) || (!e->is_scalar() && dims != held->extent))
        fail("dims " + detail::format_dims(e->dims) + ", the plan says the file holds " + to_string(*held));
      if (e->content_size() != static_cast<std::uint64_t>(volume(held->extent)) * element_size(e->type))
        fail(std::to_string(e->content_size()) + " bytes, the plan says " + to_string(*held));
    }
    return *e;
  }

  /// A raw item's tensor (tensor()), stored where the plan says: the same pieces at the same
  /// offsets.
  const tensor_ref& raw_tensor(const plan_item& it) const {
    const checkpoint_reader& rd = reader(it.source_rank);
    const tensor_ref& e = tensor(it.source_rank, it, nullptr);
    bool same = e.pieces.size() == it.stored.size();
    for (std::size_t k = 0; same && k < e.pieces.size(); ++k)
      same = rd.offset_of(e.pieces[k].data()) == it.stored[k].offset && e.pieces[k].size() == it.stored[k].bytes;
    if (!same)
      report_error(op_ + ": " + rd.path().string() + ": parameter " + detail::quote_name(it.source_name) +
                   ": stored elsewhere than the plan says (the plan does not match this source file)");
    return e;
  }

  /// The tensor bytes of source rank r's file (all its entries' contents; a file the plan reads),
  /// summed once when the executor starts, not by every read group that asks.
  std::uint64_t tensor_bytes(index_t r) const {
    const auto at = std::lower_bound(tensor_bytes_.begin(), tensor_bytes_.end(), r,
                                     [](const std::pair<index_t, std::uint64_t>& x, index_t k) { return x.first < k; });
    RESHARD_EXPECTS(at != tensor_bytes_.end() && at->first == r, "plan_source_files: a source the plan does not read");
    return at->second;
  }

  /// Tensor data taken from the sources: (source rank, bytes), as a read group counted them, all
  /// under one lock (the jobs' groups end at different times: a lock per item's transfer was a
  /// lock the jobs waited for each other at, thousands of times per run).
  void counted(std::span<const std::pair<index_t, std::uint64_t>> taken) {
    const std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [r, bytes] : taken) read_by_source_[r] += bytes;
  }

  /// `range` of source rank r's mapping was read (the page budget; a no-op for pread reads).
  void touched(index_t r, std::span<const std::byte> range) { budget_.touched(r, range); }

  /// Target i is done: the files no other target needs any more release their pages.
  void retire(std::size_t i) { budget_.retire(read_by_target_.at(i)); }

  /// The tensor bytes taken from each source file so far, by rank, counted where the executor
  /// reads them (a raw copy's content, each copy job's box): a run's are the plan's reads
  /// (plan_source::bytes_read; law E6).
  std::map<index_t, std::uint64_t> bytes_read_by_source() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return read_by_source_;
  }

 private:
  // Per source: the reader and how many targets read it; and each target's sources (read_by_target_).
  std::map<index_t, std::pair<const checkpoint_reader*, std::int64_t>> uses() {
    std::map<index_t, std::pair<const checkpoint_reader*, std::int64_t>> u;
    read_by_target_.resize(plan_.targets.size());
    for (std::size_t i = 0; i < plan_.targets.size(); ++i) {
      const plan_target& t = plan_.targets[i];
      std::vector<index_t>& mine = read_by_target_[i];
      for (const plan_item& it : t.items) for_each_read(it, [&](index_t r, std::uint64_t) { mine.push_back(r); });
      std::sort(mine.begin(), mine.end());
      mine.erase(std::unique(mine.begin(), mine.end()), mine.end());
      for (index_t r : mine) {
        auto f = sources_.find(r);
        if (f == sources_.end() || !f->second)
          report_error(op_ + ": target rank " + std::to_string(t.rank) + " reads source rank " + std::to_string(r) +
                       ", whose file is not open");
        auto& e = u[r];
        e.first = f->second;
        ++e.second;
      }
    }
    tensor_bytes_.reserve(u.size());
    for (const auto& [r, e] : u) {  // ascending ranks
      std::uint64_t sum = 0;
      for (const tensor_ref& t : e.first->entries()) sum += t.content_size();
      tensor_bytes_.emplace_back(r, sum);
    }
    return u;
  }

  const checkpoint_plan& plan_;
  plan_sources sources_;
  std::string op_;
  std::vector<std::vector<index_t>> read_by_target_;  // each target's source ranks, ascending (before budget_)
  std::vector<std::pair<index_t, std::uint64_t>> tensor_bytes_;  // tensor_bytes(), by rank (before budget_)
  page_budget budget_;
  mutable std::mutex mutex_;  // read_by_source_
  std::map<index_t, std::uint64_t> read_by_source_;
};

/// Runs the items of a checkpoint plan's targets into sinks. Thread-safe across targets: the
/// jobs of a run each execute their own targets, sharing the page budget and the progress.
class plan_executor {
 public:
  /// `exec`: the jobs (for the page budget) and the chunk buffer; `op` names the workflow in
  /// messages; `progress` sees every item written (bytes_total: the plan's bytes_written).
  plan_executor(const checkpoint_plan& plan, plan_sources sources, execution_config exec, read_mode reads,
                std::string op, std::function<void(const transform_progress&)> progress = {})
      : plan_(plan), files_(plan, std::move(sources), std::uint64_t{std::max(exec.jobs, 1u)} * exec.buffer_bytes, op),
        exec_(exec), reads_(reads), op_(std::move(op)), progress_(std::move(progress)) {}

  plan_executor(const plan_executor&) = delete;
  plan_executor& operator=(const plan_executor&) = delete;

  /// Executes target i of the plan into `out` (run_targets with a group of one).
  transform_summary run_target(std::size_t i, tensor_sink& out) {
    tensor_sink* o = &out;
    return std::move(run_targets(std::span<const std::size_t>(&i, 1), std::span<tensor_sink* const>(&o, 1)).front());
  }

  /// Executes the targets `group` of the plan (a read group: read_groups) into `outs`, one sink
  /// each, in lockstep: the k-th items of all of them, then the (k+1)-th; the chunks of their
  /// sliced items round by round, so that a source range several of them need is read once
  /// (read_mode::pread). Each target's items reach its sink in order, open_file() before each
  /// file's first, finish() at the end. `threads` share each round's reads, copies and writes
  /// (for a group that has the machine's cores to itself); with more than one, more than one
  /// target and overlap_writes(true), each target's writes run on a thread of its own beside the
  /// next round's reads, the group then holding two chunks per target. Returns what was done per target: sliced, copied,
  /// bytes_read (tensor bytes needed from the sources), file_bytes_read (bytes read from the
  /// files; a range read for several targets is counted once, by the first), bytes_written (the
  /// tensor bytes given to the sink). read_mode::pread: the group's small source files are read
  /// whole first, once each (read_whole_files), and counted whole in file_bytes_read.
  std::vector<transform_summary> run_targets(std::span<const std::size_t> group, std::span<tensor_sink* const> outs,
                                             unsigned threads = 1) {
    RESHARD_EXPECTS(!group.empty() && group.size() == outs.size(), "plan_executor: one sink per target of a group");
    std::vector<transform_summary> s(group.size());
    std::vector<member> m(group.size());
    detail::chunk_round r;  // reused by every chunk round of the group
    r.threads = std::max(threads, 1u);
    detail::whole_files whole;  // pread: the group's small source files, read once
    if (reads_ == read_mode::pread && whole_files_) {
      read_whole_files(group, whole, s);
      r.whole = &whole;
    }
    std::size_t rounds = 0;
    for (std::size_t g = 0; g < group.size(); ++g) rounds = std::max(rounds, plan_.targets.at(group[g]).items.size());
    std::vector<std::size_t> sliced;  // the members whose item of this round is sliced
    std::vector<std::pair<index_t, std::uint64_t>> taken;  // tensor bytes from each source, counted at the end
    for (std::size_t k = 0; k < rounds; ++k) {
      sliced.clear();
      for (std::size_t g = 0; g < group.size(); ++g) {
        const plan_target& t = plan_.targets[group[g]];
        if (k >= t.items.size()) continue;
        const plan_item& it = t.items[k];
        if (it.file + 1 < m[g].files)
          report_error(op_ + ": target rank " + std::to_string(t.rank) + ": parameter " + detail::quote_name(it.name) +
                       " comes after the items of a later file (the plan's items are out of file order)");
        while (m[g].files <= it.file) outs[g]->open_file(m[g].files++);
        m[g].it = &it;
        if (it.raw) {
          copy_raw(*outs[g], it, m[g].slots[0].buffer, s[g], taken);
          ++s[g].copied;
        } else {
          sliced.push_back(g);
          ++s[g].sliced;
        }
      }
      if (!sliced.empty()) assemble(m, outs, sliced, r, s, taken);
      for (std::size_t g = 0; g < group.size(); ++g) {
        const plan_target& t = plan_.targets[group[g]];
        if (k >= t.items.size()) continue;
        s[g].bytes_written += t.items[k].bytes;
        report(t.rank, t.items[k].name, t.items[k].bytes, false);
      }
    }
    files_.counted(taken);
    for (std::size_t g = 0; g < group.size(); ++g) {
      if (m[g].files == 0) outs[g]->open_file(0);
      outs[g]->finish();
      files_.retire(group[g]);
      report(plan_.targets[group[g]].rank, {}, 0, true);
    }
    return s;
  }

  /// read_mode::pread: whether run_targets reads a group's small source files whole, once, as
  /// the group starts (read_whole_files; on by default). write_plan_targets turns it off under
  /// a memory budget (memory_fit.hpp counts a job's chunk buffer and read scratch, not these).
  void read_small_files_whole(bool on) noexcept { whole_files_ = on; }

  /// Whether a group on more than one thread writes its targets' chunks on threads of their own
  /// while it reads the next ones (assemble; off by default). write_plan_targets turns it on for
  /// direct writes, which wait for the disk: without it the disk idles while the group reads.
  /// Buffered writes are copies into the page cache, work for the same cores as the reads.
  void overlap_writes(bool on) noexcept { overlap_ = on; }

  /// The most bytes of a source file read whole (read_whole_files): above it, its ranges are read
  /// round by round, each at most a chunk buffer, which amortizes the system call.
  static constexpr std::uint64_t whole_file_bytes = std::uint64_t{1} << 20;

  /// The tensor bytes taken from each source file so far, by rank (plan_source_files).
  std::map<index_t, std::uint64_t> bytes_read_by_source() const { return files_.bytes_read_by_source(); }

 private:
  const checkpoint_reader& source(index_t r) const { return files_.reader(r); }

  // read_mode::pread: reads into w, with one pread(2) each, the source files the sliced items of
  // `group` read that are small (at most whole_file_bytes and the job's buffer) and of which the
  // group takes every tensor byte (by its transfers and raw copies, each distinct box of a tensor
  // counted once: members that need the same box read it once), while they fit in the job's buffer together. A file of a few
  // tensors is then read once, not once per tensor, and read whole it costs only its index's
  // bytes beyond its ranges (a few per cent); a file the group takes less of is read range by
  // range, so that the bytes read are the bytes needed (at 4096 ranks, where a group of 3 targets
  // takes all of 2 files and a part of 3 others, 1.01 of the bytes needed, against 1.12 when
  // files three quarters taken were read whole and 1.00 when none is, which takes a third more
  // pread(2)s at the same time; docs/benchmarks.md). Each file's bytes are counted once, as
  // file_bytes_read of the first member that reads it. (Not a Hugging Face directory: its shards
  // are files of their own.)
  void read_whole_files(std::span<const std::size_t> group, detail::whole_files& w, std::span<transform_summary> s) {
    struct use {
      index_t rank;
      const std::string* tensor;
      const box* where;
      std::size_t member;
      std::uint64_t bytes;
    };
    std::vector<use> uses;  // what the group takes of each file: its transfers, and the tensors it copies raw
    const box all;          // a raw copy's "box": the whole tensor
    for (std::size_t g = 0; g < group.size(); ++g)
      for (const plan_item& it : plan_.targets[group[g]].items) {
        if (it.raw) uses.push_back({it.source_rank, &it.source_name, &all, g, it.source_bytes});
        for (const plan_transfer& x : it.transfers) uses.push_back({x.rank, &it.source_name, &x.where, g, x.bytes});
      }
    const auto less = [](const index_list& a, const index_list& b) {
      return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end());
    };
    std::sort(uses.begin(), uses.end(), [&](const use& a, const use& b) {
      if (a.rank != b.rank || *a.tensor != *b.tensor) return std::tie(a.rank, *a.tensor) < std::tie(b.rank, *b.tensor);
      if (a.where->offset != b.where->offset) return less(a.where->offset, b.where->offset);
      if (a.where->extent != b.where->extent) return less(a.where->extent, b.where->extent);
      return a.member < b.member;
    });
    const std::uint64_t most = std::min(whole_file_bytes, exec_.buffer_bytes);
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < uses.size();) {
      std::uint64_t need = 0;
      std::size_t e = i, first = i;  // first: the first member that reads the file
      for (; e < uses.size() && uses[e].rank == uses[i].rank; ++e) {
        const bool again = e > i && *uses[e].tensor == *uses[e - 1].tensor && *uses[e].where == *uses[e - 1].where;
        if (!again) need += uses[e].bytes;
        if (uses[e].member < uses[first].member) first = e;
      }
      const checkpoint_reader& rd = source(uses[i].rank);
      const std::uint64_t size = rd.format() == checkpoint_format::hf ? 0 : rd.file_size();
      if (size > 0 && size <= most && total + size <= exec_.buffer_bytes) {
        if (need >= files_.tensor_bytes(uses[i].rank)) {
          w.files.push_back({uses[i].rank, static_cast<std::size_t>(total), size});
          s[uses[first].member].file_bytes_read += size;
          total += size;
        }
      }
      i = e;
    }
    w.bytes.resize(static_cast<std::size_t>(total));
    for (const auto& f : w.files)
      source(f.rank).pread_into(std::span<std::byte>(w.bytes.data() + f.at, static_cast<std::size_t>(f.size)), 0);
  }

  void report(index_t rank, std::string_view name, std::uint64_t bytes, bool file_done) {
    if (!progress_) return;  // no lock per item for nobody to see
    const std::lock_guard<std::mutex> lock(progress_mutex_);
    bytes_done_ += bytes;
    if (file_done) ++files_done_;
    if (progress_) progress_({rank, name, bytes_done_, plan_.bytes_written, files_done_, plan_.targets.size()});
  }

  // A raw item: the stored content as it is (a ckpt entry's serialized Values when the sink
  // takes them and nothing is cast), or cast in steps of whole elements.
  void copy_raw(tensor_sink& out, const plan_item& it, std::vector<std::byte>& buffer, transform_summary& s,
                std::vector<std::pair<index_t, std::uint64_t>>& taken) {
    const tensor_ref& e = files_.raw_tensor(it);
    const dtype to = it.to;
    if (to != e.type) {  // cast: in steps of whole elements, from the mapping into the buffer
      const std::size_t in = element_size(e.type), o = element_size(to);
      const std::uint64_t size = e.content_size();
      const std::uint64_t step = std::max<std::uint64_t>(1, exec_.buffer_bytes / (in + o)) * in;
      const std::vector<std::uint64_t> starts = detail::piece_starts(e);
      out.begin(it.name, to, e.dims, size / in * o);
      buffer.resize(static_cast<std::size_t>(step + step / in * o));
      for (std::uint64_t off = 0; off < size; off += step) {
        const auto n = static_cast<std::size_t>(std::min(step, size - off));
        const std::size_t k = detail::piece_of(starts, off);
        const std::byte* src = e.pieces[k].data() + (off - starts[k]);  // inside one stored piece: cast from there
        if (off + n > starts[k] + e.pieces[k].size()) {  // across stored pieces: joined first
          detail::copy_from_pieces(e.pieces, starts, off, buffer.data(), n);
          src = buffer.data();
        }
        const std::span<std::byte> cast(buffer.data() + step, n / in * o);
        cast_elements(std::span<const std::byte>(src, n), e.type, cast, to);
        out.append(cast);
      }
      out.end();
    } else if (!(e.ckpt && (it.name == e.name || e.map_tensor) && out.copy_serialized(*e.ckpt, it.name))) {
      out.begin(it.name, e.type, e.dims, e.content_size());
      for (auto p : e.pieces) out.append(p);
      out.end();
    }
    s.bytes_read += e.content_size();
    s.file_bytes_read += e.content_size();
    taken.emplace_back(it.source_rank, e.content_size());
    for (auto p : e.pieces) files_.touched(it.source_rank, p);
  }

  // A chunk of a member being assembled or written: its buffers and where it is.
  struct chunk_slot {
    std::vector<std::byte> buffer;  // the chunk assembled (or cast) when the sink takes no direct writes
    std::vector<std::byte> staged;  // with a cast: the chunk in the source's dtype
    std::byte* to = nullptr;        // the chunk's destination
    std::uint64_t bytes = 0, out_bytes = 0;  // the chunk in the source's and the output's dtype
  };
  // One target of a group being executed (run_targets): its buffers, kept from item to item so
  // that a target's items allocate once, not once each, and the sliced item of the round. Two
  // chunk slots when the group's writes overlap its reads (assemble): chunk c is written from
  // one while chunk c + 1 is assembled in the other.
  struct member {
    chunk_slot slots[2];
    reshard::background writer;             // overlap: writes the member's chunks, one at a time
    std::vector<detail::src_view> views;    // per transfer (the first transfers.size() are the item's)
    std::vector<std::uint64_t> from;  // bytes read per transfer
    std::vector<box> chunks;        // the item's chunks, in target coordinates, in order
    std::size_t files = 0;          // the files opened
    const plan_item* it = nullptr;  // the item of the round
  };
  // The sliced items of the members `who` (m[g].it, one each, the same round), assembled chunk
  // by chunk: chunk c of every one of them, then chunk c + 1. A member's chunks are at most its
  // share of the buffer (buffer_bytes / members), so that the group holds what one target did.
  //
  // A group of more than one member with more than one thread (a group that has the jobs to
  // itself) overlaps its writes with its reads when told to (overlap_writes): each member's
  // writer thread writes its chunk c from one slot while the round's threads read and copy
  // chunks c + 1 into the other slots, and starts chunk c + 1 once chunk c is written. So as
  // many writes are in flight as there are members, and the disk is kept busy: without the
  // overlap a disk that the writes wait for (direct writes) idled while the round read, and the
  // reads waited for the slowest write. The group then holds two chunks per member (no memory
  // budget has read groups). Each sink still sees its calls in order, one at a time.
  void assemble(std::span<member> m, std::span<tensor_sink* const> outs, std::span<const std::size_t> who,
                detail::chunk_round& r, std::span<transform_summary> s, std::vector<std::pair<index_t, std::uint64_t>>& taken) {
    const bool overlap = overlap_ && r.threads > 1 && m.size() > 1;
    std::size_t rounds = 0;
    for (std::size_t g : who) {
      start_item(m[g], *outs[g], m.size());
      rounds = std::max(rounds, m[g].chunks.size());
    }
    for (std::size_t c = 0; c < rounds; ++c) {
      const std::size_t slot = overlap ? c % 2 : 0;
      r.jobs.clear();
      r.view.clear();
      r.owner.clear();
      for (std::size_t g : who)
        if (c < m[g].chunks.size()) add_chunk_jobs(m[g], m[g].slots[slot], g, *outs[g], m[g].chunks[c], !overlap, r, s[g]);
      if (reads_ == read_mode::pread) {
        detail::read_jobs(
            r, [&](index_t rank) -> const checkpoint_reader& { return source(rank); }, exec_.buffer_bytes,
            [&](std::size_t job, std::uint64_t bytes) { s[r.owner[job]].file_bytes_read += bytes; });
      } else {
        detail::copy_mapped(r);
        for (const auto& [rank, range] : r.touched) files_.touched(rank, range);
        for (std::size_t k = 0; k < r.jobs.size(); ++k) {
          const auto n = static_cast<std::uint64_t>(r.jobs[k].outer) * r.jobs[k].run;
          s[r.owner[k]].file_bytes_read += n;
        }
      }
      if (overlap) {  // each member's chunk c written once its chunk c - 1 is
        for (std::size_t g : who) {
          member& x = m[g];
          if (c < x.chunks.size())
            x.writer.start([this, &x, z = &x.slots[slot], out = outs[g]] { emit(x, *z, *out); });
        }
      } else {
        reshard::parallel_for(who.size(), r.threads, [&](std::size_t w) {  // each member its own sink
          if (c < m[who[w]].chunks.size()) emit(m[who[w]], m[who[w]].slots[slot], *outs[who[w]]);
        });
      }
    }
    for (std::size_t g : who) m[g].writer.wait();
    for (std::size_t g : who) {
      member& x = m[g];
      outs[g]->end();
      for (std::size_t k = 0; k < x.it->transfers.size(); ++k) taken.emplace_back(x.it->transfers[k].rank, x.from[k]);
      for (chunk_slot& z : x.slots) {
        if (z.buffer.capacity() > exec_.buffer_bytes) std::vector<std::byte>().swap(z.buffer);
        if (z.staged.capacity() > exec_.buffer_bytes) std::vector<std::byte>().swap(z.staged);
      }
    }
    if (r.range.capacity() > 4 * exec_.buffer_bytes) std::vector<std::byte>().swap(r.range);
  }

  // Checks member x's item against the plan's source table and the source files, begins it in
  // `out`, and cuts its box into chunks of at most buffer_bytes / `members` (in the larger of the
  // source's and the target's dtype).
  void start_item(member& x, tensor_sink& out, std::size_t members) {
    const plan_item& it = *x.it;
    const std::size_t elem = element_size(it.from), out_elem = element_size(it.to);
    const box& tb = it.target;
    const std::uint64_t total = static_cast<std::uint64_t>(volume(tb)) * out_elem;
    if (total != it.bytes)
      report_error(op_ + ": parameter " + detail::quote_name(it.name) + ": the plan says " + std::to_string(it.bytes) +
                   " bytes for the box " + to_string(tb) + " (a plan that does not add up)");
    if (x.views.size() < it.transfers.size()) x.views.resize(it.transfers.size());
    const auto holds = plan_.holds.find(it.source_name);  // what each sender's file holds of it
    for (std::size_t k = 0; k < it.transfers.size(); ++k) {
      const plan_transfer& t = it.transfers[k];
      const box* held = holds == plan_.holds.end() ? nullptr : held_box(holds->second, t.rank, t.where);
      if (!held)
        report_error(op_ + ": parameter " + detail::quote_name(it.name) + ": the plan's source table does not say what "
                     "source rank " + std::to_string(t.rank) + " holds (a plan that does not add up)");
      const tensor_ref& e = files_.tensor(t.rank, it, held);
      if (intersect(t.where, *held) != t.where || intersect(t.where, tb) != t.where)
        report_error(op_ + ": parameter " + detail::quote_name(it.name) + ": the plan's transfer " + to_string(t.where) +
                     " from source rank " + std::to_string(t.rank) + " is not inside both the box it holds, " +
                     to_string(*held) + ", and the target box " + to_string(tb));
      detail::src_view& v = x.views[k];
      v.rank = t.rank;
      v.e = &e;
      v.held = held;
      detail::piece_starts(e, v.starts);
    }
    x.from.assign(it.transfers.size(), 0);
    out.begin(it.name, it.to, it.dims, total);
    const std::uint64_t limit = exec_.buffer_bytes / std::max<std::size_t>(members, 1) / std::max(elem, out_elem) * elem;
    x.chunks.clear();
    detail::for_each_chunk(tb.extent, elem, limit, [&](const box& local) {
      box c = local;
      for (std::size_t i = 0; i < c.offset.size(); ++i) c.offset[i] += tb.offset[i];
      x.chunks.push_back(std::move(c));
    });
  }

  // The copy jobs of chunk `c` of member x (number g): one per transfer the chunk meets, from the
  // source's mapping (offsets from the content's first stored piece; the others follow it) to the
  // chunk's place: the target's memory, the buffer, or with a cast `staged` in the source's dtype
  // (cast as a whole by emit(), while it is in the cache: one kernel call a chunk, not one a run).
  void add_chunk_jobs(member& x, chunk_slot& z, std::size_t g, tensor_sink& out, const box& c, bool in_place,
                      detail::chunk_round& r, transform_summary& s) {
    const plan_item& it = *x.it;
    const std::size_t elem = element_size(it.from);
    z.bytes = static_cast<std::uint64_t>(volume(c)) * elem;
    z.out_bytes = static_cast<std::uint64_t>(volume(c)) * element_size(it.to);
    if (it.to != it.from) {
      z.staged.resize(static_cast<std::size_t>(z.bytes));
      z.to = z.staged.data();
    } else {
      z.to = in_place ? out.direct(static_cast<std::size_t>(z.bytes)) : nullptr;
      if (!z.to) z.buffer.resize(static_cast<std::size_t>(z.bytes)), z.to = z.buffer.data();
    }
    for (std::size_t k = 0; k < it.transfers.size(); ++k) {
      const box in = intersect(it.transfers[k].where, c);
      if (volume(in) == 0) continue;
      const detail::src_view& v = x.views[k];
      r.jobs.push_back(reshard::detail::make_copy_job(v.e->pieces.front().data(), *v.held, z.to, c, in, elem));
      r.view.push_back(&v);
      r.owner.push_back(g);
      const auto n = static_cast<std::uint64_t>(volume(in)) * elem;
      s.bytes_read += n;
      x.from[k] += n;
    }
  }

  // Member x's chunk assembled in slot z to its sink (cast first).
  void emit(member& x, chunk_slot& z, tensor_sink& out) {
    const plan_item& it = *x.it;
    if (it.to == it.from) return out.append(std::span<const std::byte>(z.to, static_cast<std::size_t>(z.bytes)));
    std::byte* o = out.direct(static_cast<std::size_t>(z.out_bytes));
    if (!o) z.buffer.resize(static_cast<std::size_t>(z.out_bytes)), o = z.buffer.data();
    const std::span<std::byte> cast_chunk(o, static_cast<std::size_t>(z.out_bytes));
    cast_elements(std::span<const std::byte>(z.to, static_cast<std::size_t>(z.bytes)), it.from, cast_chunk, it.to);
    out.append(cast_chunk);
  }

  const checkpoint_plan& plan_;
  plan_source_files files_;
  execution_config exec_;
  read_mode reads_;
  std::string op_;
  std::function<void(const transform_progress&)> progress_;
  std::mutex progress_mutex_;  // the progress and the counts below
  std::uint64_t bytes_done_ = 0;
  std::size_t files_done_ = 0;
  bool whole_files_ = true;  // read_small_files_whole
  bool overlap_ = false;     // overlap_writes
};

}  // namespace reshard::io
