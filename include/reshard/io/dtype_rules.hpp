// reshard/io/dtype_rules.hpp: which parameters a transform casts, and to which dtype, decided from
// the rules (dtype_rules: --dtype DTYPE | GLOB=DTYPE) and each parameter's name and source dtype
// alone. Pure functions, no files: the engine (engine.hpp) asks decide_cast for each parameter
// it writes, then check_cast_rules once; they are tested without checkpoints
// (verify/io/dtype_rules.cpp).
#pragma once

#include <reshard/error.hpp>
#include <reshard/io/cast.hpp>
#include <reshard/io/detail/glob.hpp>
#include <reshard/io/detail/text.hpp>
#include <reshard/io/dtype.hpp>

#include <cstddef>
#include <optional>
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

}  // namespace reshard::io
