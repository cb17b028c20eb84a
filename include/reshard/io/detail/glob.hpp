// reshard/io/detail/glob.hpp: the glob of the parameter rules (name_rules' include and exclude,
// dtype_rules' named casts): fnmatch(3) over a whole parameter name, no flags.
#pragma once

#include <string>
#include <string_view>

#include <fnmatch.h>

namespace reshard::io::detail {

/// Does the whole of `name` match the fnmatch(3) pattern (`*`, `?`, `[...]`; no flags)?
inline bool glob_matches(const std::string& pattern, std::string_view name) {
  return ::fnmatch(pattern.c_str(), std::string(name).c_str(), 0) == 0;
}

}  // namespace reshard::io::detail
