// reshard/io/dcp_read_items.hpp: the verdict on PyTorch DCP's read items, the plan by which
// DCP's load planner (create_default_local_load_plan) fills each target rank's chunks from the
// chunks a checkpoint saved. The items come as JSON (docs/formats.md#dcp-read-items, written by
// the twenty lines of Python there).
//
//   auto items = dcp_read_items_from_json(text, "items.json");   // every key checked
//   auto r = check_dcp_read_items(items);                          // per tensor, check_plan's verdict
//   r.ok()
//
// A read item copies `lengths` elements from storage chunk `storage_index` (a saved chunk, named
// by its offsets in the full tensor), at `storage_offsets` within it, to target chunk
// `dest_index` of its rank, at `dest_offsets` within that. In the full tensor it reads the box
// storage_index + storage_offsets and writes the box dest_index + dest_offsets, of extent
// `lengths`. So per tensor the items are a plan between explicit boxes (check_plan on rank_box):
// the senders are the saved chunks (each on the rank whose file holds it), the receivers the
// target chunks. On top of check_plan's verdict (complete: every element of each target chunk
// read exactly once; sound: each read inside its saved chunk and its target chunk), an item
// whose two boxes differ puts elements where they do not belong ("misplaced"), and an item that
// names a chunk the checkpoint or its rank does not have is reported ("no such chunk").
//
// Errors: JSON that is not this form (a missing key, a wrong type, dims that disagree) is a
// reshard::error naming the file, the place and the reason; a wrong plan is a verdict, not an
// error.
#pragma once

#include <reshard/box.hpp>
#include <reshard/check_plan.hpp>
#include <reshard/error.hpp>
#include <reshard/io/detail/text.hpp>
#include <reshard/io/dtype.hpp>
#include <reshard/io/json_reader.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace reshard::io {

/// A chunk of a tensor: its offsets and sizes in the full tensor, and the rank that holds it.
struct dcp_held_chunk {
  index_t rank = 0;
  index_list offsets, sizes;
  box as_box() const { return {offsets, sizes}; }
};

/// One of DCP's ReadItems (LoadItemType.TENSOR) of target rank `rank`.
struct dcp_read_item {
  index_t rank = 0;
  std::size_t index = 0;       ///< its place in the rank's read_items
  index_list dest_index;       ///< the target chunk's offsets (dest_index.offset)
  index_list dest_offsets;     ///< where in the target chunk
  index_list storage_index;    ///< the saved chunk's offsets (storage_index.offset)
  index_list storage_offsets;  ///< where in the saved chunk
  index_list lengths;          ///< the extent
};

/// One tensor: its size, what the checkpoint saved of it, what the targets asked for, and the
/// items that read it (in the order of the file, rank by rank).
struct dcp_tensor_items {
  std::string fqn;
  index_list size;
  index_t element_bytes = 1;
  std::vector<dcp_held_chunk> saved;    ///< the checkpoint's chunks (metadata), rank = the file's writer
  std::vector<dcp_held_chunk> targets;  ///< every target rank's chunks
  std::vector<dcp_read_item> items;
};

struct dcp_read_items {
  std::string origin;                     ///< the file, for messages
  std::string torch;                      ///< the torch version that made them ("" when not given)
  std::size_t ranks = 0;                  ///< target ranks listed
  std::vector<dcp_tensor_items> tensors;  ///< by fqn
};

namespace detail {

// json_fields, with ranks and lists of coordinates checked against the tensor's dims.
struct dcp_json_reader : json_fields {
  index_t rank(const nlohmann::json& j, const std::string& where) const {
    const auto v = json_int(at(j, "rank", where), 0, std::int64_t{1} << 40);
    if (!v) fail(where + ".rank", "not a non-negative integer");
    return *v;
  }
  // a list of `dims` non-negative integers (dims < 0: any count)
  index_list coords(const nlohmann::json& j, std::string_view key, const std::string& where, std::ptrdiff_t dims) const {
    const std::string w = where + "." + std::string(key);
    const auto& v = at(j, key, where);
    if (!v.is_array()) fail(w, "not an array");
    if (v.size() > 64) fail(w, "more than 64 dims");
    if (dims >= 0 && v.size() != static_cast<std::size_t>(dims))
      fail(w, std::to_string(v.size()) + (v.size() == 1 ? " number" : " numbers") + ", the tensor has " +
                  std::to_string(dims) + (dims == 1 ? " dim" : " dims"));
    index_list out;
    for (const auto& e : v) {
      const auto x = json_int(e, 0, std::int64_t{1} << 56);
      if (!x) fail(w, json_excerpt(v) + " is not a list of non-negative integers");
      out.push_back(*x);
    }
    return out;
  }
};

}  // namespace detail

/// The read items of the JSON `j` (docs/formats.md#dcp-read-items); `origin` names the file.
/// Keys the form does not have are refused (a misspelt key is an error, not a dropped item).
inline dcp_read_items dcp_read_items_from_json(const nlohmann::json& j, const std::string& origin) {
  const detail::dcp_json_reader r{origin + ": "};
  if (!j.is_object() || !j.contains("dcp_read_items"))
    report_error(r.who + "no 'dcp_read_items' version: not DCP read items (docs/formats.md#dcp-read-items)");
  check_known_keys(j, {"dcp_read_items", "torch", "tensors", "ranks"}, r.who);
  if (const auto v = detail::json_int(j["dcp_read_items"]); !v || *v != 1)
    r.fail("dcp_read_items", "version " + detail::json_excerpt(j["dcp_read_items"]) + ", this program reads version 1");
  dcp_read_items out;
  out.origin = origin;
  std::map<std::string, std::size_t> index;  // fqn -> tensors[]
  const auto& tensors = r.at(j, "tensors", "the file");
  if (!tensors.is_object()) r.fail("tensors", "not an object {fqn: {...}}");
  for (auto it = tensors.begin(); it != tensors.end(); ++it) {
    const std::string w = "tensors." + it.key();
    const auto& t = it.value();
    check_known_keys(t, {"size", "dtype", "chunks"}, r.who + w + ": ");
    dcp_tensor_items ti;
    ti.fqn = it.key();
    ti.size = r.coords(t, "size", w, -1);
    const auto dims = static_cast<std::ptrdiff_t>(ti.size.size());
    const auto& dt = r.at(t, "dtype", w);
    const auto type = dt.is_string() ? dtype_from_name(dt.get<std::string>()) : std::nullopt;
    if (!type) r.fail(w + ".dtype", detail::json_excerpt(dt) + " is not a dtype reshard knows (such as \"float32\")");
    ti.element_bytes = static_cast<index_t>(element_size(*type));
    if (!byte_size(*type, ti.size)) r.fail(w + ".size", to_string(ti.size) + " holds more than 2^63 - 1 bytes");
    for (const auto& c : r.array(t, "chunks", w)) {
      const std::string wc = w + ".chunks[" + std::to_string(ti.saved.size()) + "]";
      check_known_keys(c, {"rank", "offsets", "sizes"}, r.who + wc + ": ");
      ti.saved.push_back({r.rank(c, wc), r.coords(c, "offsets", wc, dims), r.coords(c, "sizes", wc, dims)});
    }
    index.emplace(ti.fqn, out.tensors.size());
    out.tensors.push_back(std::move(ti));
  }
  const auto tensor = [&](const std::string& fqn, const std::string& w) -> dcp_tensor_items& {
    const auto it = index.find(fqn);
    if (it == index.end()) r.fail(w, "tensor " + detail::quote_name(fqn) + " is not in \"tensors\" (the checkpoint does not hold it)");
    return out.tensors[it->second];
  };
  if (j.contains("torch")) {
    if (!j["torch"].is_string()) r.fail("torch", "not a string");
    out.torch = j["torch"].get<std::string>();
  }
  std::vector<index_t> seen;
  for (const auto& rk : r.array(j, "ranks", "the file")) {
    const std::string w = "ranks[" + std::to_string(seen.size()) + "]";
    check_known_keys(rk, {"rank", "chunks", "read_items"}, r.who + w + ": ");
    const index_t rank = r.rank(rk, w);
    if (std::find(seen.begin(), seen.end(), rank) != seen.end()) r.fail(w, "rank " + std::to_string(rank) + " twice");
    seen.push_back(rank);
    const auto& chunks = r.at(rk, "chunks", w);
    if (!chunks.is_object()) r.fail(w + ".chunks", "not an object {fqn: [{\"offsets\", \"sizes\"}, ...]}");
    for (auto it = chunks.begin(); it != chunks.end(); ++it) {
      const std::string wc = w + ".chunks." + it.key();
      dcp_tensor_items& ti = tensor(it.key(), wc);
      if (!it.value().is_array()) r.fail(wc, "not an array");
      std::size_t k = 0;
      for (const auto& c : it.value()) {
        const std::string wk = wc + "[" + std::to_string(k++) + "]";
        check_known_keys(c, {"offsets", "sizes"}, r.who + wk + ": ");
        const auto dims = static_cast<std::ptrdiff_t>(ti.size.size());
        ti.targets.push_back({rank, r.coords(c, "offsets", wk, dims), r.coords(c, "sizes", wk, dims)});
      }
    }
    std::size_t k = 0;
    for (const auto& x : r.array(rk, "read_items", w)) {
      const std::string wi = w + ".read_items[" + std::to_string(k++) + "]";
      check_known_keys(x, {"fqn", "dest_index", "dest_offsets", "storage_index", "storage_offsets", "lengths"},
                       r.who + wi + ": ");
      const auto& f = r.at(x, "fqn", wi);
      if (!f.is_string()) r.fail(wi + ".fqn", "not a string");
      dcp_tensor_items& ti = tensor(f.get<std::string>(), wi);
      const auto dims = static_cast<std::ptrdiff_t>(ti.size.size());
      ti.items.push_back({rank, k - 1, r.coords(x, "dest_index", wi, dims), r.coords(x, "dest_offsets", wi, dims),
                          r.coords(x, "storage_index", wi, dims), r.coords(x, "storage_offsets", wi, dims),
                          r.coords(x, "lengths", wi, dims)});
    }
  }
  out.ranks = seen.size();
  for (const auto& ti : out.tensors) {
    const box all{index_list(ti.size.size(), 0), ti.size};
    const auto in_tensor = [&](const std::vector<dcp_held_chunk>& cs, const char* what) {
      for (std::size_t i = 0; i < cs.size(); ++i)
        if (!reshard::detail::box_inside(cs[i].as_box(), all))
          r.fail("tensor " + detail::quote_name(ti.fqn), std::string(what) + " " + to_string(cs[i].as_box()) +
                                                     " does not lie in the tensor " + to_string(ti.size));
    };
    in_tensor(ti.saved, "the saved chunk");
    in_tensor(ti.targets, "the target chunk");
  }
  return out;
}

/// The read items in the JSON text `text`, read strictly (json_reader.hpp); `origin` names it.
inline dcp_read_items dcp_read_items_from_text(std::string_view text, const std::string& origin) {
  return dcp_read_items_from_json(parse_json_strict<nlohmann::json>(text, origin + ": "), origin);
}

/// The verdict on one tensor's read items.
struct dcp_tensor_check {
  std::string fqn;
  index_list size;
  index_t element_bytes = 1;
  plan_check check;                 ///< check_plan on the items as boxes (its problems reworded, see below)
  std::vector<std::string> extra;   ///< misplaced items and items naming no chunk (the first max_problems)
  std::size_t extra_count = 0;      ///< all of those
  std::size_t items = 0;            ///< the tensor's read items
  std::size_t meeting_pairs = 0;    ///< (target chunk, saved chunk) pairs that meet: DCP reads one item per pair
  index_t read_bytes = 0;           ///< bytes the items read
  index_t target_bytes = 0;         ///< bytes of the target chunks: each read once, the least there is
  bool ok() const noexcept { return check.ok() && extra_count == 0; }
  std::size_t problem_count() const noexcept { return check.problem_count + extra_count; }
};

struct dcp_check {
  std::vector<dcp_tensor_check> tensors;
  bool ok() const noexcept {
    return std::all_of(tensors.begin(), tensors.end(), [](const dcp_tensor_check& t) { return t.ok(); });
  }
  std::size_t problem_count() const noexcept {
    std::size_t n = 0;
    for (const auto& t : tensors) n += t.problem_count();
    return n;
  }
};

namespace detail {

inline std::string item_name(const dcp_read_item& x) {
  return "read item " + std::to_string(x.index) + " of rank " + std::to_string(x.rank) + " (dest_index " +
         to_string(x.dest_index) + ", dest_offsets " + to_string(x.dest_offsets) + ", storage_index " +
         to_string(x.storage_index) + ", storage_offsets " + to_string(x.storage_offsets) + ", lengths " +
         to_string(x.lengths) + ")";
}

}  // namespace detail

/// check_plan's verdict on each tensor's read items (see the top of this header). Problem texts
/// read "tensor 'w': <problem>: <the item or the chunk>"; at most `max_problems` per tensor.
inline dcp_check check_dcp_read_items(const dcp_read_items& in, std::size_t max_problems = 100) {
  dcp_check out;
  for (const dcp_tensor_items& ti : in.tensors) {
    if (ti.targets.empty() && ti.items.empty()) continue;  // saved, not asked for
    dcp_tensor_check tc;
    tc.fqn = ti.fqn;
    tc.size = ti.size;
    tc.element_bytes = ti.element_bytes;
    const std::string who = "tensor " + detail::quote_name(ti.fqn) + ": ";
    std::vector<rank_box> src, dst;
    for (const dcp_held_chunk& c : ti.saved) src.push_back({c.rank, c.as_box()});
    for (const dcp_held_chunk& c : ti.targets) dst.push_back({c.rank, c.as_box()});
    for (const dcp_held_chunk& t : ti.targets) {
      tc.target_bytes += volume(t.as_box()) * ti.element_bytes;
      for (const dcp_held_chunk& s : ti.saved) tc.meeting_pairs += volume(intersect(t.as_box(), s.as_box())) > 0 ? 1 : 0;
    }
    // each item as a transfer from its saved chunk to its target chunk, of the box it writes
    std::vector<transfer> xs;
    std::vector<std::size_t> item_of;  // xs[i] is items[item_of[i]]
    const auto find = [](const std::vector<dcp_held_chunk>& cs, const index_list& offsets, index_t rank, bool by_rank) {
      for (std::size_t i = 0; i < cs.size(); ++i)
        if (cs[i].offsets == offsets && (!by_rank || cs[i].rank == rank)) return static_cast<index_t>(i);
      return index_t{-1};
    };
    const auto note = [&](std::string what) {
      if (++tc.extra_count <= max_problems) tc.extra.push_back(who + std::move(what));
    };
    const box all{index_list(ti.size.size(), 0), ti.size};
    for (std::size_t k = 0; k < ti.items.size(); ++k) {
      const dcp_read_item& x = ti.items[k];
      const index_t s = find(ti.saved, x.storage_index, 0, false), d = find(ti.targets, x.dest_index, x.rank, true);
      if (s < 0) note("no such chunk: " + detail::item_name(x) + " names a storage_index the checkpoint did not save");
      if (d < 0) note("no such chunk: " + detail::item_name(x) + " names a dest_index rank " + std::to_string(x.rank) + " does not hold");
      box reads{x.storage_index, x.lengths}, writes{x.dest_index, x.lengths};
      for (std::size_t i = 0; i < x.lengths.size(); ++i) {
        reads.offset[i] += x.storage_offsets[i];
        writes.offset[i] += x.dest_offsets[i];
      }
      if (reshard::detail::box_inside(writes, all)) tc.read_bytes += volume(writes) * ti.element_bytes;  // else a problem
      if (reads != writes) {
        note("misplaced: " + detail::item_name(x) + " reads the box " + to_string(reads) + " of the tensor into " +
             to_string(writes));
        // check_plan sees the box written; the box read must lie in its saved chunk too
        if (s >= 0 && !reshard::detail::box_inside(reads, ti.saved[static_cast<std::size_t>(s)].as_box()))
          note("reads outside its saved chunk: " + detail::item_name(x) + " reads " + to_string(reads) +
               ", the saved chunk is " + to_string(ti.saved[static_cast<std::size_t>(s)].as_box()));
      }
      if (s >= 0 && d >= 0) {
        xs.push_back({s, d, writes});
        item_of.push_back(k);
      }
    }
    tc.items = ti.items.size();
    tc.check = check_plan(ti.size, src, dst, xs, {max_problems, ti.element_bytes});
    // the problems in the items' words
    for (plan_problem& p : tc.check.problems) {
      std::string what = who + to_string(p.kind) + ": ";
      if (p.dst >= 0 && static_cast<std::size_t>(p.dst) < ti.targets.size())
        what += "target chunk " + to_string(ti.targets[static_cast<std::size_t>(p.dst)].as_box()) + " of rank " +
                std::to_string(ti.targets[static_cast<std::size_t>(p.dst)].rank) + ", box " + to_string(p.where);
      if (p.transfer != no_transfer) what += ", " + detail::item_name(ti.items[item_of[p.transfer]]);
      if (p.other != no_transfer) what += " and " + detail::item_name(ti.items[item_of[p.other]]);
      if (p.kind == plan_problem_kind::bad_transfer) what += ": the box leaves the tensor " + to_string(ti.size);
      if (p.kind == plan_problem_kind::sender_lacks && p.src >= 0)
        what += ": the saved chunk " + to_string(ti.saved[static_cast<std::size_t>(p.src)].as_box()) + " does not hold it";
      p.what = std::move(what);
    }
    out.tensors.push_back(std::move(tc));
  }
  return out;
}

/// The verdict as JSON: {"ok", "problem_count", "tensors": [{"fqn", "size", "ok", "complete",
/// "sound", "problem_count", "problems": [text...], "items", "meeting_pairs", "read_bytes",
/// "target_bytes", "other_rank_bytes", "max_other_rank_bytes"}...]} (docs/formats.md#dcp-read-items).
inline nlohmann::json to_json(const dcp_check& r) {
  nlohmann::json tensors = nlohmann::json::array();
  for (const dcp_tensor_check& t : r.tensors) {
    nlohmann::json problems = nlohmann::json::array();
    for (const plan_problem& p : t.check.problems) problems.push_back(p.what);
    for (const std::string& e : t.extra) problems.push_back(e);
    tensors.push_back({{"fqn", t.fqn},
                       {"size", t.size},
                       {"ok", t.ok()},
                       {"complete", t.check.complete},
                       {"sound", t.check.sound && t.extra_count == 0},
                       {"problem_count", t.problem_count()},
                       {"problems", std::move(problems)},
                       {"items", t.items},
                       {"meeting_pairs", t.meeting_pairs},
                       {"read_bytes", t.read_bytes},
                       {"target_bytes", t.target_bytes},
                       {"other_rank_bytes", t.check.cost.cross_bytes},
                       {"max_other_rank_bytes", t.check.cost.max_received_bytes}});
  }
  return {{"ok", r.ok()}, {"problem_count", r.problem_count()}, {"tensors", std::move(tensors)}};
}

}  // namespace reshard::io
