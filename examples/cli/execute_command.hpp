// examples/cli/execute_command.hpp: `reshard execute`: the files of a checkpoint plan saved with
// --plan-out, written whole or as one of K disjoint parts (io::plan_from_json, io::plan_part,
// io::execute_plan), so that any scheduler can run the parts: a Slurm array, Kubernetes jobs,
// plain ssh.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "transform_common.hpp"
#include "reshard/io/execute.hpp"
#include "reshard/io/json_reader.hpp"
#include "reshard/io/plan_file.hpp"

namespace reshard::cli {

/// --part I/K: (I, K) with 1 <= I <= K <= 2^20, or none.
inline std::optional<std::pair<std::size_t, std::size_t>> parse_part(const std::string& v) {
  const auto slash = v.find('/');
  if (slash == std::string::npos) return std::nullopt;
  const auto whole = [](const std::string& s) -> std::optional<std::size_t> {
    if (s.empty() || s.size() > 7 || s.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
    return static_cast<std::size_t>(std::stoul(s));
  };
  const auto i = whole(v.substr(0, slash)), k = whole(v.substr(slash + 1));
  if (!i || !k || *i < 1 || *i > *k || *k > (std::size_t{1} << 20)) return std::nullopt;
  return std::pair{*i, *k};
}

inline command add_execute_command(CLI::App& app) {
  struct options {
    std::string plan, part, manifest, read_mode = "auto", write_mode = "auto";
    unsigned jobs = 0;
    bool force = false, no_sync = false, no_verify_crc = false, json = false, progress = false;
  };
  auto o = std::make_shared<options>();
  CLI::App* sub = app.add_subcommand(
      "execute", "Write the files of a checkpoint plan saved with --plan-out, whole or one of K parts (--part I/K)");
  sub->add_option("plan", o->plan, "the plan: the JSON file that --plan-out wrote")->required();
  sub->add_option("--part", o->part,
                  "I/K: write only part I of K (1 <= I <= K); the K parts are disjoint and together write every "
                  "file of the plan, and every process that reads the plan computes the same parts")
      ->check([](const std::string& v) {
        return parse_part(v) ? std::string() : "not I/K with 1 <= I <= K: " + v;
      });
  sub->add_option("--jobs,-j", o->jobs, "target files written in parallel (default 0: one per core, two with direct writes)");
  sub->add_option("--read-mode", o->read_mode, "how source tensors are read: auto (pread), pread or mmap")
      ->check(CLI::IsMember({"auto", "mmap", "pread"}));
  add_write_mode_option(sub, o->write_mode);
  sub->add_option("--manifest", o->manifest,
                  "also write a manifest of the files written (size, SHA-256, parameters), for `reshard verify "
                  "--manifest`; hashing costs a pass over the bytes");
  sub->add_flag("--force", o->force, "replace existing output files");
  sub->add_flag("--no-sync", o->no_sync, "do not fsync the outputs (scratch outputs only)");
  sub->add_flag("--no-verify-crc", o->no_verify_crc, "do not check the crc_num trailers of the source files");
  sub->add_flag("--progress", o->progress, "show a progress bar on stderr (the default when stderr is a terminal)");
  sub->add_flag("--json", o->json, "print the summary as JSON");
  sub->footer(
      "The plan's sources must be the files it was made from: a source whose size or modification time\n"
      "changed, or whose index disagrees with the plan, is an error (make the plan again), as is a plan\n"
      "that does not add up (a transfer missing, overlapping, or from a rank that does not hold it).");

  return {sub, [o] {
            const std::string who = "execute: " + o->plan;
            const std::string text = io::read_input_file(o->plan, "execute");
            io::checkpoint_plan plan =
                io::plan_from_json(io::parse_json_strict<nlohmann::json>(text, who + ": "), who);
            std::string what = "executed " + o->plan;
            if (!o->part.empty()) {
              const auto [i, k] = *parse_part(o->part);
              plan = io::plan_part(plan, i - 1, k);
              what += " part " + o->part;
            }
            transform_flags f;
            f.json = o->json;
            f.manifest = o->manifest;
            f.force = o->force;
            f.progress = o->progress;
            const io::transform_options t = transform_options_of(f);  // the progress bar
            io::execute_options e;
            e.force = o->force;
            e.sync = !o->no_sync;
            e.verify_crc = !o->no_verify_crc;
            e.manifest = o->manifest;
            e.jobs = o->jobs;
            e.reads = o->read_mode == "mmap"    ? io::read_mode::mmap
                      : o->read_mode == "pread" ? io::read_mode::pread
                                                : io::read_mode::automatic;
            e.writes = write_mode_of(o->write_mode);
            e.progress = t.progress;
            const auto s = io::execute_plan(plan, e, who);
            what += " (" + std::to_string(plan.targets.size()) + " target file" + (plan.targets.size() == 1 ? "" : "s") + ")";
            print_summary("reshard execute", what, s, f);
          }};
}

}  // namespace reshard::cli
