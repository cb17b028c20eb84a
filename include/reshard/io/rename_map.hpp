// reshard/io/rename_map.hpp: rename maps, JSON objects {"old name": "new name", ...} that give
// name_rules::rename_exact (the CLI's --rename-map FILE). Read strictly (json_reader.hpp): one
// object, nothing after it, no name given twice, every new name a string.
#pragma once

#include <reshard/error.hpp>
#include <reshard/io/detail/text.hpp>
#include <reshard/io/json_reader.hpp>

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <string_view>

namespace reshard::io {

/// The rename map in `text` (old name -> new name); `source` starts every error message
/// ("--rename-map map.json").
inline std::map<std::string, std::string> decode_rename_map(std::string_view text, std::string_view source) {
  const std::string prefix = std::string(source) + ": ";
  const auto j = parse_json_strict<nlohmann::json>(text, prefix);
  if (!j.is_object()) report_error(prefix + "not a JSON object {\"old\": \"new\", ...}");
  std::map<std::string, std::string> map;
  for (const auto& [from, to] : j.items()) {
    if (!to.is_string())
      report_error(prefix + "the new name of " + detail::quote_name(from) + " is " + detail::json_excerpt(to) +
                   ", not a string");
    map.emplace(from, to.get<std::string>());
  }
  return map;
}

}  // namespace reshard::io
