// examples/cli/check_plan_command.hpp: `reshard check-plan`: the verdict on a resharding plan that
// any system made, against the two layouts it moves between (reshard::check_plan).
#pragma once

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "common.hpp"

namespace reshard::cli {

inline command add_check_plan_command(CLI::App& app) {
  struct options {
    std::string src, dst, plan, dtype = "float32";
    std::size_t max_problems = 20;
    bool json = false;
    svg_output svg;
  };
  auto o = std::make_shared<options>();
  CLI::App* sub = app.add_subcommand(
      "check-plan", "Check a resharding plan made by any system: every target element received once, every "
                    "sender holding what it sends, and its bytes beside the minimal plan's");
  sub->add_option("--plan,-p", o->plan,
                  "the plan: a JSON file (- = standard input) holding {\"transfers\": [{\"src\", \"dst\", \"offset\", "
                  "\"shape\"}, ...]}, as `reshard plan --json` writes it (other keys ignored)")
      ->required();
  sub->add_option("--src,-s", o->src,
                  std::string("the source layout ") + layout_help + "; may be left out when the plan file holds \"src\"");
  sub->add_option("--dst,-d", o->dst, "the target layout, in the same form; may be left out when the plan holds \"dst\"");
  add_element_dtype_option(sub, o->dtype);
  sub->add_option("--max-problems", o->max_problems, "problems listed at most (all are counted; default 20)");
  sub->add_flag("--json", o->json, "print the verdict as JSON {\"ok\", \"complete\", \"sound\", \"problems\", ...}");
  o->svg.add_to(sub, "the plan, its holes and doubly covered boxes in red");
  sub->footer(
      "Exit status: 0 for a correct plan, 1 for a wrong one (or bad input), 2 for bad usage.\n"
      "Example:\n"
      "  reshard plan --src @a.json --dst @b.json --json | reshard check-plan --plan -");

  return {sub, [o] {
            const std::string what = "--plan " + o->plan;
            const nlohmann::json j = json_of_text(read_argument("@" + o->plan, "--plan"), what);
            const auto layout_of = [&](const std::string& given, const char* key, const char* option) {
              if (!given.empty()) return read_layout(given, option);
              if (j.is_object() && j.contains(key)) return layout_from_json(j[key], what + " \"" + key + "\"");
              report_error(std::string(option) + " is required: " + what + " holds no \"" + key + "\" layout");
            };
            const layout src = layout_of(o->src, "src", "--src");
            const layout dst = layout_of(o->dst, "dst", "--dst");
            if (src.shape != dst.shape)
              report_error("--src and --dst describe different tensors: shape " + to_string(src.shape) + " vs " +
                           to_string(dst.shape));
            const std::vector<transfer> xs = transfers_from_json(j, what);
            const index_t elem = dtype_bytes(o->dtype, "--dtype");
            const plan_check r = check_plan(src, dst, xs, {o->max_problems, elem});
            o->svg.write(o->svg.file.empty() ? std::string() : check_plan_svg(src, dst, xs, r, o->svg.options(src.shape, elem)));
            if (o->json) {
              print_json(std::cout, to_json(r));
            } else {
              const auto bytes = [](index_t b) { return format_bytes(static_cast<double>(b)); };
              std::cout << "plan     " << xs.size() << " transfer" << (xs.size() == 1 ? "" : "s") << " from "
                        << (o->plan == "-" ? std::string("standard input") : o->plan) << '\n'
                        << "source   " << to_string(src) << "  (" << num_ranks(src) << " ranks)\n"
                        << "target   " << to_string(dst) << "  (" << num_ranks(dst) << " ranks)\n"
                        << "verdict  "
                        << (r.ok() ? std::string("correct: every target element received once, every sender holds what it sends")
                                   : std::string("WRONG:") + (r.complete ? "" : " incomplete") +
                                         (r.complete || r.sound ? "" : ",") + (r.sound ? "" : " unsound") + " (" +
                                         std::to_string(r.problem_count) + " problem" +
                                         (r.problem_count == 1 ? "" : "s") + ")")
                        << '\n';
              if (!r.problems.empty()) {
                std::cout << "problems";
                if (r.problems.size() < r.problem_count)
                  std::cout << " (the first " << r.problems.size() << " of " << r.problem_count << ")";
                std::cout << '\n';
                for (const auto& p : r.problems) std::cout << "  " << p.what << '\n';
              }
              std::cout << "cost     cross-rank " << bytes(r.cost.cross_bytes) << " in " << r.cost.messages << " message"
                        << (r.cost.messages == 1 ? "" : "s") << "; lower bound " << bytes(r.lower_bound_bytes) << '\n'
                        << "minimal  cross-rank " << bytes(r.minimal.cross_bytes) << " in " << r.minimal.messages
                        << " message" << (r.minimal.messages == 1 ? "" : "s") << " (reshard plan)\n"
                        << "largest  sent by one rank " << bytes(r.cost.max_sent_bytes) << " (minimal plan "
                        << bytes(r.minimal.max_sent_bytes) << "), received " << bytes(r.cost.max_received_bytes)
                        << " (" << bytes(r.minimal.max_received_bytes) << ")\n";
            }
            std::cout.flush();
            if (!r.ok())
              report_error("the plan is wrong: " + std::to_string(r.problem_count) + " problem" +
                           (r.problem_count == 1 ? "" : "s") + (r.problems.empty() ? "" : "; the first: " + r.problems[0].what));
          }};
}

}  // namespace reshard::cli
