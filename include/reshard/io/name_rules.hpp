// reshard/io/name_rules.hpp: which parameters a transform writes, and under which names, decided
// from the rules (name_rules: --include, --exclude, --rename, --rename-map) and the names of the
// sources' parameters alone. Pure functions, no files: the engine (engine.hpp) gives them the
// names it read and writes what they decide; they are tested without checkpoints
// (verify/io/name_rules.cpp).
//
// The --rename regexes are RE2's (linear time in the name, no recursion: a name of any length
// and any pattern finish), matched over the name's bytes (Latin-1, as std::regex's char
// matching). The replacement keeps ECMAScript's format: `$1` .. `$99` a group, `$&` the match,
// `` $` `` and `$'` the text before and after it, `$$` a `$`; every match is replaced.
#pragma once

#include <reshard/error.hpp>
#include <reshard/io/detail/glob.hpp>
#include <reshard/io/detail/text.hpp>

#include <cstddef>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <re2/re2.h>

namespace reshard::io {

/// Which parameters a transform writes, and under which names (MindSpore's choice_func and
/// name_map). A parameter is written when it matches an `include` glob (or there is none) and no
/// `exclude` glob (fnmatch(3) patterns over the whole name: `*`, `?`, `[...]`). Its output name
/// is `rename_exact`'s entry for it, else the result of the first `rename` rule whose regex (RE2
/// syntax, see rename_regex) is found in it (every match replaced; `$1` in the replacement is the
/// first group), else its own. Checked before anything is written: every pattern, regex and
/// exact name must match a parameter of the sources, no two parameters may get the same name,
/// and with a target strategy every renamed parameter must be in it (under its new name).
struct name_rules {
  std::vector<std::string> include;
  std::vector<std::string> exclude;
  std::vector<std::pair<std::string, std::string>> rename;  ///< (regex, replacement), in order
  std::map<std::string, std::string> rename_exact;          ///< old name -> new name
  bool empty() const noexcept {
    return include.empty() && exclude.empty() && rename.empty() && rename_exact.empty();
  }
};

/// One rename rule compiled: an RE2 regex over a name's bytes and an ECMAScript-format
/// replacement. RE2 refuses what needs backtracking (backreferences such as `\1`, lookahead
/// `(?=`, lookbehind `(?<=`): the constructor reports RE2's reason, naming `op` and the rule.
/// Copies share the compiled regex (immutable, usable from several threads).
class rename_regex {
 public:
  rename_regex(const std::string& pattern, std::string replacement, const std::string& op)
      : replacement_(std::move(replacement)) {
    RE2::Options o;
    o.set_encoding(RE2::Options::EncodingLatin1);  // bytes, whatever the name's encoding
    o.set_log_errors(false);
    auto re = std::make_shared<const RE2>(pattern, o);
    if (!re->ok())
      report_error(
          op + ": rename " + detail::quote_name(pattern) +
          ": not a regular expression RE2 accepts (no backreferences, lookahead or lookbehind): " +
          re->error());
    re_ = std::move(re);
  }

  /// Is the regex found somewhere in `name`?
  bool found_in(std::string_view name) const {
    return RE2::PartialMatch(piece(name.data(), name.size()), *re_);
  }

  /// `name` with every match of the regex replaced, left to right, as std::regex_replace did
  /// (the engine's regexes before RE2) but for one case: after an empty match the search resumes
  /// one byte further on, where std::regex_replace first took a non-empty match at the same
  /// place. Only a regex that prefers an empty match to a longer one there (`a*?`, `(|a)`)
  /// sees the difference.
  std::string replace_all(std::string_view name) const {
    const std::size_t n = name.size();
    std::vector<piece> g(static_cast<std::size_t>(re_->NumberOfCapturingGroups()) + 1);
    const piece text(name.data(), n);
    std::string out;
    std::size_t at = 0, kept = 0;  // where the search resumes; the end of the last match
    while (at <= n &&
           re_->Match(text, at, n, RE2::UNANCHORED, g.data(), static_cast<int>(g.size()))) {
      const auto begin = static_cast<std::size_t>(g[0].data() - name.data());
      const std::size_t end = begin + g[0].size();
      out.append(name.substr(kept, begin - kept));
      expand(out, name, g, kept, end);
      kept = end;
      at = end == begin ? end + 1 : end;
    }
    out.append(name.substr(kept));
    return out;
  }

 private:
  using piece = re2::StringPiece;

  // Appends the replacement for the match g[0] of `name`, whose prefix starts at `prefix`
  // (the end of the previous match) and whose suffix starts at `suffix`: ECMAScript's format.
  void expand(std::string& out, std::string_view name, const std::vector<piece>& g,
              std::size_t prefix, std::size_t suffix) const {
    const std::string& f = replacement_;
    const auto group = [&](std::size_t k) {
      if (k < g.size() && g[k].data() != nullptr) out.append(g[k].data(), g[k].size());
    };
    const auto digit = [](char c) { return c >= '0' && c <= '9'; };
    for (std::size_t i = 0; i < f.size(); ++i) {
      if (f[i] != '$' || i + 1 == f.size()) {
        out += f[i];
        continue;
      }
      const char c = f[++i];
      if (c == '$') {
        out += '$';
      } else if (c == '&') {
        group(0);
      } else if (c == '`') {
        out.append(
            name.substr(prefix, static_cast<std::size_t>(g[0].data() - name.data()) - prefix));
      } else if (c == '\'') {
        out.append(name.substr(suffix));
      } else if (digit(c)) {
        std::size_t k = static_cast<std::size_t>(c - '0');
        if (i + 1 < f.size() && digit(f[i + 1]))
          k = k * 10 + static_cast<std::size_t>(f[++i] - '0');
        group(k);
      } else {
        out += '$';
        --i;  // the character after `$` is copied as it is
      }
    }
  }

  std::shared_ptr<const RE2> re_;
  std::string replacement_;
};

/// The output name the rename rules alone give a name (no selection): `rename_exact`'s entry,
/// else the first `rename` regex found in it (`rule`: its index), else the name itself.
class renamer {
 public:
  struct result {
    std::string name;
    std::size_t rule = npos;  ///< the rename regex that gave it; npos: none did
  };
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);

  /// Compiles the rules' regexes (an error names `op` and the first regex RE2 refuses).
  renamer(const name_rules& rules, const std::string& op) : exact_(&rules.rename_exact) {
    res_.reserve(rules.rename.size());
    for (const auto& [re, with] : rules.rename) res_.emplace_back(re, with, op);
  }

  result operator()(const std::string& name) const {
    if (auto x = exact_->find(name); x != exact_->end()) return {x->second, npos};
    for (std::size_t i = 0; i < res_.size(); ++i)
      if (res_[i].found_in(name)) return {res_[i].replace_all(name), i};
    return {name, npos};
  }

 private:
  const std::map<std::string, std::string>* exact_;  // the rules outlive the renamer
  std::vector<rename_regex> res_;
};

/// What the name rules decide for the parameters of the sources.
struct name_selection {
  std::map<std::string, std::string, std::less<>> renamed;  ///< selected source name -> output name
  std::set<std::string, std::less<>> excluded;              ///< the parameters the rules leave out

  bool selected(std::string_view name) const { return renamed.count(name) != 0; }
  /// The output name of a selected parameter (the name itself otherwise).
  std::string_view output_name(std::string_view name) const {
    const auto it = renamed.find(name);
    return it == renamed.end() ? name : std::string_view(it->second);
  }
};

/// Applies `rules` to `all`, every parameter name of the sources, and checks them (each error a
/// reshard::error after `op + ": "`): a regex RE2 refuses; a selected parameter renamed to the
/// empty name; two selected parameters given the same name; an include or exclude glob, a rename
/// regex or an exact name that matches no name of `all`; nothing selected. A rename regex counts
/// as matching when it renames a name, selected or not.
/// @post every output name is distinct and non-empty (renamed is injective)
inline name_selection select_names(const name_rules& rules,
                                   const std::set<std::string, std::less<>>& all,
                                   const std::string& op) {
  const renamer rename(rules, op);
  name_selection s;
  std::vector<std::size_t> inc(rules.include.size()), exc(rules.exclude.size()),
      ren(rules.rename.size());
  std::map<std::string, std::string, std::less<>> owner;  // output name -> source name
  for (const auto& name : all) {
    bool in = rules.include.empty(), out = false;
    for (std::size_t i = 0; i < rules.include.size(); ++i)
      if (detail::glob_matches(rules.include[i], name)) in = true, ++inc[i];
    for (std::size_t i = 0; i < rules.exclude.size(); ++i)
      if (detail::glob_matches(rules.exclude[i], name)) out = true, ++exc[i];
    renamer::result to = rename(name);
    if (to.rule != renamer::npos) ++ren[to.rule];
    if (!in || out) {
      s.excluded.insert(name);
      continue;
    }
    if (to.name.empty())
      report_error(op + ": rename gives parameter " + detail::quote_name(name) + " an empty name");
    if (auto [at, fresh] = owner.emplace(to.name, name); !fresh)
      report_error(op + ": parameters " + detail::quote_name(at->second) + " and " +
                   detail::quote_name(name) + " would both be written as " +
                   detail::quote_name(to.name) + " (check the rename rules)");
    s.renamed.emplace(name, std::move(to.name));
  }
  const auto none = [&](const char* what, const std::string& pattern) {
    report_error(op + ": " + what + " " + detail::quote_name(pattern) +
                 " matches no parameter of the sources (" + std::to_string(all.size()) +
                 " parameters; `reshard inspect` lists them)");
  };
  for (std::size_t i = 0; i < inc.size(); ++i)
    if (!inc[i]) none("include pattern", rules.include[i]);
  for (std::size_t i = 0; i < exc.size(); ++i)
    if (!exc[i]) none("exclude pattern", rules.exclude[i]);
  for (std::size_t i = 0; i < ren.size(); ++i)
    if (!ren[i]) none("rename rule", rules.rename[i].first);
  for (const auto& [from, to] : rules.rename_exact)
    if (!all.count(from)) none("renamed parameter", from);
  if (s.renamed.empty())
    report_error(op + ": the include and exclude patterns select no parameter");
  return s;
}

}  // namespace reshard::io
