// examples/cli/merge_command.hpp: `reshard merge`: one checkpoint of full tensors from a
// distributed checkpoint (MindSpore's load_distributed_checkpoint / merge_sliced_parameter), or
// from a PyTorch DCP checkpoint.
#pragma once

#include <memory>
#include <string>

#include "transform_common.hpp"

namespace reshard::cli {

inline command add_merge_command(CLI::App& app) {
  struct options {
    std::string src_dir, out, src_strategy;
    transform_flags flags;
  };
  auto o = std::make_shared<options>();
  CLI::App* sub = app.add_subcommand("merge", "Merge a distributed checkpoint into one file of full tensors");
  sub->add_option("--src-dir", o->src_dir, "the source checkpoint: SRC_DIR/rank_<r>/<last *.ckpt or *.safetensors>, or a PyTorch DCP "
                  "checkpoint (SRC_DIR holds .metadata; no --src-strategy: its chunks are its layout)")
      ->required();
  sub->add_option("--out", o->out, "the file to write (*.safetensors for safetensors, else ckpt), or with --format hf or dcp a directory")->required();
  sub->add_option("--src-strategy", o->src_strategy, "the source strategy file; none = unsplit on one rank");
  add_transform_flags(sub, o->flags, false, false);
  add_file_format_flags(sub, o->flags, true);

  return {sub, [o, sub] {
            o->flags.format_given = sub->count("--format") > 0;
            check_file_format(o->flags, o->out);
            const auto s = io::merge_checkpoints(o->src_dir, o->out, o->src_strategy, transform_options_of(o->flags));
            print_summary("reshard merge", "merged " + o->src_dir + " -> " + o->out, s, o->flags);
          }};
}

}  // namespace reshard::cli
