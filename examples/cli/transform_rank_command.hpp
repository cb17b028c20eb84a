// examples/cli/transform_rank_command.hpp: `reshard transform-rank`: one target rank's checkpoint
// from the source files it needs (MindSpore's transform_checkpoint_by_rank).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "transform_common.hpp"

namespace reshard::cli {

/// "3=/path/file.ckpt" -> (3, path); none if malformed.
inline std::optional<std::pair<std::int64_t, std::string>> parse_rank_file(const std::string& s) {
  const auto eq = s.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == s.size()) return std::nullopt;
  std::int64_t r = 0;
  for (std::size_t i = 0; i < eq; ++i) {
    if (s[i] < '0' || s[i] > '9' || r > (std::int64_t{1} << 40)) return std::nullopt;
    r = r * 10 + (s[i] - '0');
  }
  return std::pair{r, s.substr(eq + 1)};
}

inline command add_transform_rank_command(CLI::App& app) {
  struct options {
    std::int64_t rank = 0;
    std::vector<std::string> checkpoints;
    std::string out, src_dir, src_strategy, dst_strategy;
    transform_flags flags;
  };
  auto o = std::make_shared<options>();
  CLI::App* sub = app.add_subcommand(
      "transform-rank", "Write one target rank's checkpoint from the source files it needs (see rank-list)");
  sub->add_option("--rank", o->rank, "the target rank")->required()->check(check_rank);
  auto* checkpoint =
      sub->add_option("--checkpoint", o->checkpoints, "a source file as SRC_RANK=FILE (repeat, or list several)")
          ->check([](const std::string& v) {
        return parse_rank_file(v) ? std::string() : "'" + v + "' is not SRC_RANK=FILE";
      });
  sub->add_option("--out", o->out,
                  "the file to write (*.safetensors for safetensors, else ckpt), or with --format hf a directory")
      ->required();
  sub->add_option("--src-dir", o->src_dir,
                  "a PyTorch DCP checkpoint (a directory holding .metadata; its chunks are its layout: no "
                  "--src-strategy), in place of --checkpoint")
      ->excludes(checkpoint);
  sub->add_option("--src-strategy", o->src_strategy, "the source strategy file; none = unsplit on one rank");
  sub->add_option("--dst-strategy", o->dst_strategy, "the target strategy file; none = unsplit on one rank");
  add_transform_flags(sub, o->flags, false, false);
  add_file_format_flags(sub, o->flags);
  sub->footer(
      "Example (target rank 1 of 4, from the source ranks `reshard rank-list --rank 1 ...` printed):\n"
      "  reshard transform-rank --rank 1 --checkpoint 1=train/rank_1/net.ckpt 2=train/rank_2/net.ckpt \\\n"
      "      3=train/rank_3/net.ckpt --out tune_1.ckpt \\\n"
      "      --src-strategy train_strategy.ckpt --dst-strategy tune_strategy.ckpt");

  return {sub, [o, sub] {
            o->flags.format_given = sub->count("--format") > 0;
            check_file_format(o->flags, o->out);
            if (!o->src_dir.empty()) {
              if (!o->src_strategy.empty())
                throw CLI::ValidationError("--src-strategy", "not with --src-dir (a DCP checkpoint's chunks are its layout)");
              const auto s = io::transform_dcp_checkpoint_by_rank(o->rank, o->src_dir, o->out, {}, o->dst_strategy,
                                                                  transform_options_of(o->flags));
              print_summary("reshard transform-rank",
                            "wrote target rank " + std::to_string(o->rank) + " to " + o->out + " from the DCP checkpoint " +
                                o->src_dir,
                            s, o->flags);
              return;
            }
            if (o->checkpoints.empty())
              throw CLI::RequiredError("one of --checkpoint and --src-dir");
            std::map<std::int64_t, std::filesystem::path> files;
            for (const auto& c : o->checkpoints) {
              const auto rf = *parse_rank_file(c);
              if (!files.emplace(rf.first, rf.second).second)
                report_error("--checkpoint: source rank " + std::to_string(rf.first) + " is given twice");
            }
            const auto s = io::transform_checkpoint_by_rank(o->rank, files, o->out, o->src_strategy, o->dst_strategy,
                                                            transform_options_of(o->flags));
            print_summary("reshard transform-rank",
                          "wrote target rank " + std::to_string(o->rank) + " to " + o->out + " from " +
                              std::to_string(files.size()) + " source file" + (files.size() == 1 ? "" : "s"),
                          s, o->flags);
          }};
}

}  // namespace reshard::cli
