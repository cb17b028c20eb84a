// reshard/io/dtype_rules.hpp: which parameters a transform casts, and to which dtype, decided from
// the rules (dtype_rules: --dtype DTYPE | GLOB=DTYPE) and each parameter's name and source dtype
// alone. Pure functions, no files: the engine (engine.hpp) asks decide_cast for each parameter
// it writes, then check_cast_rules once; they are tested without checkpoints
// (verify/io/dtype_rules.cpp). cast_decisions keeps one run's decisions (each parameter decided
// once, the rules' hits, the casts done, the parameters kept), for the planner.
#pragma once

#include <reshard/error.hpp>
#include <reshard/io/cast.hpp>
#include <reshard/io/checkpoint_plan.hpp>
#include <reshard/io/detail/glob.hpp>
#include <reshard/io/detail/text.hpp>
#include <reshard/io/dtype.hpp>

#include <algorithm>
#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace reshard::io {

/// Which parameters a transform casts to another dtype, and to which (cast.hpp gives the rounding
/// rules). A parameter whose source name matches a `named` glob (fnmatch(3), the first that
/// matches) is cast to that glob's dtype; any other floating-point parameter (Float16, BFloat16,
/// Float32, Float64) is cast to `all` if set; integer, Bool and str parameters keep their dtype
/// (the summary warns how many). Checked before anything is written: every glob must match a
/// parameter written, and a named cast that cast.hpp refuses (an integer parameter, a map tensor)
/// is an error. The casts run inside the copy engine: each chunk it assembles is cast as a whole,
/// while it is in the cache.
struct dtype_rules {
  std::optional<dtype> all;
  std::vector<std::pair<std::string, dtype>>
      named;  ///< (glob over the source name, dtype), in order
  bool empty() const noexcept { return !all && named.empty(); }
};

/// What dtype_rules decide for one parameter.
struct cast_decision {
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
  std::optional<dtype> to;  ///< the dtype written, when it differs from the source's
  std::size_t rule = npos;  ///< the `named` glob that matched it; npos: none
  bool kept = false;        ///< `all` is set, no glob matched, and it keeps its dtype (not floating
                            ///< point, or a map tensor)
};

/// The decision for parameter `name` of dtype `from` (`map_tensor`: a MindSpore map tensor, never
/// cast). A named cast that cast.hpp refuses is a reshard::error reading
/// `<where>: parameter '<name>' (dtype rule '<glob>'): <reason>`; `where` says where the dtype
/// was read (the engine: "<op>: <file>").
inline cast_decision decide_cast(const dtype_rules& r, std::string_view name, dtype from,
                                 bool map_tensor, const std::string& where) {
  cast_decision d;
  std::optional<dtype> to;
  for (std::size_t i = 0; i < r.named.size() && !to; ++i)
    if (detail::glob_matches(r.named[i].first, name)) {
      d.rule = i;
      to = r.named[i].second;
      const std::string who = where + ": parameter " + detail::quote_name(name) + " (dtype rule " +
                              detail::quote_name(r.named[i].first) + ")";
      if (map_tensor && *to != from) report_error(who + ": a map tensor is never cast");
      check_cast(from, *to, true, who);
    }
  if (!to && r.all) {
    if (is_floating(from) && !map_tensor)
      to = r.all;
    else
      d.kept = true;
  }
  if (to && *to != from) d.to = to;
  return d;
}

/// After every parameter was decided: `hits[i]`, the parameters `named[i]` matched, is 0 only
/// for a glob that matches no name of the sources either (`names()`: every parameter name of the
/// sources, asked only when a glob matched none written), else a reshard::error after `op`.
template <class Names>
void check_cast_rules(const dtype_rules& r, const std::vector<std::size_t>& hits, Names&& names,
                      const std::string& op) {
  std::optional<decltype(names())> all;
  for (std::size_t i = 0; i < r.named.size(); ++i) {
    if (i < hits.size() && hits[i] != 0) continue;
    if (!all) all.emplace(names());
    bool any = false;
    for (const auto& name : *all) any = any || detail::glob_matches(r.named[i].first, name);
    if (!any)
      report_error(op + ": dtype rule " + detail::quote_name(r.named[i].first) + "=" +
                   std::string(ms_name(r.named[i].second)) +
                   " matches no parameter of the sources (" + std::to_string(all->size()) +
                   " parameters; `reshard inspect` lists them)");
  }
}

/// The warning when `kept` (> 0) parameters keep their dtype under `all`, `example` one of them.
inline std::string kept_dtype_warning(std::size_t kept, std::string_view example, dtype all) {
  return std::to_string(kept) + (kept == 1 ? " parameter that is" : " parameters that are") +
         " not floating point (such as " + detail::quote_name(example) +
         (kept == 1 ? ") keeps its dtype: " : ") keep their dtype: ") + "the cast to " +
         std::string(ms_name(all)) +
         " applies to floating-point parameters only (name one with GLOB=DTYPE to cast it)";
}

/// One run's cast decisions: each parameter decided once (decide), the dtype it is written in
/// (type_of), and, once every parameter was decided, the rules checked and the casts done
/// (finish).
class cast_decisions {
 public:
  explicit cast_decisions(dtype_rules rules) : rules_(std::move(rules)), hits_(rules_.named.size(), 0) {}

  /// Decides parameter `name` (source name; written as `out_name`), of dtype `from`, read from
  /// `where` (a prefix for messages), once; later calls for the same name do nothing.
  void decide(std::string_view name, std::string_view out_name, dtype from, bool map_tensor, const std::string& where) {
    if (rules_.empty() || decided_.count(name)) return;
    decided_.emplace(name);
    const cast_decision d = decide_cast(rules_, name, from, map_tensor, where);
    if (d.rule != cast_decision::npos) ++hits_[d.rule];
    if (d.kept) ++kept_, kept_example_ = kept_example_.empty() ? std::string(name) : kept_example_;
    if (!d.to) return;
    to_.emplace(std::string(name), *d.to);
    records_.push_back({std::string(out_name), from, *d.to});
  }
  /// The dtype parameter `name` (of source dtype `from`) is written in.
  dtype type_of(std::string_view name, dtype from) const {
    if (to_.empty()) return from;
    const auto c = to_.find(name);
    return c == to_.end() ? from : c->second;
  }
  /// After every parameter was decided: check_cast_rules (`names()`: every parameter of the
  /// sources), the warning for parameters kept under a plain DTYPE, and the casts sorted by name.
  template <class Names>
  void finish(Names&& names, const std::string& op, std::vector<std::string>& warnings) {
    check_cast_rules(rules_, hits_, std::forward<Names>(names), op);
    if (kept_ > 0) warnings.push_back(kept_dtype_warning(kept_, kept_example_, *rules_.all));
    std::sort(records_.begin(), records_.end(), [](const cast_record& a, const cast_record& b) { return a.name < b.name; });
  }
  /// The parameters cast, by output name (after finish()).
  const std::vector<cast_record>& records() const noexcept { return records_; }

 private:
  dtype_rules rules_;  // a copy: the job that owns this may be moved
  std::vector<std::size_t> hits_;                   // per named glob: parameters matched
  std::set<std::string, std::less<>> decided_;
  std::map<std::string, dtype, std::less<>> to_;    // source name -> the dtype written (casts only)
  std::vector<cast_record> records_;
  std::size_t kept_ = 0;                            // not floating point: kept under rules.all
  std::string kept_example_;
};

}  // namespace reshard::io
