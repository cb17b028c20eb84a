// examples/cli/check_plan_command.hpp: `reshard check-plan`: the verdict on a resharding plan that
// any system made, against the two layouts it moves between (reshard::check_plan).
#pragma once

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "common.hpp"
#include "reshard/io/dcp_read_items.hpp"

namespace reshard::cli {

// check-plan --dcp FILE: the verdict on PyTorch DCP read items (io/dcp_read_items.hpp).
inline void check_dcp_read_items_file(const std::string& file, std::size_t max_problems, bool json) {
  const std::string origin = file == "-" ? std::string("standard input") : file;
  const io::dcp_read_items in = io::dcp_read_items_from_text(read_argument("@" + file, "--dcp"), "--dcp " + origin);
  const io::dcp_check r = io::check_dcp_read_items(in, max_problems);
  if (json) {
    print_json(std::cout, io::to_json(r));
  } else {
    const auto bytes = [](index_t b) { return format_bytes(static_cast<double>(b)); };
    std::size_t items = 0;
    for (const auto& t : r.tensors) items += t.items;
    std::cout << "read items  " << items << " for " << r.tensors.size() << " tensor" << (r.tensors.size() == 1 ? "" : "s")
              << " on " << in.ranks << " target rank" << (in.ranks == 1 ? "" : "s") << " from " << origin
              << (in.torch.empty() ? "" : " (torch " + in.torch + ")") << '\n';
    for (const auto& t : r.tensors) {
      std::cout << "tensor      " << io::detail::quote_name(t.fqn) << ' ' << to_string(t.size) << ": " << t.items << " item"
                << (t.items == 1 ? "" : "s") << " (" << t.meeting_pairs << " pair" << (t.meeting_pairs == 1 ? "" : "s")
                << " of target and saved chunk meet), " << bytes(t.read_bytes) << " read for " << bytes(t.target_bytes)
                << " of target chunks, " << bytes(t.check.cost.cross_bytes) << " from other ranks' files: "
                << (t.ok() ? std::string("correct")
                           : "WRONG (" + std::to_string(t.problem_count()) + " problem" + (t.problem_count() == 1 ? "" : "s") + ")")
                << '\n';
      for (const auto& p : t.check.problems) std::cout << "  " << p.what << '\n';
      for (const auto& e : t.extra) std::cout << "  " << e << '\n';
    }
    std::cout << "verdict     "
              << (r.ok() ? "correct: every element of every target chunk read exactly once, from a saved chunk that "
                           "holds it, to its own place"
                         : "WRONG (" + std::to_string(r.problem_count()) + " problem" + (r.problem_count() == 1 ? "" : "s") + ")")
              << '\n';
  }
  std::cout.flush();
  if (!r.ok()) {
    std::string first;
    for (const auto& t : r.tensors)
      if (first.empty() && !t.ok()) first = !t.check.problems.empty() ? t.check.problems[0].what : t.extra.empty() ? "" : t.extra[0];
    report_error("--dcp " + origin + ": the read items are wrong: " + std::to_string(r.problem_count()) + " problem" +
                 (r.problem_count() == 1 ? "" : "s") + (first.empty() ? "" : "; the first: " + first));
  }
}

inline command add_check_plan_command(CLI::App& app) {
  struct options {
    std::string src, dst, plan, dcp, dtype = "float32";
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
                  "\"shape\"}, ...]}, as `reshard plan --json` writes it (other keys ignored)");
  CLI::Option* dcp = sub->add_option("--dcp", o->dcp,
                  "instead of --plan: PyTorch DCP read items, a JSON file (- = standard input) of the form of "
                  "docs/formats.md#dcp-read-items; checked per tensor against the saved and the target chunks it lists")
      ->excludes("--plan");
  sub->add_option("--src,-s", o->src,
                  std::string("the source layout ") + layout_help + "; may be left out when the plan file holds \"src\"");
  sub->add_option("--dst,-d", o->dst, "the target layout, in the same form; may be left out when the plan holds \"dst\"");
  dcp->excludes("--src")->excludes("--dst");
  add_element_dtype_option(sub, o->dtype);
  sub->add_option("--max-problems", o->max_problems, "problems listed at most (all are counted; default 20)");
  sub->add_flag("--json", o->json, "print the verdict as JSON {\"ok\", \"complete\", \"sound\", \"problems\", ...}");
  o->svg.add_to(sub, "the plan, its holes and doubly covered boxes in red");
  sub->footer(
      "Exit status: 0 for a correct plan, 1 for a wrong one (or bad input), 2 for bad usage.\n"
      "Examples:\n"
      "  reshard plan --src @a.json --dst @b.json --json | reshard check-plan --plan -\n"
      "  reshard check-plan --dcp read_items.json");

  return {sub, [o] {
            if (!o->dcp.empty()) {
              if (!o->svg.file.empty()) throw CLI::ValidationError("--svg", "not with --dcp (DCP chunks are no layout to draw)");
              check_dcp_read_items_file(o->dcp, o->max_problems, o->json);
              return;
            }
            if (o->plan.empty()) throw CLI::RequiredError("one of --plan and --dcp");
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
