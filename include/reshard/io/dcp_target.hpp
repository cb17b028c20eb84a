// reshard/io/dcp_target.hpp: what the engine (engine.hpp, transform_job) does apart for a PyTorch
// DCP target (checkpoint_format::dcp), in one place beside the DCP writer (dcp_writer.hpp). The
// job holds one dcp_target_policy and calls each step once:
//   check_targets       every target rank once, into one directory (check_whole_dcp_target)
//   outputs             the files it writes: `__<rank>_0.distcp` per target rank, `.metadata`
//   byte_item_warnings  a DCP source's byte items that the targets leave out, named
//   finish_plan         every item checked (check_dcp_item), a replicated chunk kept by the
//                       lowest rank only (dedup_dcp_chunks), the torch `.metadata` names, and a
//                       DCP source's byte items copied by the lowest target rank
//   verify_metadata     `.metadata` on disk against the plan's (dcp_metadata_of)
// Off (another format), every step does nothing.
#pragma once

#include <reshard/error.hpp>
#include <reshard/layout.hpp>
#include <reshard/io/checkpoint.hpp>
#include <reshard/io/checkpoint_plan.hpp>
#include <reshard/io/dcp.hpp>
#include <reshard/io/dcp_writer.hpp>
#include <reshard/io/execute.hpp>
#include <reshard/io/param_catalogue.hpp>
#include <reshard/io/summary.hpp>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

namespace reshard::io::detail {

/// The DCP target's steps of a transform_job (see the header comment).
class dcp_target_policy {
 public:
  /// `on`: the targets are one DCP directory; `torch`: the module paths of its `.metadata`;
  /// `renames`: name rules are given (--include, --exclude, --rename), under which a DCP
  /// source's byte items are not copied yet.
  dcp_target_policy(bool on, dcp_layout torch, bool renames) noexcept : on_(on), torch_(torch), renames_(renames) {}

  bool on() const noexcept { return on_; }

  /// Every target rank of `ranks`, once, into one directory (check_whole_dcp_target).
  void check_targets(const std::vector<transform_target>& targets, index_t ranks, const std::string& op) const {
    if (!on_ || targets.empty()) return;
    std::vector<dcp_run_target> mine;
    for (const auto& t : targets) mine.push_back({t.rank, t.path});
    check_whole_dcp_target(op, targets.front().path, ranks, {mine}, "runs",
                           "write it in one run of every target rank, not by rank");
  }

  /// The files the targets write into their directory: each rank's data file, and `.metadata`.
  std::vector<output_path> outputs(const std::vector<transform_target>& targets) const {
    std::vector<output_path> out;
    if (!on_) return out;
    for (const auto& t : targets) {
      out.push_back({t.path / dcp_data_file_name(t.rank), false});
      if (&t == &targets.front()) out.push_back({dcp_metadata_path(t.path), false});
    }
    return out;
  }

  /// The warning naming a DCP source's byte items the targets leave out: all but DCP files
  /// without name rules (which copy them, finish_plan). `other`: what the targets are when not
  /// DCP files ("tensors in memory", "ckpt or safetensors files", ...); empty: DCP files.
  std::vector<std::string> byte_item_warnings(const dcp_source& src, const std::string& other) const {
    if (!other.empty()) return src.byte_item_warnings(other);
    if (copies_byte_items()) return {};
    return src.byte_item_warnings("a PyTorch DCP checkpoint under --include, --exclude or --rename (not copied yet)");
  }

  /// The plan's DCP steps, after its items are placed and before its totals are summed: each
  /// item checked, a box several ranks hold kept by the lowest, the torch of `.metadata`, and
  /// (`src`: a DCP source) its byte items, stored by the lowest target rank.
  void finish_plan(checkpoint_plan& pl, const dcp_source* src, const std::string& op) const {
    if (!on_) return;
    for (const auto& t : pl.targets)
      for (const auto& it : t.items) check_dcp_item(it, op);
    dedup_dcp_chunks(pl);
    pl.dcp_torch = torch_;
    if (!src || !copies_byte_items() || pl.targets.empty()) return;
    plan_target& low = *std::min_element(pl.targets.begin(), pl.targets.end(),
                                         [](const plan_target& a, const plan_target& b) { return a.rank < b.rank; });
    for (const auto& b : src->metadata->byte_items)
      low.byte_items.push_back({b.fqn, src->dir / b.storage.relative_path, b.storage.offset, b.storage.length});
  }

  /// The targets' `.metadata` against the plan's (dcp_metadata_of): the same tensors, chunks,
  /// byte items and places, whichever torch's module paths it names; a difference, or a file
  /// that cannot be read, is a mismatch. Counts the file.
  void verify_metadata(const checkpoint_plan& pl, const std::vector<transform_target>& targets, verify_report& r) const {
    if (!on_ || targets.empty()) return;
    const std::filesystem::path& dir = targets.front().path;
    r.files += 1;
    try {
      const dcp_metadata got = read_dcp_metadata(dir), want = dcp_metadata_of(pl, dir, dcp_layout::torch_2);
      if (got.tensors != want.tensors)
        r.mismatches.push_back({dcp_metadata_path(dir), {}, "lists other tensors, chunks or places than the run writes"});
      if (got.byte_items != want.byte_items)
        r.mismatches.push_back({dcp_metadata_path(dir), {}, "lists other byte items than the run writes"});
    } catch (const reshard::error& e) {
      r.mismatches.push_back({dcp_metadata_path(dir), {}, std::string("cannot be read: ") + e.what()});
    }
  }

 private:
  bool copies_byte_items() const noexcept { return on_ && !renames_; }

  bool on_ = false;
  dcp_layout torch_ = dcp_layout::torch_2;
  bool renames_ = false;
};

}  // namespace reshard::io::detail
