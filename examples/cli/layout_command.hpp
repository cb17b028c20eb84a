// examples/cli/layout_command.hpp: `reshard layout`: what each rank of a layout holds.
#pragma once

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "common.hpp"

namespace reshard::cli {

inline command add_layout_command(CLI::App& app) {
  struct options {
    std::string layout;
    bool json = false;
    svg_output svg;
  };
  auto o = std::make_shared<options>();
  CLI::App* sub = app.add_subcommand(
      "layout", "Show the box of the tensor each rank holds, and the replica groups");
  sub->add_option("--layout,-l", o->layout, std::string("the layout ") + layout_help)->required();
  sub->add_flag("--json", o->json, "print JSON {\"ranks\":[...],\"replica_groups\":[...]}");
  o->svg.add_to(sub, "the layout (each rank's box, coloured by rank)");
  sub->footer(
      "Example:\n"
      "  reshard layout --layout '{\"dev_matrix\":[2,4],\"tensor_map\":[1,-1],\"shape\":[8,4]}'");

  return {sub, [o] {
            const layout l = read_layout(o->layout, "--layout");
            o->svg.write(o->svg.file.empty() ? std::string() : layout_svg(l, o->svg.options(l.shape)));
            const nlohmann::json report = layout_report(l);
            std::ostream& out = std::cout;
            if (o->json) {
              print_json(out, report);
              return;
            }
            const auto& ranks = report["ranks"];
            const auto& groups = report["replica_groups"];
            out << "layout " << to_string(l) << ": " << num_ranks(l) << " rank"
                << (num_ranks(l) == 1 ? "" : "s") << ", " << groups.size() << " distinct shard"
                << (groups.size() == 1 ? "" : "s") << "\n\n";
            const auto box_text = [](const nlohmann::json& r) {
              return to_string(box{r["offset"].get<index_list>(), r["shape"].get<index_list>()});
            };
            std::size_t wr = 4, wb = 3;
            for (const auto& r : ranks) {
              wr = std::max(wr, std::to_string(r["rank"].get<index_t>()).size());
              wb = std::max(wb, box_text(r).size());
            }
            out << pad_left("rank", wr) << "  " << pad_right("box", wb) << "  shape\n";
            for (const auto& r : ranks)
              out << pad_left(std::to_string(r["rank"].get<index_t>()), wr) << "  "
                  << pad_right(box_text(r), wb) << "  "
                  << to_string(r["shape"].get<index_list>()) << '\n';
            out << "\nreplica groups (ranks holding identical data):\n";
            for (const auto& g : groups) {
              const auto members = g.get<std::vector<index_t>>();
              const auto& r = ranks[static_cast<std::size_t>(members.front() - l.first_rank)];
              out << "  " << pad_right(box_text(r), wb) << "  rank" << (members.size() == 1 ? " " : "s ")
                  << format_ranks(members) << '\n';
            }
          }};
}

}  // namespace reshard::cli
