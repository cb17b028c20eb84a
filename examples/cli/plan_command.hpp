// examples/cli/plan_command.hpp: `reshard plan`: the minimal transfers from one layout to another.
#pragma once

#include <iostream>
#include <memory>
#include <string>

#include "common.hpp"

namespace reshard::cli {

inline command add_plan_command(CLI::App& app) {
  struct options {
    std::string src, dst, dtype = "float32";
    bool json = false, summary = false;
    svg_output svg;
  };
  auto o = std::make_shared<options>();
  CLI::App* sub = app.add_subcommand(
      "plan", "Plan the minimal transfers that redistribute a tensor from one layout to another");
  sub->add_option("--src,-s", o->src, std::string("the source layout ") + layout_help)->required();
  sub->add_option("--dst,-d", o->dst, "the target layout, in the same form as --src")->required();
  add_element_dtype_option(sub, o->dtype);
  sub->add_flag("--json", o->json,
                "print JSON {\"transfers\":[...],\"cross_bytes\":n,\"local_bytes\":n,...}");
  sub->add_flag("--summary", o->summary, "print the cost only, not every transfer");
  o->svg.add_to(sub, "the plan (each target box cut into the pieces it receives, coloured by sender)");
  sub->footer(
      "Example (8 ranks to 4):\n"
      "  reshard plan --src '{\"dev_matrix\":[2,4],\"tensor_map\":[1,-1],\"shape\":[8,4]}' \\\n"
      "               --dst '{\"dev_matrix\":[4],\"tensor_map\":[0,-1],\"shape\":[8,4]}'");

  return {sub, [o] {
            const layout src = read_layout(o->src, "--src");
            const layout dst = read_layout(o->dst, "--dst");
            const index_t elem = dtype_bytes(o->dtype, "--dtype");
            if (src.shape != dst.shape)
              report_error("--src and --dst describe different tensors: shape " +
                           to_string(src.shape) + " vs " + to_string(dst.shape));
            const transfer_plan p = plan(src, dst);
            o->svg.write(o->svg.file.empty() ? std::string() : plan_svg(p, o->svg.options(src.shape, elem)));
            std::ostream& out = std::cout;
            if (o->json) {
              nlohmann::json j = to_json(p, elem);
              if (o->summary) j.erase("transfers");
              print_json(out, j);
              return;
            }
            const auto ranks = [](const layout& l) {
              return std::to_string(num_ranks(l)) + (num_ranks(l) == 1 ? " rank" : " ranks");
            };
            out << "source  " << to_string(src) << "  (" << ranks(src) << ")\n"
                << "target  " << to_string(dst) << "  (" << ranks(dst) << ")\n"
                << "dtype   " << o->dtype << ", " << elem << " byte" << (elem == 1 ? "" : "s")
                << " per element\n";
            if (!o->summary) {
              std::size_t ws = 3, wd = 3, wb = 3, wn = 5;
              for (const transfer& t : p.transfers) {
                ws = std::max(ws, std::to_string(t.src).size());
                wd = std::max(wd, std::to_string(t.dst).size());
                wb = std::max(wb, to_string(t.where).size());
                wn = std::max(wn, std::to_string(volume(t.where) * elem).size());
              }
              out << '\n' << p.transfers.size() << " transfer"
                  << (p.transfers.size() == 1 ? "" : "s") << ":\n"
                  << pad_left("src", ws) << " -> " << pad_right("dst", wd) << "  "
                  << pad_right("box", wb) << "  " << pad_left("bytes", wn) << '\n';
              for (const transfer& t : p.transfers)
                out << pad_left(std::to_string(t.src), ws) << " -> "
                    << pad_right(std::to_string(t.dst), wd) << "  " << pad_right(to_string(t.where), wb)
                    << "  " << pad_left(std::to_string(volume(t.where) * elem), wn) << "  "
                    << (t.src == t.dst ? "local" : "cross") << '\n';
            }
            const plan_cost c = p.cost(elem);
            out << "\ncost:\n"
                << "  cross-rank bytes  " << format_bytes(static_cast<double>(c.cross_bytes))
                << " in " << c.messages << " message" << (c.messages == 1 ? "" : "s") << '\n'
                << "  local copies      " << format_bytes(static_cast<double>(c.local_bytes))
                << '\n'
                << "  lower bound       "
                << format_bytes(static_cast<double>(c.lower_bound_bytes));
            if (c.cross_bytes == c.lower_bound_bytes)
              out << "  (cross-rank bytes == lower bound: minimal)\n";
            else
              out << "  (cross-rank bytes exceed it by "
                  << format_bytes(static_cast<double>(c.cross_bytes - c.lower_bound_bytes))
                  << ")\n";
            out << "  sent per source rank: max "
                << format_bytes(static_cast<double>(c.max_sent_bytes)) << ", mean "
                << format_bytes(c.mean_sent_bytes) << '\n';
          }};
}

}  // namespace reshard::cli
