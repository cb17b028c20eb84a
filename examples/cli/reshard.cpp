// examples/cli/reshard.cpp: the command-line program `reshard`. Thin: parse arguments, call the
// library, print. Each subcommand lives in examples/cli/<name>_command.hpp.
//
// Exit codes (docs/cli.md#exit-codes): 0 success; 1 a failed run (bad input: a layout, a file, an
// impossible request; an I/O error; out of memory); 2 bad usage (unknown option, missing option,
// bad option value, options that do not go together, whether found while parsing or when the
// subcommand checks its options); 3 internal error only (a bug: please report it).
//
// Started by an MPI launcher as K processes (`mpirun -n K reshard transform ...`), `reshard
// transform` splits its target ranks among them (reshard/mpi/transform.hpp) and process 0 alone
// prints; the other subcommands run as one process only. A program built without MPI refuses
// to run as several processes, which would all write the same files.
#include <algorithm>
#include <csignal>
#include <exception>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include <sys/resource.h>

#ifdef RESHARD_CLI_MPI
#include <mpi.h>

#include "reshard/mpi/launch.hpp"
#endif

#include "check_plan_command.hpp"
#include "check_rank_list_command.hpp"
#include "common.hpp"
#include "convert_command.hpp"
#include "execute_command.hpp"
#include "inspect_command.hpp"
#include "layout_command.hpp"
#include "merge_command.hpp"
#include "merge_strategies_command.hpp"
#include "plan_command.hpp"
#include "rank_list_command.hpp"
#include "split_command.hpp"
#include "transform_command.hpp"
#include "transform_rank_command.hpp"
#include "verify_command.hpp"
#include "reshard/version.hpp"

namespace {

int run(int argc, char** argv) {
  using namespace reshard;
  const bool speaks = cli::processes().index == 0;  // only process 0 prints
  CLI::App app{"reshard: layouts of distributed tensors, minimal redistribution plans and MindSpore "
               "checkpoint transformation (MindSpore, DTensor and JAX layouts; any number of ranks M -> N)",
               "reshard"};
  app.set_version_flag("--version", std::string("reshard ") + RESHARD_VERSION_STRING);
  app.require_subcommand(1);
  app.footer("Run 'reshard <subcommand> --help' for the options of a subcommand.");

  const std::vector<cli::command> commands{
      cli::add_layout_command(app),
      cli::add_plan_command(app),
      cli::add_check_plan_command(app),
      cli::add_transform_command(app),
      cli::add_transform_rank_command(app),
      cli::add_rank_list_command(app),
      cli::add_check_rank_list_command(app),
      cli::add_merge_strategies_command(app),
      cli::add_inspect_command(app),
      cli::add_merge_command(app),
      cli::add_split_command(app),
      cli::add_convert_command(app),
      cli::add_verify_command(app),
      cli::add_execute_command(app),
  };

  // "reshard plan" when a subcommand was given, for messages
  const auto prog = [&app] {
    const auto subs = app.get_subcommands();
    return subs.empty() ? std::string("reshard") : "reshard " + subs.front()->get_name();
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return speaks ? app.exit(e) : 0;  // --help, --version
    if (!speaks) return 2;
    std::string message = e.what();
    if (app.get_subcommands().empty() && dynamic_cast<const CLI::RequiredError*>(&e)) {
      std::string names;
      for (const auto& c : commands) names += (names.empty() ? "" : ", ") + c.app->get_name();
      if (argc > 1 && argv[1][0] != '-')
        message = std::string("unknown subcommand '") + argv[1] + "' (valid: " + names + ")";
      else if (argc > 1)
        message = std::string("unknown option '") + argv[1] + "'; a subcommand is required: " +
                  names;
      else
        message = "a subcommand is required: " + names;
    }
    std::cerr << prog() << ": " << message << " (see '" << prog() << " --help')\n";
    return 2;
  }
  if (cli::processes().size > 1 && app.get_subcommands().front()->get_name() != "transform") {
    if (speaks)
      std::cerr << prog() << ": runs as one process; of the subcommands only 'reshard transform' runs as "
                << cli::processes().size << " processes (mpirun -n " << cli::processes().size
                << "): start this one without mpirun\n";
    return 2;
  }
  try {
    for (const auto& c : commands)
      if (c.app->parsed()) c.run();
  } catch (const reshard::error& e) {
    if (speaks) std::cerr << prog() << ": " << e.what() << '\n';
    return 1;
  } catch (const CLI::Error& e) {  // a subcommand's own check of its options (CLI::ValidationError)
    if (speaks) std::cerr << prog() << ": " << e.what() << " (see '" << prog() << " --help')\n";
    return 2;
  } catch (const std::bad_alloc&) {
    if (speaks) std::cerr << prog() << ": out of memory\n";
    return 1;
  } catch (const std::exception& e) {
    if (speaks) std::cerr << prog() << ": internal error (please report it): " << e.what() << '\n';
    return 3;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // A write beyond the file-size limit (ulimit -f) then fails with EFBIG, reported with the
  // file's name, and the temporaries are removed, instead of SIGXFSZ killing the program.
  std::signal(SIGXFSZ, SIG_IGN);
  // The source files stay open from indexing to reading within a share of RLIMIT_NOFILE
  // (io::descriptor_budget): its soft limit is raised towards the hard one, up to 65536 (this
  // program calls no select(2), which cannot take descriptors of 1024 and above).
  if (::rlimit l{}; ::getrlimit(RLIMIT_NOFILE, &l) == 0 && l.rlim_cur < std::min<::rlim_t>(l.rlim_max, 65536)) {
    l.rlim_cur = std::min<::rlim_t>(l.rlim_max, 65536);
    ::setrlimit(RLIMIT_NOFILE, &l);  // best effort: the budget reads the limit it gets
  }
  auto& group = reshard::cli::processes();
  group = reshard::cli::launcher_environment();
  if (!group.launched) return run(argc, argv);
#ifdef RESHARD_CLI_MPI
  // one machine: Open MPI's shared memory, not the fabric probes of its default start (0.2 s)
  reshard::mpi::use_local_transports();
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &group.index);
  MPI_Comm_size(MPI_COMM_WORLD, &group.size);
  group.mpi = true;
  const int code = run(argc, argv);
  MPI_Finalize();
  return code;
#else
  if (group.size == 1) return run(argc, argv);
  if (group.index == 0)
    std::cerr << "reshard: started as " << group.size << " processes by an MPI launcher, but this reshard was "
              << "built without MPI, and its processes would all write the same files: build it with MPI "
              << "(an MPI installed, CMake option RESHARD_MPI=ON), or run it as one process\n";
  return 2;
#endif
}
