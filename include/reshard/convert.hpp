// reshard/convert.hpp: executes a plan on in-memory shards, and splits or merges full tensors.
//
// Shards are dense row-major buffers of their rank's box. Copies are memcpy of contiguous runs
// after coalescing dims that are contiguous in both source and target. Copies that read the same
// source rows run together, row by row, so the source is read in order; calls that write more
// than the last-level cache can hold use non-temporal stores (convert_options::streaming_bytes).
//   @post convert(plan(A, B), split(x, A)) == split(x, B)
//   @post merge(A, split(x, A)) == x
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "reshard/box.hpp"
#include "reshard/error.hpp"
#include "reshard/layout.hpp"
#include "reshard/parallel.hpp"
#include "reshard/partition.hpp"
#include "reshard/plan.hpp"

#if defined(__SSE2__) || defined(_M_X64)
#include <emmintrin.h>
#include <xmmintrin.h>
#define RESHARD_STREAMING_STORES 1
#else
#define RESHARD_STREAMING_STORES 0
#endif
#if __has_include(<unistd.h>)
#include <unistd.h>
#endif

namespace reshard {

struct convert_options {
  unsigned threads = 1;  ///< worker threads (0 = hardware concurrency)
  /// Streaming: a call that writes at least this many bytes uses non-temporal stores for its
  /// runs of 64 bytes or more, so the targets bypass the caches and no target line is read before
  /// it is written. 0 (default): 3/4 of the last-level cache as the system reports it, the size
  /// at which glibc's memcpy streams one copy (24 MiB when unknown); SIZE_MAX: never. Without
  /// SSE2 the copies are plain memcpy.
  std::size_t streaming_bytes = 0;
};

namespace detail {

// One outer dim of a strided copy; strides in bytes.
struct copy_dim {
  index_t ext = 0;
  index_t sstride = 0;
  index_t dstride = 0;
};

// One strided copy: `outer` runs of `run` bytes, addressed by an odometer over the outer dims.
struct copy_job {
  static constexpr std::size_t inline_dims = 3;
  const std::byte* src = nullptr;
  std::byte* dst = nullptr;
  std::size_t run = 0;   // contiguous bytes per run
  std::size_t dims = 0;  // outer dims (after coalescing), outermost first
  index_t outer = 1;     // product of the index_list: the number of runs
  copy_dim near[inline_dims]{};
  std::vector<copy_dim> far;  // all the dims when there are more than inline_dims

  const copy_dim* dim() const { return dims <= inline_dims ? near : far.data(); }
  void add_dim(const copy_dim& d) {
    if (dims < inline_dims) {
      near[dims++] = d;
      return;
    }
    if (dims == inline_dims) far.assign(near, near + inline_dims);
    far.push_back(d);
    ++dims;
  }
  copy_dim& last_dim() { return dims <= inline_dims ? near[dims - 1] : far.back(); }
};

// 3/4 of the last-level cache the system reports (glibc's memcpy threshold for non-temporal
// stores), or 24 MiB when it reports none.
inline std::size_t default_streaming_bytes() {
  static const std::size_t bytes = [] {
    long llc = 0;
#if defined(_SC_LEVEL3_CACHE_SIZE) && defined(_SC_LEVEL2_CACHE_SIZE)
    llc = ::sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (llc <= 0) llc = ::sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
    return llc > 0 ? static_cast<std::size_t>(llc) / 4 * 3 : std::size_t{24} << 20;
  }();
  return bytes;
}

// Copies n bytes; with `stream`, runs of 64 bytes or more go through non-temporal stores (the
// caller issues the store fence when its copies are done).
inline void copy_bytes(std::byte* d, const std::byte* s, std::size_t n, bool stream) {
#if RESHARD_STREAMING_STORES
  if (stream && n >= 64) {
    const std::size_t head = (16 - (reinterpret_cast<std::uintptr_t>(d) & 15)) & 15;
    if (head) {  // up to 16-byte alignment of the target
      std::memcpy(d, s, head);
      d += head, s += head, n -= head;
    }
    for (; n >= 64; n -= 64, d += 64, s += 64) {
      if (n >= 576) _mm_prefetch(reinterpret_cast<const char*>(s) + 512, _MM_HINT_NTA);
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
      const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(d), a);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + 16), b);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + 32), c);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + 48), e);
    }
    if (n) std::memcpy(d, s, n);
    return;
  }
#else
  (void)stream;
#endif
  std::memcpy(d, s, n);
}

inline void store_fence([[maybe_unused]] bool stream) {
#if RESHARD_STREAMING_STORES
  if (stream) _mm_sfence();
#endif
}

// Copies runs [first, last) of `count` jobs that walk the source alike (same outer index_list and
// source strides, see group_jobs): for each outer index, one run of every member in turn, so
// that the source is read in order even when several targets take pieces of one source row.
inline void run_group(const copy_job* const* m, std::size_t count, index_t first, index_t last,
                      bool stream) {
  if (first >= last) return;
  const copy_job& lead = *m[0];
  const std::size_t dims = lead.dims;
  const copy_dim* dim = lead.dim();
  if (dims == 0) {  // one run each
    for (std::size_t j = 0; j < count; ++j) copy_bytes(m[j]->dst, m[j]->src, m[j]->run, stream);
    return;
  }
  if (count == 1 && dims == 1) {  // the common strided copy
    const copy_dim d = dim[0];
    const std::byte* s = lead.src + first * d.sstride;
    std::byte* t = lead.dst + first * d.dstride;
    for (index_t n = first; n < last; ++n, s += d.sstride, t += d.dstride)
      copy_bytes(t, s, lead.run, stream);
    return;
  }
  if (dims == 1) {  // several targets taking pieces of the same source rows
    struct member {
      const std::byte* s;
      std::byte* d;
      std::size_t run;
      index_t dstride;
    };
    member few[8];
    std::vector<member> many;
    member* mem = few;
    if (count > 8) {
      many.resize(count);
      mem = many.data();
    }
    for (std::size_t j = 0; j < count; ++j)
      mem[j] = {m[j]->src + first * dim[0].sstride, m[j]->dst + first * m[j]->dim()[0].dstride,
                m[j]->run, m[j]->dim()[0].dstride};
    for (index_t n = first; n < last; ++n) {
      for (std::size_t j = 0; j < count; ++j) {
        copy_bytes(mem[j].d, mem[j].s, mem[j].run, stream);
        mem[j].s += dim[0].sstride;
        mem[j].d += mem[j].dstride;
      }
    }
    return;
  }
  index_list idx(dims, 0);
  std::vector<index_t> doff = filled<index_t>(count, 0);
  index_t rem = first, soff = 0;
  for (std::size_t k = dims; k-- > 0;) {
    idx[k] = rem % dim[k].ext;
    rem /= dim[k].ext;
    soff += idx[k] * dim[k].sstride;
    for (std::size_t j = 0; j < count; ++j) doff[j] += idx[k] * m[j]->dim()[k].dstride;
  }
  for (index_t n = first; n < last; ++n) {
    for (std::size_t j = 0; j < count; ++j)
      copy_bytes(m[j]->dst + doff[j], m[j]->src + soff, m[j]->run, stream);
    for (std::size_t k = dims; k-- > 0;) {
      soff += dim[k].sstride;
      for (std::size_t j = 0; j < count; ++j) doff[j] += m[j]->dim()[k].dstride;
      if (++idx[k] < dim[k].ext) break;
      soff -= dim[k].ext * dim[k].sstride;
      for (std::size_t j = 0; j < count; ++j) doff[j] -= dim[k].ext * m[j]->dim()[k].dstride;
      idx[k] = 0;
    }
  }
}

// Builds the copy of box `b` from a shard holding box `sb` into a shard holding box `db`.
inline copy_job make_copy_job(const std::byte* src, const box& sb, std::byte* dst, const box& db,
                              const box& b, std::size_t elem) {
  const std::size_t n = b.offset.size();
  const auto e = static_cast<index_t>(elem);
  // byte strides of both shards, row-major
  index_list ss(n, 0), ds(n, 0);
  index_t s_acc = e, d_acc = e;
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
  j.src = src ? src + so : nullptr;
  j.dst = dst ? dst + dof : nullptr;
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
  for (std::size_t k = 0; k < i; ++k) {
    if (b.extent[k] == 1) continue;  // a unit dim adds no runs
    // merge with the previous outer dim when stepping it is stepping this one ext times
    if (j.dims > 0) {
      copy_dim& prev = j.last_dim();
      if (prev.sstride == ss[k] * b.extent[k] && prev.dstride == ds[k] * b.extent[k]) {
        prev.ext *= b.extent[k];
        prev.sstride = ss[k];
        prev.dstride = ds[k];
        continue;
      }
    }
    j.add_dim({b.extent[k], ss[k], ds[k]});
  }
  j.outer = 1;
  for (std::size_t k = 0; k < j.dims; ++k) j.outer *= j.dim()[k].ext;
  if (run == 0) j.outer = 0;
  return j;
}

// Calls f(src, dst, bytes) for each run of one job, in order (both addresses increase): for
// copies whose source is not one buffer (a checkpoint tensor stored in several pieces), the
// caller resolves each run itself.
template <class F>
void for_each_run(const copy_job& j, F&& f) {
  if (j.outer == 0 || j.run == 0) return;
  const copy_dim* dim = j.dim();
  index_list idx(j.dims, 0);
  index_t so = 0, dof = 0;
  for (index_t n = 0; n < j.outer; ++n) {
    f(j.src + so, j.dst + dof, j.run);
    for (std::size_t k = j.dims; k-- > 0;) {
      so += dim[k].sstride;
      dof += dim[k].dstride;
      if (++idx[k] < dim[k].ext) break;
      so -= dim[k].ext * dim[k].sstride;
      dof -= dim[k].ext * dim[k].dstride;
      idx[k] = 0;
    }
  }
}

// The bytes from a job's first source byte to its last, +1.
inline std::size_t source_span(const copy_job& j) {
  if (j.outer == 0 || j.run == 0) return 0;
  index_t last = 0;
  for (std::size_t k = 0; k < j.dims; ++k) last += (j.dim()[k].ext - 1) * j.dim()[k].sstride;
  return static_cast<std::size_t>(last) + j.run;
}

// Orders the jobs and cuts them into groups that run_group copies together: jobs with the same
// outer index_list and source strides whose sources start within one step of the innermost outer
// dim (they read the same source rows), at most 64 to a group. Single-run jobs stay in the
// given order, one to a group. Returns the group boundaries in `order`.
inline std::vector<std::size_t> group_jobs(const std::vector<copy_job>& jobs,
                                           std::vector<const copy_job*>& order) {
  order.clear();
  order.reserve(jobs.size());
  for (const auto& j : jobs)
    if (j.outer > 0 && j.run > 0) order.push_back(&j);
  const auto same_walk = [](const copy_job& a, const copy_job& b) {
    if (a.dims != b.dims) return false;
    for (std::size_t k = 0; k < a.dims; ++k)
      if (a.dim()[k].ext != b.dim()[k].ext || a.dim()[k].sstride != b.dim()[k].sstride)
        return false;
    return true;
  };
  const auto walk_less = [](const copy_job* a, const copy_job* b) {
    if (a->dims != b->dims) return a->dims < b->dims;
    for (std::size_t k = 0; k < a->dims; ++k) {
      const copy_dim &x = a->dim()[k], &y = b->dim()[k];
      if (x.ext != y.ext) return x.ext < y.ext;
      if (x.sstride != y.sstride) return x.sstride < y.sstride;
    }
    return std::less<const std::byte*>{}(a->src, b->src);
  };
  // single runs first, in the given order; strided jobs sorted by walk, then source address
  const auto strided = std::stable_partition(order.begin(), order.end(),
                                             [](const copy_job* j) { return j->dims == 0; });
  std::sort(strided, order.end(), walk_less);
  std::vector<std::size_t> cut;
  cut.reserve(order.size() + 1);
  for (std::size_t k = 0; k < order.size(); ++k) {
    const copy_job& j = *order[k];
    if (j.dims > 0 && !cut.empty() && k - cut.back() < 64) {
      const copy_job& lead = *order[cut.back()];
      // same_walk first: the lead may be a single run (dims == 0), which has no row stride
      if (same_walk(lead, j)) {
        const auto row = static_cast<std::uintptr_t>(lead.dim()[lead.dims - 1].sstride);
        const auto gap = reinterpret_cast<std::uintptr_t>(j.src) -
                         reinterpret_cast<std::uintptr_t>(lead.src);  // sorted: j.src >= lead.src
        if (gap < row) continue;
      }
    }
    cut.push_back(k);
  }
  cut.push_back(order.size());
  return cut;
}

// Runs jobs on `threads` workers, splitting large groups so that work is even.
inline void run_jobs(const std::vector<copy_job>& jobs, unsigned threads,
                     std::size_t streaming_bytes = 0) {
  threads = thread_count(threads);
  if (streaming_bytes == 0) streaming_bytes = default_streaming_bytes();
  std::vector<const copy_job*> order;
  const std::vector<std::size_t> cut = group_jobs(jobs, order);
  const std::size_t groups = cut.size() - 1;
  std::size_t total = 0;
  for (const copy_job* j : order) total += j->run * static_cast<std::size_t>(j->outer);
  const bool stream = total >= streaming_bytes;
  if (threads == 1 || total < (std::size_t{1} << 20)) {
    for (std::size_t g = 0; g < groups; ++g)
      run_group(order.data() + cut[g], cut[g + 1] - cut[g], 0, order[cut[g]]->outer, stream);
    store_fence(stream);
    return;
  }
  // tasks of about total / (4 * threads) bytes each: a range of outer indices of a group (its
  // consecutive source rows), or a range of bytes of a single run
  struct task {
    std::size_t group;
    index_t first, last;
  };
  std::vector<task> tasks;
  const std::size_t target = std::max<std::size_t>(total / (4 * threads), 1);
  for (std::size_t g = 0; g < groups; ++g) {
    const copy_job& lead = *order[cut[g]];
    std::size_t step = 0;  // bytes per outer index
    for (std::size_t k = cut[g]; k < cut[g + 1]; ++k) step += order[k]->run;
    if (lead.dims == 0) {  // one run per group: cut it into pieces of whole cache lines
      const auto n = static_cast<index_t>(lead.run);
      const auto per = static_cast<index_t>(std::max<std::size_t>(target / 64, 1) * 64);
      for (index_t f = 0; f < n; f += per) tasks.push_back({g, f, std::min(n, f + per)});
      continue;
    }
    const index_t per = static_cast<index_t>(std::max<std::size_t>(target / step, 1));
    for (index_t f = 0; f < lead.outer; f += per)
      tasks.push_back({g, f, std::min(lead.outer, f + per)});
  }
  parallel_for(
      tasks.size(), threads,
      [&](std::size_t t) {
        const task& k = tasks[t];
        const copy_job& lead = *order[cut[k.group]];
        if (lead.dims == 0) {
          copy_bytes(lead.dst + k.first, lead.src + k.first, static_cast<std::size_t>(k.last - k.first), stream);
          return;
        }
        run_group(order.data() + cut[k.group], cut[k.group + 1] - cut[k.group], k.first, k.last, stream);
      },
      [&] { store_fence(stream); });
}

}  // namespace detail

/// Executes `p`: src_shards[i] is local source rank i's buffer (row-major, its box), and
/// dst_shards[j] local target rank j's buffer, each of volume(box) * element_bytes bytes. A
/// source buffer may be null when the plan does not read from that rank.
inline void convert(const transfer_plan& p, std::span<const std::byte* const> src_shards,
                    std::span<std::byte* const> dst_shards, std::size_t element_bytes,
                    convert_options o = {}) {
  const partition gs(p.src), gd(p.dst);
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
    jobs.push_back(detail::make_copy_job(src_shards[s], gs.box_of_rank(x.src), dst_shards[d],
                                         gd.box_of_rank(x.dst), x.where, element_bytes));
  }
  detail::run_jobs(jobs, o.threads, o.streaming_bytes);
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
  const partition g(l);
  if (shards.size() != static_cast<std::size_t>(g.ranks))
    report_error("merge: " + std::to_string(shards.size()) + " shards given for " + to_string(l) +
                 ", which has " + std::to_string(g.ranks) + " ranks");
  const box whole{index_list(l.shape.size(), 0), l.shape};
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
  detail::run_jobs(jobs, o.threads, o.streaming_bytes);
}

}  // namespace reshard
