// examples/cli/inspect_command.hpp: `reshard inspect`: what a checkpoint (.ckpt, .safetensors) or a
// strategy file (protobuf or JSON) holds: names, dtypes, shapes, layouts.
#pragma once

#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <reshard/io/transform.hpp>

#include "common.hpp"

namespace reshard::cli {

namespace detail {

inline std::string dims_text(const std::vector<std::int64_t>& d) { return to_string(index_list(d.begin(), d.end())); }

inline void print_table(std::ostream& out, const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> w;
  for (const auto& r : rows)
    for (std::size_t i = 0; i < r.size(); ++i) {
      if (w.size() <= i) w.push_back(0);
      w[i] = std::max(w[i], r[i].size());
    }
  for (const auto& r : rows) {
    std::string line;
    for (std::size_t i = 0; i < r.size(); ++i) line += (i + 1 < r.size() ? pad_right(r[i], w[i] + 2) : r[i]);
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << '\n';
  }
}

inline void inspect_checkpoint(std::ostream& out, const std::string& path, bool json) {
  const io::checkpoint_reader f(path);
  const bool st = f.format() != io::checkpoint_format::ckpt;
  std::uint64_t tensor_bytes = 0;
  bool multi = false;
  for (const auto& e : f.entries()) {
    tensor_bytes += e.content_size();
    multi = multi || (e.ckpt && e.ckpt->values.size() > 1);
  }
  const std::uint64_t file_bytes = f.file_size();  // hf: the shards' total
  if (json) {
    nlohmann::json j;
    j["kind"] = "checkpoint";
    j["format"] = std::string(io::to_string(f.format()));
    j["path"] = path;
    j["file_bytes"] = file_bytes;
    if (!st) j["crc"] = f.has_crc();
    j["parameters"] = nlohmann::json::array();
    for (const auto& e : f.entries()) {
      nlohmann::json p;
      p["name"] = e.name;
      if (e.map_tensor) {
        p["map_tensor"] = true;
      } else {
        p["dtype"] = std::string(io::ms_name(e.type));
        p["dims"] = e.dims;
        p["bytes"] = e.content_size();
      }
      if (e.ckpt) p["pieces"] = e.ckpt->values.size();
      j["parameters"].push_back(std::move(p));
    }
    print_json(out, j);
    return;
  }
  out << "checkpoint " << path << " (" << io::to_string(f.format()) << "): " << f.entries().size()
      << " parameter" << (f.entries().size() == 1 ? "" : "s") << ", "
      << format_bytes(static_cast<double>(file_bytes));
  if (!st) out << ", crc_num trailer: " << (f.has_crc() ? "yes" : "no");
  out << "\n\n";
  std::vector<std::vector<std::string>> rows{{"name", "dtype", "dims", "bytes"}};
  if (multi) rows[0].push_back("pieces");
  for (const auto& e : f.entries()) {
    std::vector<std::string> r{e.name, e.map_tensor ? "map tensor" : std::string(io::ms_name(e.type)),
                               e.map_tensor ? "" : dims_text(e.dims),
                               e.map_tensor ? "" : std::to_string(e.content_size())};
    if (multi) r.push_back(std::to_string(e.ckpt ? e.ckpt->values.size() : 1));
    rows.push_back(std::move(r));
  }
  print_table(out, rows);
  out << "\ntensor bytes: " << format_bytes(static_cast<double>(tensor_bytes)) << '\n';
}

inline void inspect_strategy(std::ostream& out, const std::string& path, bool json) {
  const io::strategy_file s = io::read_strategy(path);
  const io::strategy_layouts sl(s, path);
  const auto layout_text = [&](const std::string& name, const io::staged_layout& e) -> std::string {
    if (e.stored.tensor_shape.empty()) return {};
    const index_list shape(e.stored.tensor_shape.begin(), e.stored.tensor_shape.end());
    return to_string(io::to_layout(e.stored, shape, e.stage, "strategy: " + path + ": parameter '" + name + "'"));
  };
  if (json) {
    nlohmann::json j;
    j["kind"] = "strategy";
    j["format"] = io::is_json_strategy(path) ? "json" : "protobuf";
    j["path"] = path;
    j["current_stage"] = s.current_stage;
    j["pipeline"] = sl.pipeline();
    j["stages"] = sl.stages();
    j["stage_devices"] = sl.stage_ranks();
    j["ranks"] = sl.ranks();
    j["nodes"] = nlohmann::json::array();
    for (const auto& [name, n] : s.nodes) j["nodes"].push_back({{"name", name}, {"stage", n.stage}, {"strategy", n.strategy}});
    j["parameters"] = nlohmann::json::array();
    for (const auto& name : sl.names())
      for (const auto& e : *sl.find(name)) {
        nlohmann::json p;
        p["name"] = name;
        p["stage"] = e.stage;
        p["dev_matrix"] = e.stored.dev_matrix;
        p["tensor_map"] = e.stored.tensor_map;
        p["tensor_shape"] = e.stored.tensor_shape;
        p["param_split_shape"] = e.stored.param_split_shape;
        p["indices_offset"] = e.stored.indices_offset;
        p["field"] = e.stored.field;
        p["opt_weight_shard_step"] = e.stored.opt_weight_shard_step;
        p["opt_weight_shard_size"] = e.stored.opt_weight_shard_size;
        if (auto t = layout_text(name, e); !t.empty()) p["layout"] = t;
        j["parameters"].push_back(std::move(p));
      }
    print_json(out, j);
    return;
  }
  out << "strategy " << path << " (" << (io::is_json_strategy(path) ? "JSON" : "protobuf")
      << "): " << s.layouts.size() << " parameter layout" << (s.layouts.size() == 1 ? "" : "s")
      << ", " << s.nodes.size() << " node strateg" << (s.nodes.size() == 1 ? "y" : "ies") << ", "
      << sl.stages() << " stage" << (sl.stages() == 1 ? "" : "s") << " of " << sl.stage_ranks()
      << " device" << (sl.stage_ranks() == 1 ? "" : "s") << " (" << sl.ranks() << " rank"
      << (sl.ranks() == 1 ? "" : "s") << ")" << (sl.pipeline() ? ", merged pipeline" : "")
      << "\n\n";
  // protobuf strategies carry no shape: the layout as stored; JSON ones: reshard's notation too
  std::vector<std::vector<std::string>> rows{{"name", "stage", "layout"}};
  for (const auto& name : sl.names())
    for (const auto& e : *sl.find(name)) {
      std::ostringstream os;
      os << e.stored;
      std::string text = os.str();
      if (const auto at = text.find(" shape[]"); at != std::string::npos) text.erase(at, 8);
      if (auto t = layout_text(name, e); !t.empty()) text = t;
      rows.push_back({name, std::to_string(e.stage), text});
    }
  print_table(out, rows);
}

}  // namespace detail

inline command add_inspect_command(CLI::App& app) {
  struct options {
    std::string file;
    bool json = false;
  };
  auto o = std::make_shared<options>();
  CLI::App* sub = app.add_subcommand(
      "inspect", "Show what a checkpoint (.ckpt, .safetensors) or a strategy file holds");
  sub->add_option("file", o->file, "the file (a .json file or one starting with protobuf field 1 varint is a strategy)")
      ->required();
  sub->add_flag("--json", o->json, "print JSON");

  return {sub, [o] {
            // built whole, then printed: a file that fails half way prints nothing
            std::ostringstream out;
            if (io::detect_file_kind(o->file) == io::file_kind::strategy)
              detail::inspect_strategy(out, o->file, o->json);
            else
              detail::inspect_checkpoint(out, o->file, o->json);
            std::cout << out.str();
          }};
}

}  // namespace reshard::cli
