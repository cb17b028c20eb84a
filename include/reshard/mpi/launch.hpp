// reshard/mpi/launch.hpp: what a program of few, small messages (`mpirun -n K reshard transform`)
// asks of its MPI before MPI_Init (opt-in: reshard::mpi).
//
// Open MPI 4 spends 0.2 s of MPI_Init on a machine without a fabric probing the fabric libraries
// of its `cm` messaging layer (its OFI, PSM and PSM2 components), 0.02 s with the `ob1` layer over
// shared memory (docs/benchmarks.md, "Many ranks, processes"). A checkpoint transform sends a few
// verdicts and its summaries: no fabric would make them faster. So when Open MPI started every
// process of the job on this machine and the user chose no messaging layer and no transport (in
// the environment, as `mpirun --mca pml ...` and `--mca btl ...` pass them), local_transports
// names ob1 over shared memory and self, which every single-machine Open MPI has; across
// machines, and for every other MPI, it names nothing and MPI chooses as it always does.
#pragma once

#include <mpi.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace reshard::mpi {

/// The environment variables (name, value) that use_local_transports sets, given the
/// environment `env` (a function like std::getenv: a name to its value, or null when unset):
/// OMPI_MCA_pml=ob1 and OMPI_MCA_btl=self,vader (self,sm from Open MPI 5) when Open MPI
/// started all the job's processes on this machine (OMPI_COMM_WORLD_LOCAL_SIZE equals
/// OMPI_COMM_WORLD_SIZE, both set) and none of OMPI_MCA_pml, OMPI_MCA_btl and OMPI_MCA_mtl is
/// set; otherwise none.
template <class Getenv>
std::vector<std::pair<std::string, std::string>> local_transports(Getenv&& env) {
  const char* size = env("OMPI_COMM_WORLD_SIZE");
  const char* local = env("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (!size || !local || !*size || std::string(size) != local) return {};
  for (const char* chosen : {"OMPI_MCA_pml", "OMPI_MCA_btl", "OMPI_MCA_mtl"})
    if (env(chosen)) return {};
#if defined(OMPI_MAJOR_VERSION) && OMPI_MAJOR_VERSION >= 5
  const char* shared_memory = "self,sm";  // Open MPI 5 renamed vader sm
#else
  const char* shared_memory = "self,vader";
#endif
  return {{"OMPI_MCA_pml", "ob1"}, {"OMPI_MCA_btl", shared_memory}};
}

/// Before MPI_Init: sets what local_transports(std::getenv) names (never replacing a variable
/// that is set). Returns whether it set any.
inline bool use_local_transports() {
  const auto settings = local_transports([](const char* name) -> const char* { return std::getenv(name); });
  for (const auto& [name, value] : settings) ::setenv(name.c_str(), value.c_str(), 0);
  return !settings.empty();
}

}  // namespace reshard::mpi
