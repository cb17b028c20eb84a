// reshard/convert.hpp: executes a plan on in-memory shards, and splits or merges full tensors.
//
// Shards are dense row-major buffers of their rank's box. Copies are memcpy of contiguous runs
// after coalescing dims that are contiguous in both source and target.
//   @post convert(plan(A, B), split(x, A)) == split(x, B)
//   @post merge(A, split(x, A)) == x
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "reshard/box.hpp"
#include "reshard/error.hpp"
#include "reshard/layout.hpp"
#include "reshard/plan.hpp"

namespace reshard {

struct convert_options {
  unsigned threads = 1;  ///< worker threads (0 = hardware concurrency)
};

namespace detail {

inline constexpr std::size_t max_copy_dims = 64;

// One strided copy: `outer` runs of `run` bytes, addressed by an odometer over `ext`.
struct copy_job {
  const std::byte* src = nullptr;
  std::byte* dst = nullptr;
  std::size_t run = 0;        // contiguous bytes per run
  std::size_t dims = 0;       // outer dims (after coalescing), outermost first
  index_t ext[max_copy_dims]{};
  index_t sstride[max_copy_dims]{};  // bytes
  index_t dstride[max_copy_dims]{};
  index_t outer = 1;  // product of ext

  // Copies runs [first, last).
  void run_range(index_t first, index_t last) const {
    if (first >= last) return;
    index_t idx[max_copy_dims];
    index_t rem = first, so = 0, dof = 0;
    for (std::size_t k = dims; k-- > 0;) {
      idx[k] = rem % ext[k];
      rem /= ext[k];
      so += idx[k] * sstride[k];
      dof += idx[k] * dstride[k];
    }
    for (index_t n = first; n < last; ++n) {
      std::memcpy(dst + dof, src + so, run);
      for (std::size_t k = dims; k-- > 0;) {
        so += sstride[k];
        dof += dstride[k];
        if (++idx[k] < ext[k]) break;
        so -= ext[k] * sstride[k];
        dof -= ext[k] * dstride[k];
        idx[k] = 0;
      }
    }
  }
};

// Builds the copy of box `b` from a shard holding box `sb` into a shard holding box `db`.
inline copy_job make_copy_job(const std::byte* src, const box& sb, std::byte* dst, const box& db,
                              const box& b, std::size_t elem) {
  const std::size_t n = b.offset.size();
  // element strides of both shards, row-major
  std::vector<index_t> ss(n), ds(n);
  index_t s_acc = 1, d_acc = 1;
  for (std::size_t i = n; i-- > 0;) {
    ss[i] = s_acc;
    ds[i] = d_acc;
    s_acc *= sb.extent[i];
    d_acc *= db.extent[i];
  }
  index_t so = 0, dof = 0;
  for (std::size_t i = 0; i < n; ++i) {
    so += (b.offset[i] - sb.offset[i]) * ss[i];
    dof += (b.offset[i] - db.offset[i]) * ds[i];
  }
  copy_job j;
  j.src = src + so * static_cast<index_t>(elem);
  j.dst = dst + dof * static_cast<index_t>(elem);
  // coalesce from the innermost dim outwards: a dim joins the run while the run so far spans
  // the whole inner extent of both shards
  index_t run = 1;
  std::size_t i = n;
  while (i > 0) {
    --i;
    run *= b.extent[i];
    if (b.extent[i] != sb.extent[i] || b.extent[i] != db.extent[i]) break;
    if (i == 0) break;
  }
  // dims [0, i) stay outer; dim i is the last folded into the run (if n > 0)
  j.run = static_cast<std::size_t>(run) * elem;
  std::size_t m = 0;
  for (std::size_t k = 0; k < i; ++k) {
    if (b.extent[k] == 1) continue;  // a unit dim adds no runs
    const index_t sk = ss[k] * static_cast<index_t>(elem), dk = ds[k] * static_cast<index_t>(elem);
    // merge with the previous outer dim when stepping it is stepping this one ext times
    if (m > 0 && j.sstride[m - 1] == sk * b.extent[k] && j.dstride[m - 1] == dk * b.extent[k]) {
      j.ext[m - 1] *= b.extent[k];
      j.sstride[m - 1] = sk;
      j.dstride[m - 1] = dk;
      continue;
    }
    RESHARD_EXPECTS(m < max_copy_dims, "convert: too many dims");
    j.ext[m] = b.extent[k];
    j.sstride[m] = sk;
    j.dstride[m] = dk;
    ++m;
  }
  j.dims = m;
  j.outer = 1;
  for (std::size_t k = 0; k < m; ++k) j.outer *= j.ext[k];
  if (run == 0) j.outer = 0;
  return j;
}

// Runs jobs on `threads` workers, splitting large jobs so that work is even.
inline void run_jobs(const std::vector<copy_job>& jobs, unsigned threads) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  std::size_t total = 0;
  for (const auto& j : jobs) total += j.run * static_cast<std::size_t>(j.outer);
  if (threads == 1 || total < (std::size_t{1} << 20)) {
    for (const auto& j : jobs) j.run_range(0, j.outer);
    return;
  }
  // tasks of about total / (8 * threads) bytes each, never splitting a run
  struct task {
    std::size_t job;
    index_t first, last;
  };
  std::vector<task> tasks;
  const std::size_t target = std::max<std::size_t>(total / (8 * threads), 1);
  for (std::size_t k = 0; k < jobs.size(); ++k) {
    const auto& j = jobs[k];
    if (j.outer == 0 || j.run == 0) continue;
    const index_t per = static_cast<index_t>(std::max<std::size_t>(target / j.run, 1));
    for (index_t f = 0; f < j.outer; f += per) tasks.push_back({k, f, std::min(j.outer, f + per)});
  }
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t t; (t = next.fetch_add(1, std::memory_order_relaxed)) < tasks.size();)
      jobs[tasks[t].job].run_range(tasks[t].first, tasks[t].last);
  };
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  for (unsigned k = 1; k < threads; ++k) pool.emplace_back(work);
  work();
  for (auto& th : pool) th.join();
}

}  // namespace detail

/// Executes `p`: src_shards[i] is local source rank i's buffer (row-major, its box), and
/// dst_shards[j] local target rank j's buffer, each of volume(box) * element_bytes bytes. A
/// source buffer may be null when the plan does not read from that rank.
inline void convert(const transfer_plan& p, std::span<const std::byte* const> src_shards,
                    std::span<std::byte* const> dst_shards, std::size_t element_bytes,
                    convert_options o = {}) {
  const detail::geometry gs = detail::make_geometry(p.src);
  const detail::geometry gd = detail::make_geometry(p.dst);
  if (src_shards.size() != static_cast<std::size_t>(gs.ranks))
    report_error("convert: " + std::to_string(src_shards.size()) + " source shards given for " +
                 to_string(p.src) + ", which has " + std::to_string(gs.ranks) + " ranks");
  if (dst_shards.size() != static_cast<std::size_t>(gd.ranks))
    report_error("convert: " + std::to_string(dst_shards.size()) + " target shards given for " +
                 to_string(p.dst) + ", which has " + std::to_string(gd.ranks) + " ranks");
  if (element_bytes == 0) report_error("convert: element size is 0");
  std::vector<detail::copy_job> jobs;
  jobs.reserve(p.transfers.size());
  for (const transfer& x : p.transfers) {
    const index_t s = x.src - gs.first_rank, d = x.dst - gd.first_rank;
    RESHARD_EXPECTS(s >= 0 && s < gs.ranks && d >= 0 && d < gd.ranks,
                    "convert: transfer names a rank outside the plan's layouts");
    if (volume(x.where) == 0) continue;
    if (!src_shards[s])
      report_error("convert: the plan reads from source rank " + std::to_string(x.src) +
                   ", whose shard is null");
    if (!dst_shards[d])
      report_error("convert: target rank " + std::to_string(x.dst) + "'s shard is null");
    jobs.push_back(detail::make_copy_job(src_shards[s], gs.region_box(gs.rank_region[s]),
                                         dst_shards[d], gd.region_box(gd.rank_region[d]), x.where,
                                         element_bytes));
  }
  detail::run_jobs(jobs, o.threads);
}

/// Typed convenience: shards as spans of T; checks every buffer's size against its box.
template <class T>
void convert(const transfer_plan& p, const std::vector<std::span<const T>>& src_shards,
             const std::vector<std::span<T>>& dst_shards, convert_options o = {}) {
  const auto check = [](const layout& l, std::size_t i, std::size_t have, const char* which) {
    const index_t want = volume(box_of(l, l.first_rank + static_cast<index_t>(i)));
    if (have != 0 && static_cast<index_t>(have) != want)
      report_error("convert: " + std::string(which) + " shard of rank " +
                   std::to_string(l.first_rank + static_cast<index_t>(i)) + " has " +
                   std::to_string(have) + " elements, but its box in " + to_string(l) + " has " +
                   std::to_string(want));
  };
  std::vector<const std::byte*> s(src_shards.size());
  std::vector<std::byte*> d(dst_shards.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    check(p.src, i, src_shards[i].size(), "source");
    s[i] = src_shards[i].empty() ? nullptr : reinterpret_cast<const std::byte*>(src_shards[i].data());
  }
  for (std::size_t i = 0; i < d.size(); ++i) {
    check(p.dst, i, dst_shards[i].size(), "target");
    d[i] = dst_shards[i].empty() ? nullptr : reinterpret_cast<std::byte*>(dst_shards[i].data());
  }
  convert(p, std::span<const std::byte* const>(s), std::span<std::byte* const>(d), sizeof(T), o);
}

/// Splits a full row-major tensor into the shards of layout `l` (one buffer per local rank).
inline void split(const layout& l, const std::byte* full, std::span<std::byte* const> shards,
                  std::size_t element_bytes, convert_options o = {}) {
  const transfer_plan p = plan(full_layout(l.shape, l.first_rank), l);
  const std::byte* src[1] = {full};
  convert(p, std::span<const std::byte* const>(src), shards, element_bytes, o);
}

/// Merges the shards of layout `l` into a full row-major tensor (MindSpore merge_sliced_parameter).
/// Only one replica of each region is read; the others may be null.
inline void merge(const layout& l, std::span<const std::byte* const> shards, std::byte* full,
                  std::size_t element_bytes, convert_options o = {}) {
  validate(l, "merge: layout");  // split() validates through plan(); merge must too
  // Read each region from the first owner that has a buffer.
  const detail::geometry g = detail::make_geometry(l);
  if (shards.size() != static_cast<std::size_t>(g.ranks))
    report_error("merge: " + std::to_string(shards.size()) + " shards given for " + to_string(l) +
                 ", which has " + std::to_string(g.ranks) + " ranks");
  const box whole{extents(l.shape.size(), 0), l.shape};
  std::vector<detail::copy_job> jobs;
  for (index_t k = 0; k < g.regions; ++k) {
    const box b = g.region_box(k);
    if (volume(b) == 0) continue;
    const std::byte* src = nullptr;
    for (index_t j = g.owner_start[k]; j < g.owner_start[k + 1] && !src; ++j)
      src = shards[g.owners[j] - g.first_rank];
    if (!src)
      report_error("merge: no shard given for region " + to_string(b) + " of " + to_string(l) +
                   " (held by ranks " + std::to_string(g.owners[g.owner_start[k]]) + "..)");
    jobs.push_back(detail::make_copy_job(src, b, full, whole, b, element_bytes));
  }
  detail::run_jobs(jobs, o.threads);
}

}  // namespace reshard
