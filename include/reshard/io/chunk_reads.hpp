// reshard/io/chunk_reads.hpp: how the plan executor (plan_executor.hpp) reads the source bytes of
// a chunk round: the copy jobs (convert.hpp) of the chunks being assembled, each from its source
// tensor's stored pieces in a checkpoint file, done by pread(2) or from the files' mappings.
//
// By pread, the file ranges the jobs need are sorted per file, and the ranges that overlap or
// touch form a cluster: one read of a cluster serves every job in it, so that the targets of a
// read group that need the same rows read them once. A cluster is read whole when it spans at
// most 4 times the bytes its jobs copy (or 64 KiB), else its jobs run by run. With more than one
// thread the reads (in pieces of at least 1 MiB) and the copies are shared by the threads. The
// small files of a read group may have been read whole when it started (whole_files): the
// ranges of those are copied from there, not read again.
#pragma once

#include <reshard/box.hpp>
#include <reshard/convert.hpp>
#include <reshard/parallel.hpp>
#include <reshard/io/checkpoint.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

namespace reshard::io::detail {

// A tensor's stored pieces as one content: each piece's first content byte.
inline void piece_starts(const tensor_ref& e, std::vector<std::uint64_t>& starts) {
  starts.clear();
  std::uint64_t at = 0;
  for (auto q : e.pieces) starts.push_back(at), at += q.size();
}
inline std::vector<std::uint64_t> piece_starts(const tensor_ref& e) {
  std::vector<std::uint64_t> starts;
  piece_starts(e, starts);
  return starts;
}

// The stored piece of a content holding byte `offset` (`starts`: each piece's first byte).
inline std::size_t piece_of(std::span<const std::uint64_t> starts, std::uint64_t offset) {
  return static_cast<std::size_t>(std::upper_bound(starts.begin(), starts.end(), offset) - starts.begin()) - 1;
}

// Calls f(span) for the stored bytes of [offset, offset + len) of a content split into
// `pieces`, in order (one span per piece the range meets).
template <class F>
void for_each_stored(std::span<const std::span<const std::byte>> pieces, std::span<const std::uint64_t> starts,
                     std::uint64_t offset, std::uint64_t len, F&& f) {
  std::size_t k = piece_of(starts, offset);
  while (len > 0) {
    const std::uint64_t in = offset - starts[k];
    const std::uint64_t n = std::min<std::uint64_t>(len, pieces[k].size() - in);
    f(pieces[k].subspan(static_cast<std::size_t>(in), static_cast<std::size_t>(n)));
    offset += n;
    len -= n;
    ++k;
  }
}

// Copies `len` bytes at `offset` of a content split into `pieces` into `out`.
inline void copy_from_pieces(std::span<const std::span<const std::byte>> pieces,
                             std::span<const std::uint64_t> starts, std::uint64_t offset, std::byte* out,
                             std::uint64_t len) {
  for_each_stored(pieces, starts, offset, len, [&](std::span<const std::byte> b) {
    std::memcpy(out, b.data(), b.size());
    out += b.size();
  });
}

// One transfer's source: its rank, its tensor in the rank's file, the box that file holds, and
// the first content byte of each stored piece.
struct src_view {
  index_t rank = 0;
  const tensor_ref* e = nullptr;
  const box* held = nullptr;
  std::vector<std::uint64_t> starts;
};

// read_mode::pread: the small source files of a read group, each read whole with one pread(2)
// when the group starts (plan_executor::run_targets) instead of range by range in every chunk
// round: a file of 33 KiB holding 24 tensors a target needs is one system call, not 24. The
// group's rounds copy the ranges they need from these bytes (read_jobs).
struct whole_files {
  struct file {
    index_t rank;
    std::size_t at;      // its first byte in `bytes`
    std::uint64_t size;  // the file's size: all its bytes are in `bytes` from `at`
  };
  std::vector<file> files;  // by rank
  std::vector<std::byte> bytes;

  // The bytes of rank's file (from its offset 0) if it was read whole and reaches `hi`, or null.
  const std::byte* find(index_t rank, std::uint64_t hi) const noexcept {
    const auto f = std::lower_bound(files.begin(), files.end(), rank, [](const file& x, index_t r) { return x.rank < r; });
    return f == files.end() || f->rank != rank || hi > f->size ? nullptr : bytes.data() + f->at;
  }
};

// The copy jobs of a chunk round, all members' of a read group (convert.hpp's copy jobs: from the
// sources' mappings into the members' chunks), the member of each, and what reading them needs
// (kept from round to round: nothing allocates once the sizes are reached).
struct chunk_round {
  std::vector<reshard::detail::copy_job> jobs;
  std::vector<const src_view*> view;  // the source of each job
  std::vector<std::size_t> owner;     // the member of each job
  struct file_range {
    index_t rank;
    std::uint64_t lo, hi, need;  // the job's bytes in its file: [lo, hi), need of them copied
    std::size_t job;
  };
  std::vector<file_range> ranges;
  std::vector<std::byte> range;  // pread: the clusters of ranges read at once, one after another
  unsigned threads = 1;          // sharing the round's reads, copies and writes
  struct cluster {  // ranges [first, end) of `ranges`, of one file, read as [lo, hi) (dense) into `range` at `at`
    std::size_t first, end;
    std::uint64_t lo, hi;
    bool dense;
    std::size_t at;
  };
  std::vector<cluster> clusters;
  std::vector<std::pair<std::size_t, std::uint64_t>> pieces;  // a batch's reads: (cluster, offset in it)
  std::vector<std::pair<index_t, std::span<const std::byte>>> touched;  // mmap: the source bytes read
  const whole_files* whole = nullptr;          // pread: the group's files read whole (none: null)
  std::vector<std::pair<file_range, const std::byte*>> from_whole;  // pread: the ranges those serve, each file's bytes
};

// read_mode::mmap: the jobs gather the chunks, read in place from the mappings; r.touched lists
// the source bytes read (for the page budget to release).
inline void copy_mapped(chunk_round& r) {
  r.touched.clear();
  std::size_t kept = 0;
  for (std::size_t k = 0; k < r.jobs.size(); ++k) {
    auto& j = r.jobs[k];
    const src_view& v = *r.view[k];
    const std::byte* base = v.e->pieces.front().data();
    r.touched.emplace_back(v.rank, std::span<const std::byte>(j.src, reshard::detail::source_span(j)));
    const auto lo = static_cast<std::uint64_t>(j.src - base), hi = lo + reshard::detail::source_span(j);
    const std::size_t first = piece_of(v.starts, lo);
    if (hi <= v.starts[first] + v.e->pieces[first].size()) {  // inside one stored piece
      j.src = v.e->pieces[first].data() + (lo - v.starts[first]);
      if (kept != k) r.jobs[kept] = std::move(j);
      ++kept;
    } else {  // across stored pieces: each run resolved through them
      reshard::detail::for_each_run(j, [&](const std::byte* src, std::byte* dst, std::size_t n) {
        copy_from_pieces(v.e->pieces, v.starts, static_cast<std::uint64_t>(src - base), dst, n);
      });
    }
  }
  r.jobs.resize(kept);
  reshard::detail::run_jobs(r.jobs, r.threads);
}

// A sparse job read run by run with pread(2), each run into its place.
inline void read_runs(const reshard::detail::copy_job& j, const src_view& v, const checkpoint_reader& rd) {
  const std::byte* base = v.e->pieces.front().data();  // content offsets are from here
  reshard::detail::for_each_run(j, [&](const std::byte* src, std::byte* dst, std::size_t n) {
    for_each_stored(v.e->pieces, v.starts, static_cast<std::uint64_t>(src - base), n,
                            [&](std::span<const std::byte> b) {
                              rd.pread_into(std::span<std::byte>(dst, b.size()), rd.offset_of(b.data()));
                              dst += b.size();
                            });
  });
}

// The job of file range `f` copied from `range`, which holds the file's bytes from `lo`.
inline void copy_from_range(chunk_round& r, const chunk_round::file_range& f, const checkpoint_reader& rd,
                            std::uint64_t lo, const std::byte* range) {
  auto& j = r.jobs[f.job];
  const src_view& v = *r.view[f.job];
  const std::byte* base = v.e->pieces.front().data();
  if (f.hi - f.lo == reshard::detail::source_span(j)) {  // inside one stored piece: runs from the copy
    j.src = range + (f.lo - lo);
    reshard::detail::for_each_run(j, [](const std::byte* src, std::byte* dst, std::size_t n) { std::memcpy(dst, src, n); });
    return;
  }
  reshard::detail::for_each_run(j, [&](const std::byte* src, std::byte* dst, std::size_t n) {
    for_each_stored(v.e->pieces, v.starts, static_cast<std::uint64_t>(src - base), n,
                            [&](std::span<const std::byte> b) {
                              std::memcpy(dst, range + (rd.offset_of(b.data()) - lo), b.size());
                              dst += b.size();
                            });
  });
}

// read_mode::pread: does the round's copy jobs with pread(2). Each job needs a range of its
// source file; the ranges of one file that overlap or touch form a cluster, read at once into
// r.range when it spans at most 4 times the bytes its jobs copy (or 64 KiB), each job then
// copied from there: one system call per cluster, which measured faster than one per run even
// for 16 KiB runs (docs/benchmarks.md), and one read for all the targets of a group that need
// the same rows. A sparser cluster's jobs are read run by run, each run into its place.
// source(rank) is the rank's reader; `buffer` the job's chunk buffer (with more than one thread
// clusters are read up to one buffer at once, beside the group's chunks and writers); charge(job, bytes) is told the bytes each read
// took, once (a cluster's by its first job).
template <class Source, class Charge>
void read_jobs(chunk_round& r, Source&& source, std::uint64_t buffer, Charge&& charge) {
  r.ranges.clear();
  r.from_whole.clear();
  for (std::size_t k = 0; k < r.jobs.size(); ++k) {
    const auto& j = r.jobs[k];
    const std::uint64_t span = reshard::detail::source_span(j);
    if (span == 0) continue;
    const src_view& v = *r.view[k];
    const checkpoint_reader& rd = source(v.rank);
    const std::uint64_t lo = static_cast<std::uint64_t>(j.src - v.e->pieces.front().data());
    const auto file_offset = [&](std::uint64_t off) {  // of content byte `off`
      const std::size_t p = piece_of(v.starts, off);
      return rd.offset_of(v.e->pieces[p].data() + (off - v.starts[p]));
    };
    const chunk_round::file_range f{v.rank, file_offset(lo), file_offset(lo + span - 1) + 1,
                                    static_cast<std::uint64_t>(j.outer) * j.run, k};
    if (const std::byte* all = r.whole ? r.whole->find(f.rank, f.hi) : nullptr) {
      r.from_whole.emplace_back(f, all);  // read whole when the group started (and counted then)
    } else {
      r.ranges.push_back(f);
    }
  }
  reshard::parallel_for(r.from_whole.size(), r.threads, [&](std::size_t q) {
    const auto& [f, all] = r.from_whole[q];
    copy_from_range(r, f, source(f.rank), 0, all);
  });
  std::sort(r.ranges.begin(), r.ranges.end(), [](const auto& a, const auto& b) {
    return a.rank != b.rank ? a.rank < b.rank : a.lo < b.lo;
  });
  // the clusters: [first, end) of r.ranges, read and copied in batches (dense ones into r.range,
  // at `at`): one cluster at a time on one thread, as the memory budget assumes; with more
  // threads, clusters up to one buffer at once, their reads cut in pieces of at least 1 MiB and
  // their jobs shared by the threads
  using cluster = chunk_round::cluster;
  std::vector<cluster>& cs = r.clusters;
  const std::uint64_t batch = r.threads > 1 ? buffer : 0;
  std::size_t bytes = 0;
  cs.clear();
  const auto run_batch = [&] {
    r.range.resize(bytes);
    auto& pieces = r.pieces;
    pieces.clear();
    const std::uint64_t piece = std::max<std::uint64_t>(std::uint64_t{1} << 20, bytes / r.threads + 1);
    for (std::size_t k = 0; k < cs.size(); ++k)
      if (cs[k].dense)
        for (std::uint64_t off = 0; off < cs[k].hi - cs[k].lo; off += piece) pieces.emplace_back(k, off);
    reshard::parallel_for(pieces.size(), r.threads, [&](std::size_t p) {
      const cluster& c = cs[pieces[p].first];
      const std::uint64_t off = pieces[p].second, n = std::min(piece, c.hi - c.lo - off);
      source(r.ranges[c.first].rank)
          .pread_into(std::span<std::byte>(r.range.data() + c.at + off, static_cast<std::size_t>(n)), c.lo + off);
    });
    const std::size_t from = cs.front().first, to = cs.back().end;
    reshard::parallel_for(to - from, r.threads, [&](std::size_t i) {
      const std::size_t q = from + i;
      const auto c = std::upper_bound(cs.begin(), cs.end(), q, [](std::size_t v, const cluster& x) { return v < x.first; }) - 1;
      const checkpoint_reader& rd = source(r.ranges[q].rank);
      if (c->dense) {
        copy_from_range(r, r.ranges[q], rd, c->lo, r.range.data() + c->at);
      } else {
        read_runs(r.jobs[r.ranges[q].job], *r.view[r.ranges[q].job], rd);
      }
    });
    cs.clear();
    bytes = 0;
  };
  for (std::size_t i = 0; i < r.ranges.size();) {
    std::uint64_t hi = r.ranges[i].hi, need = r.ranges[i].need;
    std::size_t e = i + 1;
    for (; e < r.ranges.size() && r.ranges[e].rank == r.ranges[i].rank && r.ranges[e].lo <= hi; ++e) {
      hi = std::max(hi, r.ranges[e].hi);
      need += r.ranges[e].need;
    }
    const std::uint64_t lo = r.ranges[i].lo;
    const bool dense = hi - lo <= std::max<std::uint64_t>(4 * need, std::uint64_t{64} << 10);
    if (!cs.empty() && bytes + (dense ? hi - lo : 0) > batch) run_batch();
    cs.push_back({i, e, lo, hi, dense, bytes});
    if (dense) {
      bytes += static_cast<std::size_t>(hi - lo);
      charge(r.ranges[i].job, hi - lo);
    } else {
      for (std::size_t q = i; q < e; ++q) charge(r.ranges[q].job, r.ranges[q].need);
    }
    i = e;
  }
  if (!cs.empty()) run_batch();
}

}  // namespace reshard::io::detail
