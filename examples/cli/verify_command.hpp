// examples/cli/verify_command.hpp: `reshard verify`: a converted distributed checkpoint checked
// against its sources, every tensor made again and compared byte for byte (io::verify_checkpoints).
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "transform_common.hpp"

namespace reshard::cli {

inline command add_verify_command(CLI::App& app) {
  struct options {
    std::string src_dir, dst_dir, src_strategy, dst_strategy, prefix = "checkpoint_", format = "ckpt", read_mode = "auto",
        manifest;
    std::vector<std::string> dtypes;
    unsigned jobs = 0;
    bool json = false, progress = false;
  };
  auto o = std::make_shared<options>();
  CLI::App* sub = app.add_subcommand(
      "verify", "Check a converted checkpoint (DST_DIR/rank_<t>/<prefix><t>.ckpt) against its sources, byte for byte");
  sub->add_option("--src-dir", o->src_dir, "the source checkpoint: SRC_DIR/rank_<r>/<last *.ckpt or *.safetensors>")
      ->required();
  sub->add_option("--dst-dir", o->dst_dir, "the checkpoint to check: DST_DIR/rank_<t>/<prefix><t>.ckpt")->required();
  sub->add_option("--src-strategy", o->src_strategy, "the source strategy file; none = unsplit on one rank");
  sub->add_option("--dst-strategy", o->dst_strategy, "the target strategy file; none = unsplit on one rank");
  sub->add_option("--prefix", o->prefix, "file name prefix of the checked files (default checkpoint_)");
  sub->add_option("--format", o->format, "format of the checked files: ckpt (default) or safetensors")
      ->check(CLI::IsMember({"ckpt", "safetensors"}));
  sub->add_option("--jobs,-j", o->jobs, "target files checked in parallel (default 0: one per core)");
  sub->add_option("--read-mode", o->read_mode, "how source tensors are read: auto (pread), pread or mmap")
      ->check(CLI::IsMember({"auto", "mmap", "pread"}));
  sub->add_option("--manifest", o->manifest,
                  "also check the files a manifest lists (written by --manifest): sizes, SHA-256 "
                  "and parameters")
      ->check(CLI::ExistingPath);  // what it is (a directory, a FIFO, ...) is told when it is read
  add_dtype_option(sub, o->dtypes);  // the casts the conversion did
  sub->add_flag("--progress", o->progress, "show a progress bar on stderr (the default when stderr is a terminal)");
  sub->add_flag("--json", o->json, "print the report as JSON");
  sub->footer(
      "Exit status 0 when every file and tensor matches, 1 when any differs (each difference is listed:\n"
      "file, parameter, and what: missing, extra, dtype, dims, or the first differing element).");

  return {sub, [o] {
            transform_flags f;
            f.format = o->format;
            f.jobs = o->jobs;
            f.read_mode = o->read_mode;
            f.progress = o->progress;
            f.dtypes = o->dtypes;
            auto r = io::verify_checkpoints(o->src_dir, o->dst_dir, o->prefix, o->src_strategy, o->dst_strategy,
                                            transform_options_of(f));
            if (!o->manifest.empty())
              for (auto& m : io::check_manifest(o->manifest, o->jobs)) r.mismatches.push_back(std::move(m));
            const auto seconds = [](double v) {
              char b[32];
              std::snprintf(b, sizeof b, "%.3f s", v);
              return std::string(b);
            };
            const std::string differences = std::to_string(r.mismatches.size()) + " difference" +
                                            (r.mismatches.size() == 1 ? "" : "s");
            if (o->json) {
              nlohmann::json j;
              j["ok"] = r.ok();
              j["files"] = r.files;
              j["tensors"] = r.tensors;
              j["bytes"] = r.bytes;
              j["seconds"] = r.seconds;
              j["mismatches"] = nlohmann::json::array();
              for (const auto& m : r.mismatches)
                j["mismatches"].push_back({{"file", m.file.string()}, {"parameter", m.parameter}, {"what", m.what}});
              print_json(std::cout, j);
            } else {
              std::cout << "verified " << o->dst_dir << " against " << o->src_dir << ": " << r.files
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
              report_error(differences + " between " + o->dst_dir + " and what " + o->src_dir +
                           " makes (listed on stdout)");
          }};
}

}  // namespace reshard::cli
