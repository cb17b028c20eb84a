// reshard/io/checkpoint_plan.hpp: what a checkpoint transform will do, as a value. The engine
// (io/engine.hpp, transform_job::plan) works it out once from the strategies and the sources'
// indexes, without reading tensor data; the dry run's preview is computed from it
// (preview_of, io/summary.hpp), and it can be kept as JSON (to_json below; `reshard transform
// --plan-out FILE.json`; docs/formats.md, "Checkpoint plan").
//
// Per target file: its rank, path, format and the files it is written as (one, or a Hugging Face
// checkpoint's shards and index), and its items in file order. Per item: the source and output
// names, the dtypes read and written, the dims and bytes, and either a raw copy (the source rank
// and the stored pieces' byte ranges in its file) or the transfers (per piece: the source rank
// and the box of the full tensor it sends). The totals: bytes read per source file, bytes
// written, cross-rank bytes against their lower bound, the casts, the warnings and the memory
// bound.
//
// Every run executes it (plan_executor.hpp); plan_file.hpp reads its JSON back, checks it and
// splits it into parts (`reshard execute FILE.json --part I/K`).
//
// Laws (verify/io/engine_plans.cpp, verify/io/plan_file.cpp, docs/laws.md): the dry run's numbers
// are sums over the plan's items; a run reads from each source exactly the bytes the plan says;
// the plan read back from its JSON is the plan; its K parts together write what it writes.
#pragma once

#include <reshard/box.hpp>
#include <reshard/layout.hpp>
#include <reshard/io/checkpoint.hpp>
#include <reshard/io/dtype.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace reshard::io {

/// One parameter a transform casts (checkpoint_plan::casts, transform_summary::casts).
struct cast_record {
  std::string name;  ///< the output name
  dtype from = dtype::float32, to = dtype::float32;
  friend bool operator==(const cast_record&, const cast_record&) = default;
};

/// One transfer of a sliced item: the box of the full tensor that source rank `rank` sends. The
/// box that rank's file holds of the parameter (which `where` is inside) is in the plan's source
/// table, once per file and parameter (checkpoint_plan::holds, held_box).
struct plan_transfer {
  index_t rank = 0;
  box where;
  std::uint64_t bytes = 0;  ///< in the source dtype
  friend bool operator==(const plan_transfer&, const plan_transfer&) = default;
};

/// A byte range of a source file (a stored piece of a raw copy).
struct plan_range {
  std::uint64_t offset = 0, bytes = 0;
  friend bool operator==(const plan_range&, const plan_range&) = default;
};

/// One parameter of a target file.
struct plan_item {
  std::string source_name, name;  ///< name in the sources, and as written (name_rules)
  dtype from = dtype::uint8, to = dtype::uint8;  ///< dtype read, dtype written (dtype_rules)
  std::vector<std::int64_t> dims;  ///< as written (a scalar's as its source writes them)
  bool scalar = false;             ///< a scalar (safetensors writes its dims as [])
  std::uint64_t bytes = 0;         ///< tensor bytes written (in `to`)
  std::uint64_t source_bytes = 0;  ///< tensor bytes read (in `from`)
  /// Of source_bytes, those the target's own source rank holds (what no run must move across
  /// ranks): source_bytes - own_rank_bytes is the item's part of the lower bound.
  std::uint64_t own_rank_bytes = 0;
  bool raw = false;  ///< copied as stored, from `source_rank`'s file
  index_t source_rank = 0;          ///< raw: the file copied from
  std::vector<plan_range> stored;   ///< raw: the stored pieces in that file
  box target;                       ///< sliced: the target's box of the full tensor
  std::vector<plan_transfer> transfers;  ///< sliced: the pieces, by source rank
  std::size_t file = 0;             ///< the index in plan_target::files of the file holding it
  friend bool operator==(const plan_item&, const plan_item&) = default;
};

/// A byte item of a PyTorch DCP source (a pickled Python object's torch.save archive), copied as
/// stored into a DCP target's data file after its tensors: `bytes` bytes at `offset` of `file`.
struct plan_byte_item {
  std::string name;
  std::filesystem::path file;
  std::uint64_t offset = 0, bytes = 0;
  friend bool operator==(const plan_byte_item&, const plan_byte_item&) = default;
};

/// One target file (or Hugging Face checkpoint directory) and its items in file order.
struct plan_target {
  index_t rank = 0;
  std::filesystem::path path;
  checkpoint_format format = checkpoint_format::ckpt;
  std::vector<std::filesystem::path> files;  ///< the files written: `path`, or (hf) the shards then the index
  std::vector<plan_item> items;  ///< in file order (hf: shard by shard)
  /// safetensors and hf: the "format" of the files' __metadata__: "ms" (MindSpore's), or "pt"
  /// (Hugging Face checkpoints, and safetensors files converted from one: transformers refuses
  /// other values)
  std::string safetensors_format = "ms";
  /// dcp: the byte items of a DCP source this target's data file stores after its items
  std::vector<plan_byte_item> byte_items;
  friend bool operator==(const plan_target&, const plan_target&) = default;
};

/// A source file the plan reads.
struct plan_source {
  std::filesystem::path path;
  std::uint64_t bytes_read = 0;
  /// The file as the plan saw it: a plan run on a file whose size or modification time changed
  /// since is refused (execute_plan).
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
  friend bool operator==(const plan_source&, const plan_source&) = default;
};

/// The boxes of the full tensor that source files hold of one parameter: (source rank, box),
/// ascending by rank, then by the box's offset, each pair once. A file of a strategy's rank holds
/// one box of a parameter; a file of a PyTorch DCP checkpoint may hold several, disjoint (one per
/// chunk of the parameter it stores).
using rank_boxes = std::vector<std::pair<index_t, box>>;

/// The checkpoint plan: every target's items, and the totals.
struct checkpoint_plan {
  static constexpr int version = 2;  ///< "checkpoint_plan_version" of its JSON
  std::vector<plan_target> targets;
  std::map<index_t, plan_source> sources;  ///< the source files read: rank -> file and bytes
  std::uint64_t bytes_read = 0, bytes_written = 0, cross_bytes = 0, lower_bound_bytes = 0;
  unsigned jobs = 1;
  std::uint64_t buffer_bytes = 0;
  std::uint64_t peak_memory_bound = 0;  ///< what the process held when planning + the jobs' buffers at most
  std::vector<cast_record> casts;  ///< the parameters cast, by output name
  std::vector<std::string> warnings;
  /// Of each parameter the plan slices: source rank -> the box of the full tensor that rank's file
  /// holds (what the source strategy gives the rank). A transfer's sender must hold its box.
  /// (Its JSON lists them per source file, as each source's "holds".)
  std::map<std::string, rank_boxes, std::less<>> holds;
  bool crc = false;                              ///< ckpt targets: the crc_num trailer
  std::uint64_t chunk_bytes = ckpt_chunk_bytes;  ///< ckpt targets: the piece size of tensors
  dcp_layout dcp_torch = dcp_layout::torch_2;    ///< dcp targets: the module paths of `.metadata`
  friend bool operator==(const checkpoint_plan&, const checkpoint_plan&) = default;
};

namespace detail {
inline bool rank_box_before(const std::pair<index_t, box>& a, const std::pair<index_t, box>& b) {
  if (a.first != b.first) return a.first < b.first;
  return std::lexicographical_compare(a.second.offset.begin(), a.second.offset.end(), b.second.offset.begin(),
                                      b.second.offset.end());
}

// The first two transfers (by index) whose boxes overlap, if any: a sweep along the dim with the
// most distinct starts, each box compared only with the boxes still open there (O(T log T) when
// the boxes are spread along it, as a tiling's are). Boxes of another rank than the first are
// skipped (checkpoint_plan_problems reports them).
inline std::optional<std::pair<std::size_t, std::size_t>> first_overlap(const std::vector<plan_transfer>& xs) {
  if (xs.size() < 2) return std::nullopt;
  const std::size_t n = xs.front().where.offset.size();
  std::size_t dim = 0, most = 0;
  std::vector<index_t> starts;
  for (std::size_t d = 0; d < n; ++d) {  // the dim whose starts are the most distinct
    starts.clear();
    for (const auto& x : xs)
      if (x.where.offset.size() == n) starts.push_back(x.where.offset[d]);
    std::sort(starts.begin(), starts.end());
    const auto distinct = static_cast<std::size_t>(std::unique(starts.begin(), starts.end()) - starts.begin());
    if (distinct > most) most = distinct, dim = d;
  }
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < xs.size(); ++i)
    if (xs[i].where.offset.size() == n && volume(xs[i].where) > 0) order.push_back(i);
  if (n == 0) return order.size() > 1 ? std::optional(std::pair{order[0], order[1]}) : std::nullopt;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return xs[a].where.offset[dim] < xs[b].where.offset[dim] || (xs[a].where.offset[dim] == xs[b].where.offset[dim] && a < b);
  });
  std::optional<std::pair<std::size_t, std::size_t>> best;
  std::vector<std::size_t> open;
  for (std::size_t i : order) {
    const index_t start = xs[i].where.offset[dim];
    std::erase_if(open, [&](std::size_t k) { return xs[k].where.offset[dim] + xs[k].where.extent[dim] <= start; });
    for (std::size_t k : open)
      if (volume(intersect(xs[k].where, xs[i].where)) > 0) {
        const std::pair<std::size_t, std::size_t> hit{std::min(i, k), std::max(i, k)};
        if (!best || hit < *best) best = hit;
      }
    open.push_back(i);
  }
  return best;
}

}  // namespace detail

/// The boxes source rank `rank`'s file holds of a parameter: a range of `holds` (empty if none).
/// A table listing ranks 0, 1, 2, ... once each (a strategy's, every rank read) has the rank's
/// entry at its index: found there without a search.
inline std::span<const std::pair<index_t, box>> held_boxes(const rank_boxes& holds, index_t rank) {
  const auto at = static_cast<std::size_t>(rank);
  const bool direct = rank >= 0 && at < holds.size() && holds[at].first == rank && (at == 0 || holds[at - 1].first < rank);
  const auto lo = direct ? holds.begin() + static_cast<std::ptrdiff_t>(at)
                         : std::lower_bound(holds.begin(), holds.end(), rank,
                                            [](const std::pair<index_t, box>& e, index_t r) { return e.first < r; });
  auto hi = lo;
  while (hi != holds.end() && hi->first == rank) ++hi;
  return {holds.data() + (lo - holds.begin()), static_cast<std::size_t>(hi - lo)};
}
/// The box of the full tensor that source rank `rank`'s file holds of a parameter and that a
/// transfer of `where` reads, as the plan's table says (checkpoint_plan::holds): of a rank holding
/// one box, that box (the caller checks that `where` is inside it); of a rank holding several
/// (DCP chunks), the one `where` lies in, else the first. Null if the table lists none.
inline const box* held_box(const rank_boxes& holds, index_t rank, const box& where) {
  const auto mine = held_boxes(holds, rank);
  if (mine.empty()) return nullptr;
  if (mine.size() == 1) return &mine.front().second;
  for (const auto& e : mine)
    if (intersect(where, e.second) == where) return &e.second;
  return &mine.front().second;
}
/// Puts `holds` in order (rank, then offset), each pair once: what held_box searches. Builders
/// append in any order, then call it.
inline void sort_by_rank(rank_boxes& holds) {
  // in order already, each pair once (a table listed in rank order): nothing to move
  if (std::adjacent_find(holds.begin(), holds.end(), [](const auto& a, const auto& b) {
        return !detail::rank_box_before(a, b);
      }) == holds.end())
    return;
  std::stable_sort(holds.begin(), holds.end(), detail::rank_box_before);
  holds.erase(std::unique(holds.begin(), holds.end()), holds.end());
}
/// The (first) box source rank `rank`'s file holds of parameter `source_name`, or null if the
/// table does not say.
inline const box* held_box(const checkpoint_plan& p, index_t rank, std::string_view source_name) {
  const auto by_rank = p.holds.find(source_name);
  if (by_rank == p.holds.end()) return nullptr;
  const auto mine = held_boxes(by_rank->second, rank);
  return mine.empty() ? nullptr : &mine.front().second;
}

/// Calls f(source rank, bytes) for each read of item `it`, in order.
template <class F>
void for_each_read(const plan_item& it, F&& f) {
  if (it.raw) return f(it.source_rank, it.source_bytes);
  for (const auto& x : it.transfers) f(x.rank, x.bytes);
}

/// What one target reads and writes: sums over its items.
struct plan_target_totals {
  std::uint64_t bytes_written = 0;
  std::map<index_t, std::uint64_t> reads;  ///< source rank -> bytes
  std::uint64_t cross_bytes = 0;           ///< of those, from other ranks than the target's
  std::uint64_t lower_bound_bytes = 0;     ///< bytes the target's own source rank does not hold
};

inline plan_target_totals totals_of(const plan_target& t) {
  plan_target_totals s;
  for (const auto& it : t.items) {
    s.bytes_written += it.bytes;
    for_each_read(it, [&](index_t r, std::uint64_t b) {
      s.reads[r] += b;
      if (r != t.rank) s.cross_bytes += b;
    });
    s.lower_bound_bytes += it.source_bytes - it.own_rank_bytes;
  }
  return s;
}

/// What a whole plan reads and writes: sums over its targets (totals_of each).
struct plan_totals {
  std::map<index_t, std::uint64_t> reads;  ///< source rank -> bytes
  std::uint64_t bytes_read = 0, bytes_written = 0, cross_bytes = 0, lower_bound_bytes = 0;
};

inline plan_totals totals_of(const checkpoint_plan& p) {
  plan_totals s;
  for (const auto& t : p.targets) {
    const plan_target_totals u = totals_of(t);
    for (const auto& [r, b] : u.reads) s.reads[r] += b, s.bytes_read += b;
    s.bytes_written += u.bytes_written;
    s.cross_bytes += u.cross_bytes;
    s.lower_bound_bytes += u.lower_bound_bytes;
  }
  return s;
}

/// Fills the plan's totals (sources' bytes_read, bytes_read, bytes_written, cross and lower
/// bound) from its targets' items (totals_of); `path_of(rank)` names each source file read that
/// the plan did not list yet (a listed one keeps its path and fingerprint; one no longer
/// read is dropped).
template <class PathOf>
void sum_plan(checkpoint_plan& p, PathOf&& path_of) {
  const plan_totals s = totals_of(p);
  std::map<index_t, plan_source> before = std::move(p.sources);
  p.sources.clear();
  for (const auto& [r, b] : s.reads) {
    plan_source& src = p.sources[r];
    const auto old = before.find(r);
    if (old != before.end()) src = std::move(old->second);
    if (src.path.empty()) src.path = path_of(r);
    src.bytes_read = b;
  }
  p.bytes_read = s.bytes_read;
  p.bytes_written = s.bytes_written;
  p.cross_bytes = s.cross_bytes;
  p.lower_bound_bytes = s.lower_bound_bytes;
}

namespace detail {
inline nlohmann::json casts_json(const std::vector<cast_record>& casts) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& c : casts) a.push_back({{"name", c.name}, {"from", ms_name(c.from)}, {"to", ms_name(c.to)}});
  return a;
}
// The totals, memory and warnings of a plan or a preview (transform_preview), under the keys
// both JSON forms give them.
template <class Totals>
void put_totals(nlohmann::json& j, const Totals& p) {
  j["bytes_read"] = p.bytes_read;
  j["bytes_written"] = p.bytes_written;
  j["cross_rank_bytes"] = p.cross_bytes;
  j["lower_bound_bytes"] = p.lower_bound_bytes;
  j["jobs"] = p.jobs;
  j["buffer_bytes"] = p.buffer_bytes;
  j["peak_memory_bound_bytes"] = p.peak_memory_bound;
  j["warnings"] = p.warnings;
}
inline nlohmann::json box_json(const box& b) {
  return {{"offset", b.offset.to_vector()}, {"extent", b.extent.to_vector()}};
}

}  // namespace detail

/// The plan as JSON, version 2 (docs/formats.md, "Checkpoint plan"): {"checkpoint_plan_version":
/// 2, "sources": [...], "targets": [{..., "items": [...]}], the totals, "jobs", "buffer_bytes",
/// "peak_memory_bound_bytes", "casts", "warnings", "ckpt"}; dtypes by MindSpore's names
/// ("Float32"). plan_file.hpp reads it back (plan_from_json) to be checked and executed.
inline nlohmann::json to_json(const checkpoint_plan& p) {
  nlohmann::json j;
  j["checkpoint_plan_version"] = checkpoint_plan::version;
  j["sources"] = nlohmann::json::array();
  std::map<index_t, nlohmann::json> holds;  // per source rank: parameter -> box
  for (const auto& [name, by_rank] : p.holds)
    for (const auto& [r, b] : by_rank) {
      nlohmann::json& h = holds[r];
      if (h.is_null()) h = nlohmann::json::object();
      // one box (every strategy's file); a DCP file holding several chunks: an array of them
      if (!h.contains(name)) h[name] = detail::box_json(b);
      else if (h[name].is_array()) h[name].push_back(detail::box_json(b));
      else h[name] = nlohmann::json::array({std::move(h[name]), detail::box_json(b)});
    }
  for (const auto& [r, s] : p.sources) {
    auto h = holds.find(r);
    j["sources"].push_back({{"rank", r},
                            {"file", s.path.string()},
                            {"bytes_read", s.bytes_read},
                            {"size", s.size},
                            {"mtime_ns", s.mtime_ns},
                            {"holds", h == holds.end() ? nlohmann::json::object() : std::move(h->second)}});
  }
  j["targets"] = nlohmann::json::array();
  for (const auto& t : p.targets) {
    const plan_target_totals s = totals_of(t);
    nlohmann::json files = nlohmann::json::array(), items = nlohmann::json::array();
    for (const auto& f : t.files) files.push_back(f.string());
    for (const auto& it : t.items) {
      nlohmann::json i = {{"name", it.name},
                          {"source_name", it.source_name},
                          {"dtype", ms_name(it.to)},
                          {"source_dtype", ms_name(it.from)},
                          {"dims", it.dims},
                          {"scalar", it.scalar},
                          {"bytes", it.bytes},
                          {"source_bytes", it.source_bytes},
                          {"own_rank_bytes", it.own_rank_bytes},
                          {"file", it.file}};
      if (it.raw) {
        nlohmann::json ranges = nlohmann::json::array();
        for (const auto& g : it.stored) ranges.push_back({g.offset, g.bytes});
        i["copy"] = {{"rank", it.source_rank}, {"ranges", ranges}};
      } else {
        nlohmann::json xs = nlohmann::json::array();
        for (const auto& x : it.transfers) {
          nlohmann::json e = detail::box_json(x.where);
          e["rank"] = x.rank;
          e["bytes"] = x.bytes;
          xs.push_back(std::move(e));
        }
        i["slice"] = {{"box", detail::box_json(it.target)}, {"transfers", xs}};
      }
      items.push_back(std::move(i));
    }
    j["targets"].push_back({{"rank", t.rank},
                            {"path", t.path.string()},
                            {"format", to_string(t.format)},
                            {"files", files},
                            {"safetensors_format", t.safetensors_format},
                            {"bytes_written", s.bytes_written},
                            {"cross_rank_bytes", s.cross_bytes},
                            {"lower_bound_bytes", s.lower_bound_bytes},
                            {"items", items}});
    if (!t.byte_items.empty()) {
      nlohmann::json& b = j["targets"].back()["byte_items"] = nlohmann::json::array();
      for (const auto& x : t.byte_items)
        b.push_back({{"name", x.name}, {"file", x.file.string()}, {"offset", x.offset}, {"bytes", x.bytes}});
    }
  }
  detail::put_totals(j, p);
  j["casts"] = detail::casts_json(p.casts);
  j["ckpt"] = {{"crc", p.crc}, {"chunk_bytes", p.chunk_bytes}};
  if (std::any_of(p.targets.begin(), p.targets.end(), [](const plan_target& t) { return t.format == checkpoint_format::dcp; }))
    j["dcp"] = {{"torch", p.dcp_torch == dcp_layout::torch_1_13 ? "1.13" : "2"}};
  return j;
}

}  // namespace reshard::io
