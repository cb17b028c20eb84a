// reshard/io/strategy_layouts.hpp: a MindSpore strategy file as reshard layouts. strategy_layouts
// resolves a strategy (JSON or protobuf, read with read_strategy) by parameter, one layout per
// pipeline stage; to_layout turns a stored layout and a full shape into a reshard::layout. A
// strategy whose every parameter name is "<stage>-<name>" (merge_pipeline_strategies) is a
// pipeline strategy: stage s lives on global ranks s*n .. s*n+n-1, n the devices of one stage.
// An empty path means no strategy: every parameter unsplit on one rank (MindSpore's None).
#pragma once

#include <reshard/box.hpp>
#include <reshard/error.hpp>
#include <reshard/layout.hpp>
#include <reshard/plan.hpp>
#include <reshard/io/detail/text.hpp>
#include <reshard/io/strategy.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace reshard::io {

/// The replica policy of checkpoint transforms (the parameter catalogue's planners and
/// rank_list_for_transform): a target reads a replicated slice from the source rank nearest to
/// it (of those below N, whose files are base files, if any holds it), so that a run of target ranks (a process's part under MPI) opens few files beyond its own
/// ranks'; the load per source file stays within twice round robin's (plan.hpp).
inline constexpr replica_policy transform_replica_policy = replica_policy::nearest;

// ---------------------------------------------------------------------------------------------
// strategies as layouts

/// One layout of a parameter in a strategy, with the pipeline stage it belongs to.
struct staged_layout {
  std::uint32_t stage = 0;
  param_layout stored;
  friend bool operator==(const staged_layout&, const staged_layout&) = default;
};

/// A strategy file resolved by parameter: for each original parameter name its layouts, one per
/// pipeline stage that holds it (ascending). Default-constructed = no strategy: every parameter
/// unsplit on one rank.
class strategy_layouts {
 public:
  strategy_layouts() = default;

  /// Reads `file`; an empty path is no strategy.
  explicit strategy_layouts(const std::filesystem::path& file) {
    if (file.empty()) return;
    *this = strategy_layouts(read_strategy(file), file.string());
  }

  /// Resolves `s`; `source` names it in messages.
  strategy_layouts(const strategy_file& s, std::string source) : source_(std::move(source)), present_(true) {
    const std::string prefix = "strategy: " + source_ + ": ";
    pipeline_ = !s.layouts.empty() && std::all_of(s.layouts.begin(), s.layouts.end(), [](const auto& l) {
      return split_pipeline_name(l.first).has_value();
    });
    std::string first;
    for (const auto& [merged, l] : s.layouts) {
      std::uint32_t stage = 0;
      std::string name = merged;
      if (pipeline_) {
        const auto p = *split_pipeline_name(merged);
        stage = p.stage;
        name = std::string(p.name);
      }
      index_t n = 1;
      for (auto d : l.dev_matrix) {
        if (d < 1) report_error(prefix + "parameter " + detail::quote_name(merged) + ": device matrix " +
                                detail::format_dims(l.dev_matrix) + " has an axis of size " + std::to_string(d));
        if (n > (index_t{1} << 31) / d)
          report_error(prefix + "parameter " + detail::quote_name(merged) + ": device matrix " +
                       detail::format_dims(l.dev_matrix) + " has more than 2^31 devices");
        n *= d;
      }
      if (l.dev_matrix.empty())
        report_error(prefix + "parameter " + detail::quote_name(merged) + ": empty device matrix");
      if (first.empty()) {
        first = merged;
        stage_ranks_ = n;
      } else if (n != stage_ranks_) {
        report_error(prefix + "parameter " + detail::quote_name(merged) + " has a device matrix of " +
                     std::to_string(n) + " devices " + detail::format_dims(l.dev_matrix) + ", but parameter " +
                     detail::quote_name(first) + " has " + std::to_string(stage_ranks_) +
                     " (the layouts of one pipeline stage cover the same devices)");
      }
      stages_ = std::max<index_t>(stages_, index_t{stage} + 1);
      auto [it, fresh] = by_name_.try_emplace(name);
      if (fresh) names_.push_back(name);
      for (const auto& e : it->second)
        if (e.stage == stage)
          report_error(prefix + "parameter " + detail::quote_name(name) + " has two layouts for stage " +
                       std::to_string(stage));
      it->second.push_back({stage, l});
      std::sort(it->second.begin(), it->second.end(), [](const auto& a, const auto& b) { return a.stage < b.stage; });
    }
    if ((index_t{1} << 31) / stage_ranks_ < stages_)
      report_error(prefix + std::to_string(stages_) + " pipeline stages of " + std::to_string(stage_ranks_) +
                   " devices exceed 2^31 ranks");
  }

  /// False for "no strategy".
  bool present() const noexcept { return present_; }
  /// The file it was read from ("" for none).
  const std::string& source() const noexcept { return source_; }
  /// Parameter names were "<stage>-<name>" (a merged pipeline strategy).
  bool pipeline() const noexcept { return pipeline_; }
  /// Devices of one pipeline stage (1 for none).
  index_t stage_ranks() const noexcept { return stage_ranks_; }
  /// Number of stages: the highest stage + 1 (1 for none).
  index_t stages() const noexcept { return stages_; }
  /// All ranks: stages() * stage_ranks() (1 for none).
  index_t ranks() const noexcept { return stages_ * stage_ranks_; }
  /// The stage global rank `rank` belongs to.
  std::uint32_t stage_of(index_t rank) const noexcept { return static_cast<std::uint32_t>(rank / stage_ranks_); }
  /// Original parameter names, in file order of their first layout.
  const std::vector<std::string>& names() const noexcept { return names_; }
  /// The layouts of parameter `name` (ascending stage), or null if the strategy does not list it.
  const std::vector<staged_layout>* find(std::string_view name) const {
    auto it = by_name_.find(std::string(name));
    return it == by_name_.end() ? nullptr : &it->second;
  }

 private:
  std::string source_;
  bool present_ = false;
  bool pipeline_ = false;
  index_t stage_ranks_ = 1;
  index_t stages_ = 1;
  std::vector<std::string> names_;
  std::unordered_map<std::string, std::vector<staged_layout>> by_name_;
};

namespace detail {

// Slices of each dim (product of the splitting device axes), and the optimizer-sharding parts
// of dim 0, of a stored layout; `who` prefixes errors.
struct stored_counts {
  std::vector<index_t> slices;
  index_t opt_parts = 1;
};

inline stored_counts counts_of(const param_layout& pl, const std::string& who) {
  const auto nd = static_cast<index_t>(pl.dev_matrix.size());
  stored_counts c;
  std::vector<char> used(pl.dev_matrix.size(), 0);
  for (std::size_t i = 0; i < pl.tensor_map.size(); ++i) {
    index_t s = 1;
    for (auto a : pl.tensor_map[i]) {
      if (a == -1 && pl.tensor_map[i].size() == 1) break;
      if (a < 0 || a >= nd)
        report_error(who + "tensor_map[" + std::to_string(i) + "] names device axis " + std::to_string(a) +
                     ", out of range for device matrix " + format_dims(pl.dev_matrix) + " (valid: -1 or 0.." +
                     std::to_string(nd - 1) + ")");
      const auto axis = static_cast<std::size_t>(nd - 1 - a);
      used[axis] = 1;
      s *= pl.dev_matrix[axis];
    }
    c.slices.push_back(s);
  }
  const index_t size = pl.opt_weight_shard_size;
  if (size < -1) report_error(who + "opt_weight_shard_size " + std::to_string(size) + " is negative");
  if (size == -1) {
    for (std::size_t a = 0; a < used.size(); ++a)
      if (!used[a]) c.opt_parts *= pl.dev_matrix[a];
  } else if (size > 1) {
    c.opt_parts = size;
  }
  return c;
}

inline void check_supported(const param_layout& pl, const std::string& who) {
  if (pl.field != 0)
    report_error(who + "field " + std::to_string(pl.field) +
                 " (MindSpore's embedding field split) is not supported");
  if (!pl.indices_offset.empty()) {
    // MindSpore records the start row of each manual slice beside param_split_shape; offsets that
    // say exactly that are redundant, any other offsets are not supported.
    std::vector<std::int64_t> starts;
    std::int64_t at = 0;
    for (auto v : pl.param_split_shape) starts.push_back(at), at += v;
    if (starts != pl.indices_offset)
      report_error(who + "indices_offset " + format_dims(pl.indices_offset) +
                   " is not supported (only the start rows of param_split_shape " +
                   format_dims(pl.param_split_shape) + " are)");
  }
}

}  // namespace detail

/// The layout of a parameter stored as `pl` with full shape `shape`, on pipeline stage `stage`.
/// `who` ("strategy: f.ckpt: parameter 'w'") prefixes errors. Refuses what reshard does not
/// support: field != 0 (embedding field split) and indices_offset other than the start rows of
/// param_split_shape.
inline layout to_layout(const param_layout& pl, const index_list& shape, index_t stage, const std::string& who) {
  const std::string w = who + ": ";
  detail::check_supported(pl, w);
  if (pl.tensor_map.size() != shape.size())
    report_error(w + "tensor_map has " + std::to_string(pl.tensor_map.size()) + " entries but the tensor has " +
                 std::to_string(shape.size()) + " dims (shape " + to_string(shape) + ")");
  tensor_map map;
  for (const auto& axes : pl.tensor_map) {
    if (axes.size() == 1)
      map.emplace_back(static_cast<index_t>(axes[0]));
    else
      map.emplace_back(std::vector<index_t>(axes.begin(), axes.end()));
  }
  mindspore_options o;
  o.opt = {pl.opt_weight_shard_step, pl.opt_weight_shard_size};
  o.stage = stage;
  o.param_split_shape = index_list(pl.param_split_shape.begin(), pl.param_split_shape.end());
  o.name = who;
  return mindspore_layout(index_list(pl.dev_matrix.begin(), pl.dev_matrix.end()), map, shape, o);
}

/// Checks that the tensor_shape of a target layout `pl` (JSON strategies; empty: none) is the
/// full shape `shape` the source gives the parameter (`from`: where that shape was read).
/// `who` ("strategy: f.json: parameter 'w'") prefixes errors.
inline void check_tensor_shape(const param_layout& pl, const index_list& shape,
                               const std::string& who, const std::string& from) {
  if (!pl.tensor_shape.empty() &&
      index_list(pl.tensor_shape.begin(), pl.tensor_shape.end()) != shape)
    report_error(who + ": tensor_shape " + detail::format_dims(pl.tensor_shape) +
                 " disagrees with the source's full shape " + to_string(shape) + " (from " + from +
                 ")");
}

/// The full shape of a parameter stored as `pl` whose slice on some rank has dims `slice_dims`:
/// each dim times its slice count, dim 0 also times the optimizer-sharding parts, or dim 0 the
/// sum of param_split_shape when given. `who` prefixes errors.
inline index_list full_shape_from_slice(const param_layout& pl, std::span<const std::int64_t> slice_dims,
                                     const std::string& who) {
  const std::string w = who + ": ";
  detail::check_supported(pl, w);
  if (pl.tensor_map.size() != slice_dims.size())
    report_error(w + "tensor_map has " + std::to_string(pl.tensor_map.size()) +
                 " entries but the checkpoint's slice has " + std::to_string(slice_dims.size()) + " dims " +
                 detail::format_dims(slice_dims));
  const auto c = detail::counts_of(pl, w);
  index_list full;
  for (std::size_t i = 0; i < slice_dims.size(); ++i) {
    index_t f = slice_dims[i] * c.slices[i];
    if (i == 0) f = pl.param_split_shape.empty()
                        ? f * c.opt_parts
                        : std::accumulate(pl.param_split_shape.begin(), pl.param_split_shape.end(), index_t{0});
    full.push_back(f);
  }
  return full;
}

namespace detail {

// The layout in which a target rank gets a parameter that the target strategy does not slice:
// the whole tensor on each of the N target ranks, i.e. replicated over them. The engine and
// rank_list_for_transform both plan with it, so the replicas a whole tensor is read from are
// spread over the targets by the one replica policy.
inline layout whole_on_targets(const index_list& shape, index_t n) {
  layout l = full_layout(shape);
  l.dev_matrix = {n};
  return l;
}

inline index_t lcm_of(index_t a, index_t b) { return a / std::gcd(a, b) * b; }

// A full shape for which both stored layouts are valid, when no checkpoint says the real one:
// JSON's tensor_shape if given, else per dim the lcm of both sides' slice counts (dim 0 times the
// optimizer parts, or the sum of param_split_shape). The overlaps of the two layouts' slices,
// hence the rank lists, do not depend on which such shape is taken.
inline index_list probe_shape(const param_layout& s, const param_layout* d, const std::string& who_s,
                           const std::string& who_d) {
  if (!s.tensor_shape.empty()) return index_list(s.tensor_shape.begin(), s.tensor_shape.end());
  if (d && !d->tensor_shape.empty()) return index_list(d->tensor_shape.begin(), d->tensor_shape.end());
  check_supported(s, who_s + ": ");
  const auto cs = counts_of(s, who_s + ": ");
  index_list shape;
  for (std::size_t i = 0; i < cs.slices.size(); ++i) shape.push_back(cs.slices[i] * (i == 0 ? cs.opt_parts : 1));
  if (d) {
    check_supported(*d, who_d + ": ");
    const auto cd = counts_of(*d, who_d + ": ");
    if (cd.slices.size() != cs.slices.size())
      report_error(who_d + ": tensor_map has " + std::to_string(cd.slices.size()) + " entries, the source's has " +
                   std::to_string(cs.slices.size()));
    for (std::size_t i = 0; i < shape.size(); ++i)
      shape[i] = lcm_of(shape[i], cd.slices[i] * (i == 0 ? cd.opt_parts : 1));
  }
  const auto sum = [](const std::vector<std::int64_t>& v) { return std::accumulate(v.begin(), v.end(), index_t{0}); };
  if (!s.param_split_shape.empty()) shape[0] = sum(s.param_split_shape);
  if (d && !d->param_split_shape.empty()) {
    if (!s.param_split_shape.empty() && sum(d->param_split_shape) != shape[0])
      report_error(who_d + ": param_split_shape " + format_dims(d->param_split_shape) + " sums to " +
                   std::to_string(sum(d->param_split_shape)) + ", the source's " + format_dims(s.param_split_shape) +
                   " to " + std::to_string(shape[0]));
    shape[0] = sum(d->param_split_shape);
  }
  return shape;
}

}  // namespace detail

}  // namespace reshard::io
