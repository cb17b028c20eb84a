// examples/cli/convert_command.hpp: `reshard convert`: one checkpoint from ckpt to safetensors or
// back, tensor for tensor.
#pragma once

#include <memory>
#include <string>

#include "transform_common.hpp"

namespace reshard::cli {

inline command add_convert_command(CLI::App& app) {
  struct options {
    std::string in, out;
    transform_flags flags;
  };
  auto o = std::make_shared<options>();
  CLI::App* sub = app.add_subcommand("convert", "Convert one checkpoint between ckpt and safetensors (by the names)");
  sub->add_option("--in", o->in, "the checkpoint to read (.ckpt, .safetensors, a Hugging Face checkpoint directory, or a "
                  "PyTorch DCP checkpoint directory, which holds .metadata)")->required();
  sub->add_option("--out", o->out, "the file to write (*.safetensors for safetensors, else ckpt), or with --format hf or dcp a directory")->required();
  add_transform_flags(sub, o->flags, false, false);
  add_file_format_flags(sub, o->flags, true);

  return {sub, [o, sub] {
            o->flags.format_given = sub->count("--format") > 0;
            check_file_format(o->flags, o->out);
            const auto s = io::convert_checkpoint(o->in, o->out, transform_options_of(o->flags));
            print_summary("reshard convert", "converted " + o->in + " -> " + o->out, s, o->flags);
          }};
}

}  // namespace reshard::cli
