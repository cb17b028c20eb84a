// examples/cli/transform_command.hpp: `reshard transform`: a whole distributed checkpoint from
// one strategy to another (MindSpore's transform_checkpoints), any M ranks to any N ranks.
#pragma once

#include <csignal>
#include <cstdlib>
#include <memory>
#include <string>

#include "transform_common.hpp"

#ifdef RESHARD_CLI_MPI
#include <reshard/mpi/transform.hpp>
#endif

namespace reshard::cli {

#ifdef RESHARD_CLI_MPI
// Test-only: RESHARD_TEST_KILL_PROCESS=<p> makes process p of `mpirun -n K reshard transform`
// kill itself (SIGKILL) once its first target file is written, as a crash would
// (verify/mpi/transform.sh checks that no complete-looking wrong output is left).
inline std::function<void(const io::transform_progress&)> test_kill_hook() {
  const char* v = std::getenv("RESHARD_TEST_KILL_PROCESS");
  if (!v || std::atoi(v) != processes().index) return {};
  return [](const io::transform_progress& p) {
    if (p.files_done >= 1) std::raise(SIGKILL);
  };
}
#endif

inline command add_transform_command(CLI::App& app) {
  struct options {
    std::string src_dir, dst_dir, src_strategy, dst_strategy, prefix = "checkpoint_";
    transform_flags flags;
  };
  auto o = std::make_shared<options>();
  CLI::App* sub = app.add_subcommand(
      "transform", "Convert a distributed checkpoint (SRC_DIR/rank_<r>/*.ckpt) from one strategy to another");
  sub->add_option("--src-dir", o->src_dir, "the source checkpoint: SRC_DIR/rank_<r>/<last *.ckpt or *.safetensors>")
      ->required();
  sub->add_option("--dst-dir", o->dst_dir,
                  "where to write DST_DIR/rank_<t>/<prefix><t>.ckpt (.safetensors; --format hf: the directories "
                  "DST_DIR/rank_<t>/<prefix><t>/)")
      ->required();
  sub->add_option("--src-strategy", o->src_strategy,
                  "the source strategy file (protobuf, or JSON if *.json); none = unsplit on one rank");
  sub->add_option("--dst-strategy", o->dst_strategy, "the target strategy file; none = unsplit on one rank");
  sub->add_option("--prefix", o->prefix, "file name prefix of the outputs (default checkpoint_)");
  add_transform_flags(sub, o->flags, true, true);
  sub->footer(
      "Example (8 ranks to 4):\n"
      "  reshard transform --src-dir train --dst-dir tune \\\n"
      "                    --src-strategy train_strategy.ckpt --dst-strategy tune_strategy.ckpt");

  return {sub, [o] {
            check_shard_size(o->flags);
#ifdef RESHARD_CLI_MPI
            if (processes().mpi) {  // mpirun -n K: the target ranks split among the K processes
              mpi::parallel_transform_options po;
              po.local_progress = test_kill_hook();
              po.file_tensors = false;  // the summary prints no tensors (a manifest gets them anyway)
              const auto s = mpi::transform_checkpoints(MPI_COMM_WORLD, o->src_dir, o->dst_dir, o->prefix,
                                                        o->src_strategy, o->dst_strategy,
                                                        transform_options_of(o->flags), po);
              if (processes().index != 0) return;
              std::string procs(", ");
              procs.append(std::to_string(s.shares.size())).append(s.shares.size() == 1 ? " process" : " processes");
              print_summary("reshard transform",
                            targets_line("transformed", o->src_dir, o->dst_dir, target_count(s, o->flags.format == "hf", o->flags.format), o->flags.format, procs), s,
                            o->flags, &s.shares);
              return;
            }
#endif
            const auto s = io::transform_checkpoints(o->src_dir, o->dst_dir, o->prefix, o->src_strategy,
                                                     o->dst_strategy, transform_options_of(o->flags));
            print_summary("reshard transform",
                          targets_line("transformed", o->src_dir, o->dst_dir, target_count(s, o->flags.format == "hf", o->flags.format), o->flags.format), s,
                          o->flags);
          }};
}

}  // namespace reshard::cli
