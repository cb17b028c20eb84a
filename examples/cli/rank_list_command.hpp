// examples/cli/rank_list_command.hpp: `reshard rank-list`: the source ranks one target rank needs
// (MindSpore's rank_list_for_transform, but minimal).
#pragma once

#include <iostream>
#include <memory>
#include <string>

#include <reshard/io/transform.hpp>

#include "common.hpp"

namespace reshard::cli {

inline command add_rank_list_command(CLI::App& app) {
  struct options {
    std::int64_t rank = 0;
    std::string src_strategy, dst_strategy;
  };
  auto o = std::make_shared<options>();
  CLI::App* sub = app.add_subcommand(
      "rank-list", "Print the source ranks whose checkpoints a target rank needs, as a JSON array");
  sub->add_option("--rank", o->rank, "the target rank")->required()->check(check_rank);
  sub->add_option("--src-strategy", o->src_strategy, "the source strategy file; none = unsplit on one rank");
  sub->add_option("--dst-strategy", o->dst_strategy, "the target strategy file; none = unsplit on one rank");
  sub->footer(
      "Minimal: one source rank per distinct piece of data the target needs (the target rank itself\n"
      "where it holds the piece), plus rank % M, from which the parameters no strategy lists\n"
      "(learning_rate, global_step, ...) are copied.");

  return {sub, [o] {
            const auto ranks = io::rank_list_for_transform(o->rank, o->src_strategy, o->dst_strategy);
            std::cout << nlohmann::json(ranks).dump() << '\n';
          }};
}

}  // namespace reshard::cli
