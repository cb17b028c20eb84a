// reshard/io/plan_file.hpp: a checkpoint plan kept as a file. The JSON that to_json
// (checkpoint_plan.hpp) writes is read back by plan_from_json, checked by check_checkpoint_plan,
// and cut into parts by plan_part, so that a plan made on one machine can be executed on
// others, whole or in K disjoint parts (execute.hpp; `reshard execute FILE.json --part I/K`).
//
//   auto plan = plan_from_json(json_of_file, "plan.json");   // every key checked
//   check_checkpoint_plan(plan, "plan.json");                  // a plan that does not add up: an error
//   auto part = plan_part(plan, 1, 3);                         // the second of three parts
//
// What check_checkpoint_plan proves from the plan alone (laws K8, E6 in docs/laws.md):
//   * each sliced item's transfers tile its target box: each inside the box, pairwise disjoint,
//     and their volumes add up to the box's (so every element is brought exactly once);
//   * each transfer's sender holds its box: the box is inside what the plan's source table says
//     that rank's file holds of the parameter (checkpoint_plan::holds);
//   * a raw copy's stored ranges add up to its bytes; bytes and dtypes agree with the boxes;
//   * each target's items are in file order, named once, in files its format has;
//   * the totals are the sums of the items.
// What it cannot see (a file that changed) execute_plan checks against the files themselves.
#pragma once

#include <reshard/box.hpp>
#include <reshard/error.hpp>
#include <reshard/layout.hpp>
#include <reshard/io/checkpoint.hpp>
#include <reshard/io/checkpoint_plan.hpp>
#include <reshard/io/dcp_writer.hpp>
#include <reshard/io/detail/text.hpp>
#include <reshard/io/dtype.hpp>
#include <reshard/io/json_reader.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace reshard::io {

namespace detail {

// Reading one JSON value of a plan (json_fields), and its boxes and dtypes.
struct plan_json_reader : json_fields {
  dtype type(const nlohmann::json& j, std::string_view key, const std::string& where) const {
    const std::string name = str(j, key, where);
    const auto t = dtype_from_ms_name(name);
    if (!t) fail(where + "." + std::string(key), "unknown dtype '" + name + "'");
    return *t;
  }
  box get_box(const nlohmann::json& j, const std::string& where) const {
    const auto o = ints(at(j, "offset", where), where + ".offset");
    const auto e = ints(at(j, "extent", where), where + ".extent");
    if (o.size() != e.size()) fail(where, "offset and extent of different lengths");
    if (o.size() > 64) fail(where, "more than 64 dims");
    box b{index_list(o.size(), 0), index_list(e.size(), 0)};
    for (std::size_t d = 0; d < o.size(); ++d) {
      if (o[d] < 0 || e[d] < 0 || e[d] > (index_t{1} << 56) || o[d] > (index_t{1} << 56))
        fail(where, "an offset or extent out of range");
      b.offset[d] = o[d];
      b.extent[d] = e[d];
    }
    return b;
  }
};

}  // namespace detail

/// The plan a to_json (checkpoint_plan.hpp) wrote, version 2; `origin` names it in messages
/// ("plan.json"). Keys are checked as the other JSON readers check them: a missing or mistyped
/// key, or a version other than 2, is an error naming the key.
inline checkpoint_plan plan_from_json(const nlohmann::json& j, const std::string& origin) {
  const detail::plan_json_reader r{origin + ": "};
  if (!j.is_object()) r.fail("the plan", "not a JSON object (a checkpoint plan is one: reshard ... --plan-out)");
  if (!j.contains("checkpoint_plan_version"))
    r.fail("the plan", "no 'checkpoint_plan_version' (not a checkpoint plan: write one with --plan-out)");
  const auto v = r.i64(j, "checkpoint_plan_version", "the plan");
  if (v != checkpoint_plan::version)
    r.fail("checkpoint_plan_version", "version " + std::to_string(v) + ", this program reads version " +
                                          std::to_string(checkpoint_plan::version) + " (make the plan again)");
  checkpoint_plan p;
  for (const auto& s : r.array(j, "sources", "the plan")) {
    const std::string w = "sources[" + std::to_string(p.sources.size()) + "]";
    const index_t rank = r.i64(s, "rank", w);
    plan_source src;
    src.path = r.str(s, "file", w);
    src.bytes_read = r.u64(s, "bytes_read", w);
    src.size = r.u64(s, "size", w);
    src.mtime_ns = r.i64(s, "mtime_ns", w);
    const auto& holds = r.at(s, "holds", w);
    if (!holds.is_object()) r.fail(w + ".holds", "not an object");
    for (auto it = holds.begin(); it != holds.end(); ++it) {
      if (!it.value().is_array()) {  // one box; a DCP file's several chunks: an array
        p.holds[it.key()].emplace_back(rank, r.get_box(it.value(), w + ".holds." + it.key()));
        continue;
      }
      for (std::size_t k = 0; k < it.value().size(); ++k)
        p.holds[it.key()].emplace_back(rank, r.get_box(it.value()[k], w + ".holds." + it.key() + "[" + std::to_string(k) + "]"));
    }
    if (!p.sources.emplace(rank, std::move(src)).second) r.fail(w, "source rank " + std::to_string(rank) + " twice");
  }
  for (auto& [name, by_rank] : p.holds) sort_by_rank(by_rank);  // the sources are distinct
  for (const auto& t : r.array(j, "targets", "the plan")) {
    const std::string w = "targets[" + std::to_string(p.targets.size()) + "]";
    plan_target& pt = p.targets.emplace_back();
    pt.rank = r.i64(t, "rank", w);
    pt.path = r.str(t, "path", w);
    const std::string format = r.str(t, "format", w);
    if (format == "ckpt")
      pt.format = checkpoint_format::ckpt;
    else if (format == "safetensors")
      pt.format = checkpoint_format::safetensors;
    else if (format == "hf")
      pt.format = checkpoint_format::hf;
    else if (format == "dcp")
      pt.format = checkpoint_format::dcp;
    else
      r.fail(w + ".format", "unknown format '" + format + "' (ckpt, safetensors, hf or dcp)");
    for (const auto& file : r.array(t, "files", w)) {
      if (!file.is_string()) r.fail(w + ".files", "not an array of strings");
      pt.files.emplace_back(file.get<std::string>());
    }
    pt.safetensors_format = r.str(t, "safetensors_format", w);
    if (t.contains("byte_items"))
      for (const auto& b : r.array(t, "byte_items", w)) {
        const std::string wb = w + ".byte_items[" + std::to_string(pt.byte_items.size()) + "]";
        pt.byte_items.push_back({r.str(b, "name", wb), r.str(b, "file", wb), r.u64(b, "offset", wb), r.u64(b, "bytes", wb)});
      }
    for (const auto& i : r.array(t, "items", w)) {
      const std::string wi = w + ".items[" + std::to_string(pt.items.size()) + "]";
      plan_item& it = pt.items.emplace_back();
      it.name = r.str(i, "name", wi);
      it.source_name = r.str(i, "source_name", wi);
      it.to = r.type(i, "dtype", wi);
      it.from = r.type(i, "source_dtype", wi);
      it.dims = r.ints(r.at(i, "dims", wi), wi + ".dims");
      it.scalar = r.flag(i, "scalar", wi);
      it.bytes = r.u64(i, "bytes", wi);
      it.source_bytes = r.u64(i, "source_bytes", wi);
      it.own_rank_bytes = r.u64(i, "own_rank_bytes", wi);
      it.file = static_cast<std::size_t>(r.u64(i, "file", wi));
      const bool copy = i.contains("copy"), slice = i.contains("slice");
      if (copy == slice) r.fail(wi, "needs exactly one of 'copy' and 'slice'");
      if (copy) {
        const auto& c = r.at(i, "copy", wi);
        it.raw = true;
        it.source_rank = r.i64(c, "rank", wi + ".copy");
        for (const auto& g : r.array(c, "ranges", wi + ".copy")) {
          const auto pair = r.ints(g, wi + ".copy.ranges");
          if (pair.size() != 2 || pair[0] < 0 || pair[1] < 0) r.fail(wi + ".copy.ranges", "not [offset, bytes] pairs");
          it.stored.push_back({static_cast<std::uint64_t>(pair[0]), static_cast<std::uint64_t>(pair[1])});
        }
      } else {
        const auto& s = r.at(i, "slice", wi);
        it.target = r.get_box(r.at(s, "box", wi + ".slice"), wi + ".slice.box");
        for (const auto& x : r.array(s, "transfers", wi + ".slice")) {
          const std::string wx = wi + ".slice.transfers[" + std::to_string(it.transfers.size()) + "]";
          plan_transfer& pt2 = it.transfers.emplace_back();
          pt2.rank = r.i64(x, "rank", wx);
          pt2.where = r.get_box(x, wx);
          pt2.bytes = r.u64(x, "bytes", wx);
          // plans of the first version 2 repeated the sender's box per transfer: it must be the
          // source table's
          if (x.is_object() && x.contains("held")) {
            const box held = r.get_box(x.at("held"), wx + ".held");
            const auto by_rank = p.holds.find(it.source_name);
            const box* table = by_rank == p.holds.end() ? nullptr : held_box(by_rank->second, pt2.rank, pt2.where);
            if (table && *table != held)
              r.fail(wx + ".held", "is " + to_string(held) + ", the source table says " + to_string(*table));
          }
        }
      }
    }
  }
  p.bytes_read = r.u64(j, "bytes_read", "the plan");
  p.bytes_written = r.u64(j, "bytes_written", "the plan");
  p.cross_bytes = r.u64(j, "cross_rank_bytes", "the plan");
  p.lower_bound_bytes = r.u64(j, "lower_bound_bytes", "the plan");
  p.jobs = static_cast<unsigned>(std::min<std::uint64_t>(r.u64(j, "jobs", "the plan"), 1u << 16));
  p.buffer_bytes = r.u64(j, "buffer_bytes", "the plan");
  p.peak_memory_bound = r.u64(j, "peak_memory_bound_bytes", "the plan");
  for (const auto& w : r.array(j, "warnings", "the plan")) {
    if (!w.is_string()) r.fail("warnings", "not an array of strings");
    p.warnings.push_back(w.get<std::string>());
  }
  for (const auto& c : r.array(j, "casts", "the plan"))
    p.casts.push_back({r.str(c, "name", "casts"), r.type(c, "from", "casts"), r.type(c, "to", "casts")});
  const auto& ck = r.at(j, "ckpt", "the plan");
  p.crc = r.flag(ck, "crc", "ckpt");
  p.chunk_bytes = r.u64(ck, "chunk_bytes", "ckpt");
  if (j.contains("dcp")) {
    const std::string torch = r.str(r.at(j, "dcp", "the plan"), "torch", "dcp");
    if (torch != "1.13" && torch != "2") r.fail("dcp.torch", "'" + torch + "' is not 1.13 or 2");
    p.dcp_torch = torch == "1.13" ? dcp_layout::torch_1_13 : dcp_layout::torch_2;
  }
  return p;
}

/// Everything that is wrong with `p` as a plan, from the plan alone (see the header comment);
/// empty for a plan to_json wrote from a run. Each problem names the target, the parameter and
/// the box; at most `max_problems` are listed.
inline std::vector<std::string> checkpoint_plan_problems(const checkpoint_plan& p, std::size_t max_problems = 20) {
  std::vector<std::string> out;
  const auto add = [&](std::string s) {
    if (out.size() < max_problems) out.push_back(std::move(s));
  };
  // The messages name the target, the parameter and the transfer; they are built only for a
  // problem (the check runs before every execution of a plan, over every item).
  std::vector<std::string_view> names;  // a target's output names, sorted: one written twice
  for (const plan_target& t : p.targets) {
    const auto wt = [&] { return "target rank " + std::to_string(t.rank) + " (" + t.path.string() + ")"; };
    const std::size_t files = t.files.size();
    std::size_t data_files = files;
    if (t.format == checkpoint_format::hf && files > 1) data_files = files - 1;  // the index
    if (files == 0 || (t.format != checkpoint_format::hf && files != 1)) add(wt() + ": " + std::to_string(files) + " files for the format " + std::string(to_string(t.format)));
    if (t.format == checkpoint_format::hf && files == 2) add(wt() + ": a sharded Hugging Face checkpoint of one shard");
    if (t.items.empty() && t.format != checkpoint_format::dcp) add(wt() + ": no items");  // DCP: a rank's boxes may all be stored by lower ranks
    names.clear();
    for (const plan_item& it : t.items) names.push_back(it.name);
    std::sort(names.begin(), names.end());
    for (auto twice = std::adjacent_find(names.begin(), names.end()); twice != names.end();
         twice = std::adjacent_find(std::upper_bound(twice, names.end(), *twice), names.end()))
      add(wt() + ": parameter " + detail::quote_name(*twice) + ": written twice");
    std::size_t last_file = 0;
    for (const plan_item& it : t.items) {
      const auto wi = [&] { return wt() + ": parameter " + detail::quote_name(it.name); };
      if (it.file >= data_files) add(wi() + ": in file " + std::to_string(it.file) + " of " + std::to_string(data_files));
      if (it.file < last_file) add(wi() + ": out of file order");
      last_file = std::max(last_file, it.file);
      const std::uint64_t in = element_size(it.from), on = element_size(it.to);
      if (it.source_bytes % in != 0 || it.bytes != it.source_bytes / in * on)
        add(wi() + ": " + std::to_string(it.bytes) + " bytes written for " + std::to_string(it.source_bytes) +
            " read (" + std::string(ms_name(it.from)) + " to " + std::string(ms_name(it.to)) + ")");
      if (it.own_rank_bytes > it.source_bytes) add(wi() + ": more bytes on its own rank than it reads");
      if (it.raw) {
        std::uint64_t stored = 0;
        for (const auto& g : it.stored) stored += g.bytes;
        if (stored != it.source_bytes) add(wi() + ": stored ranges of " + std::to_string(stored) + " bytes for " + std::to_string(it.source_bytes));
        if (!p.sources.count(it.source_rank)) add(wi() + ": copied from source rank " + std::to_string(it.source_rank) + ", which the plan does not read");
        if (!it.transfers.empty()) add(wi() + ": a copy with transfers");
        continue;
      }
      const box& tb = it.target;
      if (static_cast<std::uint64_t>(volume(tb)) * in != it.source_bytes)
        add(wi() + ": the box " + to_string(tb) + " is not " + std::to_string(it.source_bytes) + " bytes");
      if (!it.scalar && !std::equal(it.dims.begin(), it.dims.end(), tb.extent.begin(), tb.extent.end()))
        add(wi() + ": dims " + detail::format_dims(it.dims) + " are not the box " + to_string(tb));
      const auto holds = p.holds.find(it.source_name);  // what each sender's file holds of it
      std::uint64_t covered = 0;
      for (std::size_t k = 0; k < it.transfers.size(); ++k) {
        const plan_transfer& x = it.transfers[k];
        const auto wx = [&] { return wi() + ": transfer " + to_string(x.where) + " from source rank " + std::to_string(x.rank); };
        if (x.where.offset.size() != tb.offset.size()) {
          add(wx() + ": of another rank than the box " + to_string(tb));
          continue;
        }
        if (intersect(x.where, tb) != x.where) add(wx() + ": outside the target box " + to_string(tb));
        if (static_cast<std::uint64_t>(volume(x.where)) * in != x.bytes) add(wx() + ": not " + std::to_string(x.bytes) + " bytes");
        const box* held = holds == p.holds.end() ? nullptr : held_box(holds->second, x.rank, x.where);
        if (!p.sources.count(x.rank))
          add(wx() + ": the plan does not read source rank " + std::to_string(x.rank));
        else if (!held)
          add(wx() + ": the file of source rank " + std::to_string(x.rank) + " does not hold the parameter");
        else if (held->offset.size() != tb.offset.size())
          add(wx() + ": its sender holds " + to_string(*held) + ", of another rank than the box " + to_string(tb));
        else if (intersect(x.where, *held) != x.where)
          add(wx() + ": outside the box its file holds, " + to_string(*held));
        covered += static_cast<std::uint64_t>(volume(intersect(x.where, tb)));
      }
      if (const auto twice = detail::first_overlap(it.transfers))
        add(wi() + ": the transfers " + to_string(it.transfers[twice->first].where) + " from source rank " +
            std::to_string(it.transfers[twice->first].rank) + " and " + to_string(it.transfers[twice->second].where) +
            " from source rank " + std::to_string(it.transfers[twice->second].rank) + " overlap (" +
            to_string(intersect(it.transfers[twice->first].where, it.transfers[twice->second].where)) +
            " brought twice)");
      if (covered != static_cast<std::uint64_t>(volume(tb)))
        add(wi() + ": the transfers bring " + std::to_string(covered) + " of the " + std::to_string(volume(tb)) +
            " elements of the box " + to_string(tb));
    }
  }
  for (const auto& [name, by_rank] : p.holds)  // held_box searches them
    for (std::size_t k = 1; k < by_rank.size(); ++k)
      if (!detail::rank_box_before(by_rank[k - 1], by_rank[k])) {
        add("the boxes held of " + detail::quote_name(name) + ": source rank " + std::to_string(by_rank[k].first) +
            (by_rank[k - 1] == by_rank[k] ? ": a box twice" : ": out of order"));
        break;
      }
  const plan_totals sums = totals_of(p);  // the items' sums, without copying the plan
  if (sums.bytes_read != p.bytes_read || sums.bytes_written != p.bytes_written || sums.cross_bytes != p.cross_bytes ||
      sums.lower_bound_bytes != p.lower_bound_bytes)
    add("the totals are not the sums of the items (bytes_read " + std::to_string(p.bytes_read) + ", the items " +
        std::to_string(sums.bytes_read) + "; bytes_written " + std::to_string(p.bytes_written) + ", the items " +
        std::to_string(sums.bytes_written) + ")");
  for (const auto& [r, s] : p.sources) {
    const auto it = sums.reads.find(r);
    if ((it == sums.reads.end() ? 0 : it->second) != s.bytes_read)
      add("source rank " + std::to_string(r) + ": bytes_read " + std::to_string(s.bytes_read) + ", the items read " +
          std::to_string(it == sums.reads.end() ? 0 : it->second));
  }
  return out;
}

/// Throws a reshard::error listing what is wrong with `p` (checkpoint_plan_problems), after
/// `who` ("execute: plan.json").
inline void check_checkpoint_plan(const checkpoint_plan& p, const std::string& who) {
  const auto problems = checkpoint_plan_problems(p, 10);
  if (problems.empty()) return;
  std::string m = who + ": the plan does not add up (" + std::to_string(problems.size()) +
                  (problems.size() == 10 ? "+" : "") + " problem" + (problems.size() == 1 ? "" : "s") + "):";
  for (const auto& s : problems) m += "\n  " + s;
  report_error(m);
}

/// Splits the target ranks 0 .. bytes.size()-1 among `parts` workers, balanced by bytes
/// (bytes[t]: what rank t gets), each worker a contiguous run of ranks, in worker order: rank t
/// goes to worker floor(parts * (B_t + bytes[t] / 2) / total), B_t the bytes of the ranks before
/// t (the worker whose slice of [0, total) holds the middle of t's bytes; all bytes 0: every rank
/// counts 1). So every worker's bytes differ from total / parts by less than the largest rank's
/// (law E9 in docs/laws.md), and neighbouring targets, which read neighbouring source files,
/// share a worker, which then opens fewer source files than a deal of the targets would give it
/// (docs/scaling.md). Deterministic, so every process computes the same split. Each worker's ranks
/// ascending; with fewer ranks than workers some get none.
inline std::vector<std::vector<std::int64_t>> balance_targets(std::span<const std::uint64_t> bytes,
                                                              std::size_t parts) {
  if (parts == 0) report_error("balance_targets: parts is 0 (at least one worker is needed)");
  __extension__ typedef unsigned __int128 wide;  // parts * 2 * total needs more than 64 bits
  wide total = 0;
  for (auto b : bytes) total += b;
  const bool count = total == 0;  // no bytes: balanced by count
  if (count) total = bytes.size();
  std::vector<std::vector<std::int64_t>> out(parts);
  wide before = 0;
  for (std::size_t t = 0; t < bytes.size(); ++t) {
    const wide b = count ? 1 : bytes[t];
    const wide k = (2 * before + b) * parts / (2 * total);
    out[static_cast<std::size_t>(std::min<wide>(k, parts - 1))].push_back(static_cast<std::int64_t>(t));
    before += b;
  }
  return out;
}

/// Which part of `parts` each target of `p` belongs to: balance_targets of the targets' bytes
/// written (their position in the plan standing for the rank). Deterministic: every process that
/// reads the same plan computes the same parts.
inline std::vector<std::size_t> plan_part_of_targets(const checkpoint_plan& p, std::size_t parts) {
  RESHARD_EXPECTS(parts >= 1, "plan_part_of_targets: at least one part");
  std::vector<std::uint64_t> bytes;
  bytes.reserve(p.targets.size());
  for (const auto& t : p.targets) bytes.push_back(totals_of(t).bytes_written);
  std::vector<std::size_t> of(p.targets.size(), 0);
  const auto shares = balance_targets(bytes, parts);
  for (std::size_t k = 0; k < shares.size(); ++k)
    for (std::int64_t i : shares[k]) of[static_cast<std::size_t>(i)] = k;
  return of;
}

/// The part of `p` whose targets are those i with of[i] == index (`of`: plan_part_of_targets), in
/// the plan's order: the sources they read, the senders' boxes and the casts of their items, and
/// the totals summed again.
inline checkpoint_plan plan_part(const checkpoint_plan& p, const std::vector<std::size_t>& of, std::size_t index) {
  RESHARD_EXPECTS(of.size() == p.targets.size(), "plan_part: one part index per target");
  checkpoint_plan q;  // every field of p but those that follow the targets (targets, holds, casts)
  q.sources = p.sources;
  q.jobs = p.jobs;
  q.buffer_bytes = p.buffer_bytes;
  q.peak_memory_bound = p.peak_memory_bound;
  q.warnings = p.warnings;
  q.crc = p.crc;
  q.chunk_bytes = p.chunk_bytes;
  q.dcp_torch = p.dcp_torch;
  // a PyTorch DCP directory this part writes any of is not cut (check_whole_dcp_target)
  std::set<std::filesystem::path> dcp_dirs;
  for (std::size_t i = 0; i < p.targets.size(); ++i) {
    const plan_target& t = p.targets[i];
    if (t.format != checkpoint_format::dcp || of[i] != index || !dcp_dirs.insert(t.path).second) continue;
    std::vector<std::vector<dcp_run_target>> parts(1 + *std::max_element(of.begin(), of.end()));
    index_t ranks = 0;
    for (std::size_t k = 0; k < p.targets.size(); ++k)
      if (p.targets[k].format == checkpoint_format::dcp && p.targets[k].path == t.path)
        parts[of[k]].push_back({p.targets[k].rank, t.path}), ++ranks;
    check_whole_dcp_target("plan part " + std::to_string(index + 1), t.path, ranks, parts, "parts",
                           "run it without --part, or with one process");
  }
  std::set<std::string_view> names;
  for (std::size_t i = 0; i < p.targets.size(); ++i) {
    if (of[i] != index) continue;
    const plan_target& t = q.targets.emplace_back(p.targets[i]);
    for (const auto& it : t.items) {
      names.insert(it.name);
      if (it.transfers.empty()) continue;
      const auto holds = p.holds.find(it.source_name);
      if (holds == p.holds.end()) continue;  // a plan with a problem: check_checkpoint_plan says so
      auto& mine = q.holds[it.source_name];
      for (const auto& x : it.transfers)
        if (const box* h = held_box(holds->second, x.rank, x.where)) mine.emplace_back(x.rank, *h);
    }
  }
  for (auto& [name, by_rank] : q.holds) sort_by_rank(by_rank);
  sum_plan(q, [](index_t) { return std::filesystem::path(); });  // every source read is listed in p
  for (const auto& c : p.casts)
    if (names.count(c.name)) q.casts.push_back(c);
  return q;
}

/// Part `index` of `parts` (0-based) of `p` (plan_part_of_targets). The parts are disjoint and
/// together hold every target. To cut all the parts, deal once and call the overload above.
inline checkpoint_plan plan_part(const checkpoint_plan& p, std::size_t index, std::size_t parts) {
  if (parts == 0 || index >= parts)
    report_error("plan part " + std::to_string(index + 1) + "/" + std::to_string(parts) +
                 ": a part is I/K with 1 <= I <= K");
  return plan_part(p, plan_part_of_targets(p, parts), index);
}

}  // namespace reshard::io
