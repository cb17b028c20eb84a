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
// Checks: before it reads an item, the executor checks the item against the source file's index
// (the tensor exists, with the plan's dtype, the dims of the box the plan says the sender holds,
// and for a raw copy the stored ranges the plan names), so a plan that disagrees with its
// sources is an error naming the file and the parameter, never wrong bytes.
//
// This header holds one algorithm, the chunked assembly of a sliced item from its transfers in
// both read modes, and reads best whole; it is about 400 lines.
#pragma once

#include <reshard/box.hpp>
#include <reshard/convert.hpp>
#include <reshard/error.hpp>
#include <reshard/layout.hpp>
#include <reshard/parallel.hpp>
#include <reshard/io/cast.hpp>
#include <reshard/io/checkpoint.hpp>
#include <reshard/io/checkpoint_plan.hpp>
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

}  // namespace detail

/// The source files of a plan, by rank.
using plan_sources = std::map<index_t, const checkpoint_reader*>;

/// Runs the items of a checkpoint plan's targets into sinks. Thread-safe across targets: the
/// jobs of a run each execute their own targets, sharing the page budget and the progress.
class plan_executor {
 public:
  /// `exec`: the jobs (for the page budget) and the chunk buffer; `op` names the workflow in
  /// messages; `progress` sees every item written (bytes_total: the plan's bytes_written).
  plan_executor(const checkpoint_plan& plan, plan_sources sources, execution_config exec, read_mode reads,
                std::string op, std::function<void(const transform_progress&)> progress = {})
      : plan_(plan), sources_(std::move(sources)), exec_(exec), reads_(reads), op_(std::move(op)),
        progress_(std::move(progress)), budget_(std::uint64_t{std::max(exec.jobs, 1u)} * exec.buffer_bytes, uses()) {}

  plan_executor(const plan_executor&) = delete;
  plan_executor& operator=(const plan_executor&) = delete;

  /// Executes target i of the plan into `out`: its items in order, open_file() before each
  /// file's first, finish() at the end. Returns what was done: sliced, copied, bytes_read (tensor
  /// bytes read from the sources), bytes_written (the tensor bytes given to the sink).
  transform_summary run_target(std::size_t i, tensor_sink& out) {
    const plan_target& t = plan_.targets.at(i);
    transform_summary s;
    std::vector<std::byte> buffer;
    scratch_space scratch;  // reused by the target's sliced items
    std::size_t files = 0;  // the files opened
    for (const plan_item& it : t.items) {
      if (it.file + 1 < files)
        report_error(op_ + ": target rank " + std::to_string(t.rank) + ": parameter " + detail::quote_name(it.name) +
                     " comes after the items of a later file (the plan's items are out of file order)");
      while (files <= it.file) out.open_file(files++);
      if (it.raw) {
        copy_raw(out, it, buffer, s);
        ++s.copied;
      } else {
        assemble(out, it, buffer, scratch, s);
        ++s.sliced;
      }
      s.bytes_written += it.bytes;
      report(t.rank, it.name, it.bytes, false);
    }
    if (files == 0) out.open_file(0);
    out.finish();
    budget_.retire(read_by_target_[i]);
    report(t.rank, {}, 0, true);
    return s;
  }

  /// The tensor bytes taken from each source file so far, by rank, counted where the executor
  /// reads them (a raw copy's content, each copy job's box): a run's are the plan's reads
  /// (plan_source::bytes_read; law E6).
  std::map<index_t, std::uint64_t> bytes_read_by_source() const {
    const std::lock_guard<std::mutex> lock(progress_mutex_);
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
    return u;
  }

  const checkpoint_reader& source(index_t r) const { return *sources_.at(r); }

  // The tensor `name` of source rank r's file, checked against what the plan says of it.
  const tensor_ref& source_tensor(index_t r, const plan_item& it, const box* held) const {
    const checkpoint_reader& rd = source(r);
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

  void counted(index_t r, std::uint64_t bytes) {
    const std::lock_guard<std::mutex> lock(progress_mutex_);
    read_by_source_[r] += bytes;
  }

  void report(index_t rank, std::string_view name, std::uint64_t bytes, bool file_done) {
    const std::lock_guard<std::mutex> lock(progress_mutex_);
    bytes_done_ += bytes;
    if (file_done) ++files_done_;
    if (progress_) progress_({rank, name, bytes_done_, plan_.bytes_written, files_done_, plan_.targets.size()});
  }

  // A raw item: the stored content as it is (a ckpt entry's serialized Values when the sink
  // takes them and nothing is cast), or cast in steps of whole elements.
  void copy_raw(tensor_sink& out, const plan_item& it, std::vector<std::byte>& buffer, transform_summary& s) {
    const checkpoint_reader& rd = source(it.source_rank);
    const tensor_ref& e = source_tensor(it.source_rank, it, nullptr);
    bool same = e.pieces.size() == it.stored.size();
    for (std::size_t k = 0; same && k < e.pieces.size(); ++k)
      same = rd.offset_of(e.pieces[k].data()) == it.stored[k].offset && e.pieces[k].size() == it.stored[k].bytes;
    if (!same)
      report_error(op_ + ": " + rd.path().string() + ": parameter " + detail::quote_name(it.source_name) +
                   ": stored elsewhere than the plan says (the plan does not match this source file)");
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
    counted(it.source_rank, e.content_size());
    for (auto p : e.pieces) budget_.touched(it.source_rank, p);
  }

  // One transfer's source: its rank, its tensor in the rank's file, the box that file holds, and
  // the first content byte of each stored piece.
  struct src_view {
    index_t rank = 0;
    const tensor_ref* e = nullptr;
    const box* held = nullptr;
    std::vector<std::uint64_t> starts;
  };
  // What assembling an item needs besides the chunk buffer, kept from item to item of a target so
  // that a target's items allocate once, not once each.
  struct scratch_space {
    std::vector<src_view> views;  // per transfer (the first transfers.size() are the item's)
    std::vector<std::uint64_t> from;  // bytes read per transfer
    std::vector<reshard::detail::copy_job> jobs;
    std::vector<const src_view*> job_view;  // the source of each job
    std::vector<std::pair<const src_view*, std::span<const std::byte>>> read;
    std::vector<std::byte> range;   // pread: a job's source range, when its runs are short
    std::vector<std::byte> staged;  // with a cast: the chunk in the source's dtype
  };

  // A sliced item: the target box assembled chunk by chunk from the transfers.
  void assemble(tensor_sink& out, const plan_item& it, std::vector<std::byte>& buffer, scratch_space& sc,
                transform_summary& s) {
    const std::size_t elem = element_size(it.from);
    const bool cast = it.to != it.from;
    const std::size_t out_elem = element_size(it.to);
    const box& tb = it.target;
    const std::uint64_t total = static_cast<std::uint64_t>(volume(tb)) * out_elem;
    if (total != it.bytes)
      report_error(op_ + ": parameter " + detail::quote_name(it.name) + ": the plan says " + std::to_string(it.bytes) +
                   " bytes for the box " + to_string(tb) + " (a plan that does not add up)");
    out.begin(it.name, it.to, it.dims, total);
    if (sc.views.size() < it.transfers.size()) sc.views.resize(it.transfers.size());
    const std::span<src_view> views(sc.views.data(), it.transfers.size());
    std::size_t nv = 0;
    const auto holds = plan_.holds.find(it.source_name);  // what each sender's file holds of it
    for (const plan_transfer& x : it.transfers) {
      const box* held = holds == plan_.holds.end() ? nullptr : held_box(holds->second, x.rank, x.where);
      if (!held)
        report_error(op_ + ": parameter " + detail::quote_name(it.name) + ": the plan's source table does not say what "
                     "source rank " + std::to_string(x.rank) + " holds (a plan that does not add up)");
      const tensor_ref& e = source_tensor(x.rank, it, held);
      if (intersect(x.where, *held) != x.where || intersect(x.where, tb) != x.where)
        report_error(op_ + ": parameter " + detail::quote_name(it.name) + ": the plan's transfer " + to_string(x.where) +
                     " from source rank " + std::to_string(x.rank) + " is not inside both the box it holds, " +
                     to_string(*held) + ", and the target box " + to_string(tb));
      src_view& v = views[nv++];
      v.rank = x.rank;
      v.e = &e;
      v.held = held;
      detail::piece_starts(e, v.starts);
    }
    std::vector<std::uint64_t>& from = sc.from;
    from.assign(it.transfers.size(), 0);
    auto& jobs = sc.jobs;
    auto& job_view = sc.job_view;
    auto& read = sc.read;
    std::vector<std::byte>& scratch = sc.range;
    std::vector<std::byte>& staged = sc.staged;
    // chunks of at most buffer_bytes in the larger of the source's and the target's dtype
    const std::uint64_t limit = exec_.buffer_bytes / std::max(elem, out_elem) * elem;
    detail::for_each_chunk(tb.extent, elem, limit, [&](const box& local) {
      box c = local;
      for (std::size_t i = 0; i < c.offset.size(); ++i) c.offset[i] += tb.offset[i];
      const std::uint64_t bytes = static_cast<std::uint64_t>(volume(c)) * elem;
      const std::uint64_t out_bytes = static_cast<std::uint64_t>(volume(c)) * out_elem;
      // One copy job (convert.hpp) per transfer the chunk meets, from the source's mapping
      // (offsets from the content's first stored piece; the others follow it) to the buffer, or
      // straight to the target's memory. With a cast, the jobs assemble the chunk in the source's
      // dtype in `staged`, and the whole chunk is cast from there while it is in the cache (one
      // kernel call a chunk, not one a run: runs can be short).
      std::byte* to = nullptr;
      if (cast) {
        staged.resize(static_cast<std::size_t>(bytes));
        to = staged.data();
      } else {
        to = out.direct(static_cast<std::size_t>(bytes));
        if (!to) buffer.resize(static_cast<std::size_t>(bytes)), to = buffer.data();
      }
      const auto emit = [&] {  // the assembled chunk to the output (cast first)
        if (!cast) return out.append(std::span<const std::byte>(to, static_cast<std::size_t>(bytes)));
        std::byte* o = out.direct(static_cast<std::size_t>(out_bytes));
        if (!o) buffer.resize(static_cast<std::size_t>(out_bytes)), o = buffer.data();
        const std::span<std::byte> cast_chunk(o, static_cast<std::size_t>(out_bytes));
        cast_elements(std::span<const std::byte>(to, static_cast<std::size_t>(bytes)), it.from, cast_chunk, it.to);
        out.append(cast_chunk);
      };
      jobs.clear();
      job_view.clear();
      read.clear();
      for (std::size_t k = 0; k < it.transfers.size(); ++k) {
        const box in = intersect(it.transfers[k].where, c);
        if (volume(in) == 0) continue;
        const auto& v = views[k];
        const std::byte* base = v.e->pieces.front().data();
        jobs.push_back(reshard::detail::make_copy_job(base, *v.held, to, c, in, elem));
        job_view.push_back(&v);
        const auto& j = jobs.back();
        read.push_back({&v, std::span<const std::byte>(j.src, reshard::detail::source_span(j))});
        s.bytes_read += static_cast<std::uint64_t>(volume(in)) * elem;
        from[k] += static_cast<std::uint64_t>(volume(in)) * elem;
      }
      if (reads_ == read_mode::pread) {
        for (std::size_t k = 0; k < jobs.size(); ++k)
          read_job(jobs[k], *job_view[k]->e, job_view[k]->starts, source(job_view[k]->rank), scratch);
        emit();
        return;
      }
      // read_mode::mmap: the jobs gather the chunk in the buffer, read in place from the mappings.
      std::size_t kept = 0;
      for (std::size_t k = 0; k < jobs.size(); ++k) {
        auto& j = jobs[k];
        const auto& v = *job_view[k];
        const std::byte* base = v.e->pieces.front().data();
        const auto lo = static_cast<std::uint64_t>(j.src - base), hi = lo + reshard::detail::source_span(j);
        const std::size_t first = detail::piece_of(v.starts, lo);
        if (hi <= v.starts[first] + v.e->pieces[first].size()) {  // inside one stored piece
          j.src = v.e->pieces[first].data() + (lo - v.starts[first]);
          if (kept != k) jobs[kept] = std::move(j);
          ++kept;
        } else {  // across stored pieces: each run resolved through them
          reshard::detail::for_each_run(j, [&](const std::byte* src, std::byte* dst, std::size_t n) {
            detail::copy_from_pieces(v.e->pieces, v.starts, static_cast<std::uint64_t>(src - base), dst, n);
          });
        }
      }
      jobs.resize(kept);
      reshard::detail::run_jobs(jobs, 1);
      emit();
      for (const auto& [v, range] : read) budget_.touched(v->rank, range);
    });
    out.end();
    for (std::size_t k = 0; k < from.size(); ++k) counted(it.transfers[k].rank, from[k]);
    if (buffer.capacity() > exec_.buffer_bytes) std::vector<std::byte>().swap(buffer);
    if (scratch.capacity() > exec_.buffer_bytes) std::vector<std::byte>().swap(scratch);
    if (staged.capacity() > exec_.buffer_bytes) std::vector<std::byte>().swap(staged);
  }

  // read_mode::pread: does copy job j (its source pointers in e's mapping, its destination the
  // chunk buffer) with pread(2). The job's source range is read at once into `scratch` and copied
  // from there when it is at most 4 times the bytes needed (or 64 KiB): one system call per range,
  // which measured faster than one per run even for 16 KiB runs (docs/benchmarks.md). A sparser
  // range is read run by run, each into its place.
  static void read_job(reshard::detail::copy_job& j, const tensor_ref& e, const std::vector<std::uint64_t>& starts,
                       const checkpoint_reader& rd, std::vector<std::byte>& scratch) {
    const std::byte* base = e.pieces.front().data();  // content offsets are from here
    const auto at = [&](std::uint64_t off) {            // the stored byte of content offset `off`
      const std::size_t k = detail::piece_of(starts, off);
      return e.pieces[k].data() + (off - starts[k]);
    };
    const std::uint64_t lo = static_cast<std::uint64_t>(j.src - base);
    const std::uint64_t span = reshard::detail::source_span(j);
    const std::uint64_t need = static_cast<std::uint64_t>(j.outer) * j.run;
    if (span > std::max<std::uint64_t>(4 * need, std::uint64_t{64} << 10)) {
      reshard::detail::for_each_run(j, [&](const std::byte* src, std::byte* dst, std::size_t n) {
        detail::for_each_stored(e.pieces, starts, static_cast<std::uint64_t>(src - base), n,
                                [&](std::span<const std::byte> b) {
                                  rd.pread_into(std::span<std::byte>(dst, b.size()), rd.offset_of(b.data()));
                                  dst += b.size();
                                });
      });
      return;
    }
    const std::uint64_t f_lo = rd.offset_of(at(lo)), f_hi = rd.offset_of(at(lo + span - 1)) + 1;
    scratch.resize(static_cast<std::size_t>(f_hi - f_lo));
    rd.pread_into(scratch, f_lo);
    if (f_hi - f_lo == span) {  // inside one stored piece: the job runs from the scratch copy
      j.src = scratch.data();
      reshard::detail::for_each_run(j, [](const std::byte* src, std::byte* dst, std::size_t n) { std::memcpy(dst, src, n); });
      return;
    }
    reshard::detail::for_each_run(j, [&](const std::byte* src, std::byte* dst, std::size_t n) {
      detail::for_each_stored(e.pieces, starts, static_cast<std::uint64_t>(src - base), n,
                              [&](std::span<const std::byte> b) {
                                std::memcpy(dst, scratch.data() + (rd.offset_of(b.data()) - f_lo), b.size());
                                dst += b.size();
                              });
    });
  }

  const checkpoint_plan& plan_;
  plan_sources sources_;
  std::vector<std::vector<index_t>> read_by_target_;  // each target's source ranks, ascending
  execution_config exec_;
  read_mode reads_;
  std::string op_;
  std::function<void(const transform_progress&)> progress_;
  page_budget budget_;
  mutable std::mutex progress_mutex_;  // the progress and the counts below
  std::map<index_t, std::uint64_t> read_by_source_;
  std::uint64_t bytes_done_ = 0;
  std::size_t files_done_ = 0;
};

}  // namespace reshard::io
