// examples/cli/verify_command.hpp: `reshard verify`: the outputs of transform, split, merge or
// convert checked against their sources, every tensor made again with the run's options and
// compared byte for byte (io::verify_checkpoints and its kin).
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "transform_common.hpp"

namespace reshard::cli {

inline command add_verify_command(CLI::App& app) {
  struct options {
    std::string src_dir, in, dst_dir, out, src_strategy, dst_strategy, prefix = "checkpoint_", manifest;
    transform_flags flags;  // the run's --format, selection, renames and casts; --jobs, --read-mode
  };
  auto o = std::make_shared<options>();
  CLI::App* sub = app.add_subcommand(
      "verify",
      "Check the outputs of transform, split, merge or convert against their sources, byte for byte, given the "
      "options of the run");
  sub->add_option("--src-dir", o->src_dir,
                  "the sources of a transform or merge: SRC_DIR/rank_<r>/<last *.ckpt or *.safetensors>");
  sub->add_option("--in,--checkpoint", o->in,
                  "the source of a split or convert: one checkpoint (.ckpt, .safetensors, or a Hugging Face "
                  "checkpoint directory)");
  sub->add_option("--dst-dir", o->dst_dir,
                  "the outputs of a transform or split: DST_DIR/rank_<t>/<prefix><t>.ckpt (or .safetensors, or with "
                  "--format hf the directories DST_DIR/rank_<t>/<prefix><t>/)");
  sub->add_option("--out", o->out,
                  "the output of a merge or convert: one file, or with --format hf a Hugging Face checkpoint "
                  "directory");
  sub->add_option("--src-strategy", o->src_strategy, "the source strategy file (with --src-dir); none = unsplit on one rank");
  sub->add_option("--dst-strategy", o->dst_strategy, "the target strategy file (with --dst-dir); none = unsplit on one rank");
  sub->add_option("--prefix", o->prefix, "file name prefix of the checked files (with --dst-dir; default checkpoint_)");
  add_format_option(sub, o->flags.format,
                    "the format the run wrote: with --dst-dir ckpt (the default), safetensors or hf (Hugging Face "
                    "directories DST_DIR/rank_<t>/<prefix><t>/); with --out ckpt or safetensors as its name says, or "
                    "hf (a directory), or (both) dcp: a PyTorch DCP directory; a Hugging Face checkpoint is compared "
                    "tensor by tensor, whatever its shards, a DCP one chunk by chunk and its .metadata with the run's",
                    true);
  add_name_options(sub, o->flags);  // the run's selection, renames and casts
  sub->add_option("--jobs,-j", o->flags.jobs, "target files checked in parallel (default 0: one per core)");
  sub->add_option("--read-mode", o->flags.read_mode, "how source tensors are read: auto (pread), pread or mmap")
      ->check(CLI::IsMember({"auto", "mmap", "pread"}));
  sub->add_option("--manifest", o->manifest,
                  "also check the files a manifest lists (written by --manifest): sizes, SHA-256 "
                  "and parameters")
      ->check(CLI::ExistingPath);  // what it is (a directory, a FIFO, ...) is told when it is read
  sub->add_flag("--progress", o->flags.progress, "show a progress bar on stderr (the default when stderr is a terminal)");
  sub->add_flag("--json", o->flags.json, "print the report as JSON");
  sub->footer(
      "Give verify the run's sources and outputs, and the options that chose what it wrote: --format,\n"
      "--include, --exclude, --rename, --rename-map, --dtype (the globs match the source names):\n"
      "  transform  --src-dir D --dst-dir E [--src-strategy S] [--dst-strategy T] [--prefix P]\n"
      "  split      --in FILE   --dst-dir E --dst-strategy T [--prefix P]\n"
      "  merge      --src-dir D --out FILE [--src-strategy S]\n"
      "  convert    --in FILE   --out FILE\n"
      "Exit status 0 when every file and tensor matches, 1 when any differs (each difference is listed:\n"
      "file, parameter, and what: missing, extra, dtype, dims, or the first differing element).");

  return {sub, [o, sub] {
            const bool from_dir = !o->src_dir.empty(), to_dir = !o->dst_dir.empty();
            if (from_dir == !o->in.empty())
              throw CLI::ValidationError("--src-dir", from_dir ? "give --src-dir or --in, not both"
                                                               : "the sources are required: --src-dir or --in");
            if (to_dir == !o->out.empty())
              throw CLI::ValidationError("--dst-dir", to_dir ? "give --dst-dir or --out, not both"
                                                             : "the outputs are required: --dst-dir or --out");
            if (!from_dir && sub->count("--src-strategy"))
              throw CLI::ValidationError("--src-strategy", "only with --src-dir (--in is a checkpoint of full tensors)");
            if (!to_dir && sub->count("--dst-strategy"))
              throw CLI::ValidationError("--dst-strategy", "only with --dst-dir (--out is a checkpoint of full tensors)");
            if (!to_dir && sub->count("--prefix")) throw CLI::ValidationError("--prefix", "only with --dst-dir");
            o->flags.format_given = sub->count("--format") > 0;
            if (!to_dir) check_file_format(o->flags, o->out);
            const io::transform_options opts = transform_options_of(o->flags);
            const std::string checked = to_dir ? o->dst_dir : o->out, source = from_dir ? o->src_dir : o->in;
            auto r = from_dir && to_dir ? io::verify_checkpoints(o->src_dir, o->dst_dir, o->prefix, o->src_strategy,
                                                                 o->dst_strategy, opts)
                     : from_dir         ? io::verify_merged_checkpoint(o->src_dir, o->out, o->src_strategy, opts)
                     : to_dir ? io::verify_split_checkpoint(o->in, o->dst_dir, o->dst_strategy, o->prefix, opts)
                              : io::verify_converted_checkpoint(o->in, o->out, opts);
            if (!o->manifest.empty())
              for (auto& m : io::check_manifest(o->manifest, o->flags.jobs)) r.mismatches.push_back(std::move(m));
            const auto seconds = [](double v) {
              char b[32];
              std::snprintf(b, sizeof b, "%.3f s", v);
              return std::string(b);
            };
            const std::string differences = std::to_string(r.mismatches.size()) + " difference" +
                                            (r.mismatches.size() == 1 ? "" : "s");
            if (o->flags.json) {
              print_json(std::cout, io::to_json(r));
            } else {
              std::cout << "verified " << checked << " against " << source << ": " << r.files
                        << " file" << (r.files == 1 ? "" : "s") << ", " << r.tensors << " tensor"
                        << (r.tensors == 1 ? "" : "s") << ", "
                        << format_bytes(static_cast<double>(r.bytes)) << " compared in "
                        << seconds(r.seconds) << ": " << (r.ok() ? "identical" : differences)
                        << '\n';
              for (const auto& m : r.mismatches)
                std::cout << "  " << m.file.string()
                          << (m.parameter.empty() ? std::string() : ": parameter " + io::detail::quote_name(m.parameter))
                          << ": " << m.what << '\n';
            }
            if (!r.ok())
              report_error(differences + " between " + checked + " and what " + source +
                           " makes (listed on stdout)");
          }};
}

}  // namespace reshard::cli
