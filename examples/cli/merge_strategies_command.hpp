// examples/cli/merge_strategies_command.hpp: `reshard merge-strategies`: one strategy file from the
// per-stage files of a pipeline (MindSpore's merge_pipeline_strategys).
#pragma once

#include <iostream>
#include <memory>
#include <set>
#include <string>

#include <reshard/io/strategy.hpp>

#include "common.hpp"

namespace reshard::cli {

inline command add_merge_strategies_command(CLI::App& app) {
  struct options {
    std::string src_dir, dst_file;
    bool force = false;
  };
  auto o = std::make_shared<options>();
  CLI::App* sub = app.add_subcommand(
      "merge-strategies", "Merge the per-stage strategy files of a pipeline into one (names become <stage>-<name>)");
  sub->add_option("--src-dir", o->src_dir, "the directory of the per-stage strategy files (all JSON or all protobuf)")
      ->required();
  sub->add_option("--dst-file", o->dst_file, "the merged file (JSON if *.json, else protobuf)")->required();
  sub->add_flag("--force", o->force, "replace an existing --dst-file");

  return {sub, [o] {
            io::merge_pipeline_strategies(o->src_dir, o->dst_file, o->force);
            const auto merged = io::read_strategy(o->dst_file);
            std::set<std::uint32_t> stages;
            for (const auto& [name, l] : merged.layouts)
              if (auto p = io::split_pipeline_name(name)) stages.insert(p->stage);
            std::string list;
            for (auto s : stages) list += (list.empty() ? "" : ",") + std::to_string(s);
            std::cout << "merged " << o->src_dir << " -> " << o->dst_file << ": " << stages.size() << " stage"
                      << (stages.size() == 1 ? "" : "s") << " [" << list << "], " << merged.layouts.size()
                      << " parameter layouts, " << merged.nodes.size() << " node strategies\n";
          }};
}

}  // namespace reshard::cli
