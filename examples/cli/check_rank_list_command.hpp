// examples/cli/check_rank_list_command.hpp: `reshard check-rank-list`: is a rank list (the source
// ranks whose checkpoints a target rank reads, as MindSpore lists them) sufficient for every
// parameter of the strategies, which of its ranks are superfluous, and reshard's own list
// (io::check_rank_list_for_transform).
#pragma once

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <reshard/io/rank_list.hpp>

#include "common.hpp"

namespace reshard::cli {

inline command add_check_rank_list_command(CLI::App& app) {
  struct options {
    std::int64_t rank = 0;
    std::string ranks, src_strategy, dst_strategy;
    bool json = false;
  };
  auto o = std::make_shared<options>();
  CLI::App* sub = app.add_subcommand(
      "check-rank-list", "Check a rank list (the source ranks whose checkpoints a target rank reads): sufficient "
                         "for every parameter, its superfluous ranks, and reshard's list");
  sub->add_option("--rank", o->rank, "the target rank")->required()->check(check_rank);
  sub->add_option("--ranks", o->ranks,
                  "the source ranks, a JSON array ('[0,1,2,3]') or @file.json (@- = standard input) holding one "
                  "or {\"ranks\": [...]}")
      ->required();
  sub->add_option("--src-strategy", o->src_strategy, "the source strategy file; none = unsplit on one rank");
  sub->add_option("--dst-strategy", o->dst_strategy, "the target strategy file; none = unsplit on one rank");
  sub->add_flag("--json", o->json,
                "print the verdict as JSON {\"sufficient\", \"minimal_list\", \"missing\", \"superfluous\", ...}");
  sub->footer(
      "Sufficient: for every parameter of the source strategy, the listed ranks hold all of the target\n"
      "rank's part (on the layouts the transform plans with), and the base file rank % M, from which\n"
      "the parameters no strategy lists are copied, is listed. Superfluous ranks can all be dropped at\n"
      "once, leaving the kept ones, none of which can be spared. rank-list is `reshard rank-list`'s\n"
      "list (one rank per slice of each parameter, by the transform's replica choice; kept may be\n"
      "shorter).\n"
      "Exit status: 0 for a sufficient list, 1 for an insufficient one (or bad input), 2 for bad usage.");

  return {sub, [o] {
            const std::string what = "--ranks " + o->ranks;
            const std::vector<index_t> ranks = rank_list_from_json(json_of_text(read_argument(o->ranks, "--ranks"), what), what);
            const io::strategy_layouts src(o->src_strategy), dst(o->dst_strategy);
            const auto r = io::check_rank_list_for_transform(o->rank, ranks, src, dst);
            const auto list = [](const std::vector<std::int64_t>& v) { return nlohmann::json(v).dump(); };
            if (o->json) {
              nlohmann::json j = to_json(r);
              j["rank"] = o->rank;
              j["ranks"] = ranks;
              print_json(std::cout, j);
            } else {
              std::cout << "target rank  " << o->rank << "\n"
                        << "ranks        " << list(ranks) << '\n'
                        << "verdict      "
                        << (r.sufficient ? "sufficient: the listed ranks hold every parameter's part (" +
                                               std::to_string(r.parameters) + " checked)"
                                         : "INSUFFICIENT: " + std::to_string(r.missing.size()) + " of " +
                                               std::to_string(r.parameters) + " parameters not covered" +
                                               (r.base_listed ? "" : ", the base file rank " +
                                                                         std::to_string(r.base_rank) + " not listed"))
                        << '\n';
              for (const auto& m : r.missing) {
                std::cout << "  missing " << io::detail::quote_name(m.name) << ":";
                for (const box& b : m.uncovered) std::cout << ' ' << to_string(b);
                std::cout << " of the rank's " << to_string(m.target) << " (boxes in shape " << to_string(m.shape) << ")\n";
              }
              std::cout << "superfluous  " << list(r.superfluous)
                        << (r.superfluous.empty() ? "" : " (can all be dropped together)") << '\n'
                        << "kept         " << list(r.kept)
                        << (r.sufficient ? " (sufficient; none can be spared)" : "") << '\n'
                        << "rank-list    " << list(r.minimal) << " (reshard rank-list: one rank per slice of each parameter)\n";
            }
            std::cout.flush();
            if (!r.sufficient)
              report_error("the rank list is insufficient for target rank " + std::to_string(o->rank) + ": " +
                           (r.missing.empty() ? std::string()
                                              : std::to_string(r.missing.size()) + " parameter" +
                                                    (r.missing.size() == 1 ? "" : "s") + " not covered, the first " +
                                                    io::detail::quote_name(r.missing[0].name)) +
                           (r.base_listed ? "" : std::string(r.missing.empty() ? "" : "; ") + "the base file rank " +
                                                     std::to_string(r.base_rank) + " not listed"));
          }};
}

}  // namespace reshard::cli
