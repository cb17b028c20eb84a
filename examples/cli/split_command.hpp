// examples/cli/split_command.hpp: `reshard split`: a checkpoint of full tensors split into the
// per-rank checkpoints of a strategy.
#pragma once

#include <memory>
#include <string>

#include "transform_common.hpp"

namespace reshard::cli {

inline command add_split_command(CLI::App& app) {
  struct options {
    std::string checkpoint, dst_dir, dst_strategy, prefix = "checkpoint_";
    transform_flags flags;
  };
  auto o = std::make_shared<options>();
  CLI::App* sub = app.add_subcommand(
      "split", "Split a checkpoint of full tensors into DST_DIR/rank_<t>/<prefix><t>.ckpt by a strategy");
  sub->add_option("--checkpoint", o->checkpoint, "the checkpoint of full tensors (.ckpt, .safetensors, or a Hugging Face checkpoint directory), or a PyTorch DCP checkpoint directory (read from its chunks)")
      ->required();
  sub->add_option("--dst-dir", o->dst_dir,
                  "where to write DST_DIR/rank_<t>/<prefix><t>.ckpt (.safetensors; --format hf: the directories "
                  "DST_DIR/rank_<t>/<prefix><t>/)")
      ->required();
  sub->add_option("--dst-strategy", o->dst_strategy, "the target strategy file")->required();
  sub->add_option("--prefix", o->prefix, "file name prefix of the outputs (default checkpoint_)");
  add_transform_flags(sub, o->flags, true, true);

  return {sub, [o] {
            check_shard_size(o->flags);
            const auto s = io::split_checkpoint(o->checkpoint, o->dst_dir, o->dst_strategy, o->prefix,
                                                transform_options_of(o->flags));
            print_summary("reshard split", targets_line("split", o->checkpoint, o->dst_dir, target_count(s, o->flags.format == "hf", o->flags.format), o->flags.format),
                          s, o->flags);
          }};
}

}  // namespace reshard::cli
