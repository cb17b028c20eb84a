// examples/cli/inspect_command.hpp: `reshard inspect`: what a checkpoint (.ckpt, .safetensors, a
// Hugging Face or a PyTorch DCP directory) or a strategy file (protobuf or JSON) holds: names,
// dtypes, shapes, layouts (of a DCP checkpoint: its chunks, and its byte items).
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
      if (f.format() == io::checkpoint_format::dcp) p["offsets"] = e.offsets;  // a chunk: where in its tensor
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
  const bool chunks = f.format() == io::checkpoint_format::dcp;  // a DCP data file: its chunks
  std::vector<std::vector<std::string>> rows{{"name", "dtype", "dims", "bytes"}};
  if (multi) rows[0].push_back("pieces");
  if (chunks) rows[0].push_back("offsets");
  for (const auto& e : f.entries()) {
    std::vector<std::string> r{e.name, e.map_tensor ? "map tensor" : std::string(io::ms_name(e.type)),
                               e.map_tensor ? "" : dims_text(e.dims),
                               e.map_tensor ? "" : std::to_string(e.content_size())};
    if (multi) r.push_back(std::to_string(e.ckpt ? e.ckpt->values.size() : 1));
    if (chunks) r.push_back(dims_text(e.offsets));
    rows.push_back(std::move(r));
  }
  print_table(out, rows);
  out << "\ntensor bytes: " << format_bytes(static_cast<double>(tensor_bytes)) << '\n';
}

// A PyTorch DCP checkpoint: its `.metadata` (read, not its data files): the tensors with their
// chunks, and the byte items.
inline void inspect_dcp(std::ostream& out, const std::string& path, bool json) {
  const io::dcp_metadata md = io::read_dcp_metadata(path);
  const std::vector<std::string> files = io::dcp_data_files(md);
  const std::string layout = md.layout == io::dcp_layout::torch_1_13 ? "torch 1.13" : "torch 2";
  std::uint64_t tensor_bytes = 0;
  const auto bytes_of = [](const io::dcp_tensor& t) {
    return *io::element_count(t.size) * io::element_size(t.type);
  };
  for (const auto& t : md.tensors) tensor_bytes += bytes_of(t);
  if (json) {
    nlohmann::json j;
    j["kind"] = "dcp";
    j["path"] = path;
    j["module_paths"] = layout;
    j["version"] = md.version ? nlohmann::json(*md.version) : nlohmann::json(nullptr);
    j["files"] = files;
    j["tensors"] = nlohmann::json::array();
    for (const auto& t : md.tensors) {
      nlohmann::json chunks = nlohmann::json::array();
      for (const auto& c : t.chunks)
        chunks.push_back({{"offsets", c.offsets}, {"sizes", c.sizes}, {"file", c.storage.relative_path},
                          {"offset", c.storage.offset}, {"length", c.storage.length}});
      j["tensors"].push_back({{"name", t.fqn}, {"dtype", std::string(io::ms_name(t.type))}, {"shape", t.size},
                              {"bytes", bytes_of(t)}, {"chunks", std::move(chunks)}});
    }
    j["byte_items"] = nlohmann::json::array();
    for (const auto& b : md.byte_items)
      j["byte_items"].push_back({{"name", b.fqn}, {"file", b.storage.relative_path}, {"offset", b.storage.offset},
                                 {"length", b.storage.length}});
    print_json(out, j);
    return;
  }
  const auto plural = [](std::size_t n, const char* one, const char* many) { return std::to_string(n) + " " + (n == 1 ? one : many); };
  out << "DCP checkpoint " << path << " (" << layout << " module paths" << (md.version ? ", version " + *md.version : std::string())
      << "): " << plural(md.tensors.size(), "tensor", "tensors") << ", " << plural(md.byte_items.size(), "byte item", "byte items")
      << ", " << plural(files.size(), "data file", "data files") << "\n\n";
  std::vector<std::vector<std::string>> rows{{"name", "dtype", "shape", "bytes", "chunks"}};
  for (const auto& t : md.tensors)
    rows.push_back({t.fqn, std::string(io::ms_name(t.type)), dims_text(t.size), std::to_string(bytes_of(t)), std::to_string(t.chunks.size())});
  print_table(out, rows);
  out << "\nchunks (offsets and sizes in the tensor; where each is stored):\n\n";
  rows = {{"name", "offsets", "sizes", "file", "offset", "length"}};
  for (const auto& t : md.tensors)
    for (const auto& c : t.chunks)
      rows.push_back({t.fqn, dims_text(c.offsets), dims_text(c.sizes), c.storage.relative_path, std::to_string(c.storage.offset),
                      std::to_string(c.storage.length)});
  print_table(out, rows);
  if (!md.byte_items.empty()) {
    out << "\nbyte items (pickled Python objects; only a DCP output would keep them):\n\n";
    rows = {{"name", "file", "offset", "length"}};
    for (const auto& b : md.byte_items)
      rows.push_back({b.fqn, b.storage.relative_path, std::to_string(b.storage.offset), std::to_string(b.storage.length)});
    print_table(out, rows);
  }
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
      "inspect", "Show what a checkpoint (.ckpt, .safetensors, a Hugging Face or PyTorch DCP directory) or a strategy file holds");
  sub->add_option("file", o->file, "the file (a .json file or one starting with protobuf field 1 varint is a strategy; a "
                                   "directory holding .metadata is a PyTorch DCP checkpoint)")
      ->required();
  sub->add_flag("--json", o->json, "print JSON");

  return {sub, [o] {
            // built whole, then printed: a file that fails half way prints nothing
            std::ostringstream out;
            if (io::is_dcp_directory(o->file))
              detail::inspect_dcp(out, o->file, o->json);
            else if (io::detect_file_kind(o->file) == io::file_kind::strategy)
              detail::inspect_strategy(out, o->file, o->json);
            else
              detail::inspect_checkpoint(out, o->file, o->json);
            std::cout << out.str();
          }};
}

}  // namespace reshard::cli
