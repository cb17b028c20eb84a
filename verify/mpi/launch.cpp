// verify/mpi/launch.cpp (mpi.launch, 2 processes): reshard::mpi::local_transports, what a
// program sets before MPI_Init (include/reshard/mpi/launch.hpp).
//
// 1. Every combination of the variables it reads (Open MPI's world and local sizes: unset,
//    empty, equal or not; a messaging layer, transport or mtl chosen by the user: unset or set,
//    even empty) against its specification: ob1 over self and shared memory exactly when Open MPI
//    started all the job's processes on this machine and the user chose none of the three; an
//    unrelated variable changes nothing.
// 2. This run (started by mpiexec on one machine): use_local_transports() before MPI_Init sets
//    what local_transports names for this environment and replaces no variable already set; then
//    MPI starts and the processes exchange a message.
#include "reshard/mpi/launch.hpp"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "harness.hpp"

namespace {

using settings = std::vector<std::pair<std::string, std::string>>;

// A fake environment: name -> value; absent = unset.
using environment = std::map<std::string, std::string>;

settings transports_of(const environment& env) {
  return reshard::mpi::local_transports([&](const char* name) -> const char* {
    const auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

// The specification, written apart from the function.
bool should_set(const environment& env) {
  const auto size = env.find("OMPI_COMM_WORLD_SIZE"), local = env.find("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (size == env.end() || local == env.end() || size->second.empty() || size->second != local->second) return false;
  return !env.count("OMPI_MCA_pml") && !env.count("OMPI_MCA_btl") && !env.count("OMPI_MCA_mtl");
}

void check_combinations(reshard_mpi_test::harness& h) {
  const std::vector<std::optional<std::string>> sizes{std::nullopt, "", "2", "4"};
  const std::vector<std::optional<std::string>> chosen{std::nullopt, "", "ucx"};
  int cases = 0, set = 0;
  for (const auto& size : sizes)
    for (const auto& local : sizes)
      for (const auto& pml : chosen)
        for (const auto& btl : chosen)
          for (const auto& mtl : chosen)
            for (bool unrelated : {false, true}) {
              environment env;
              if (size) env["OMPI_COMM_WORLD_SIZE"] = *size;
              if (local) env["OMPI_COMM_WORLD_LOCAL_SIZE"] = *local;
              if (pml) env["OMPI_MCA_pml"] = *pml;
              if (btl) env["OMPI_MCA_btl"] = *btl;
              if (mtl) env["OMPI_MCA_mtl"] = *mtl;
              if (unrelated) env["OMPI_MCA_btl_tcp_if_include"] = "eth0";
              const settings got = transports_of(env);
              std::string what = "local_transports of {";
              for (const auto& [k, v] : env) what += k + "=" + v + " ";
              what += "}";
              ++cases;
              if (!should_set(env)) {
                h.check(got.empty(), what + ": sets nothing");
                continue;
              }
              ++set;
              const std::map<std::string, std::string> as_map(got.begin(), got.end());
              const std::string btl_value = as_map.count("OMPI_MCA_btl") ? as_map.at("OMPI_MCA_btl") : "";
              h.check(got.size() == 2 && as_map.count("OMPI_MCA_pml") && as_map.at("OMPI_MCA_pml") == "ob1" &&
                          (btl_value == "self,vader" || btl_value == "self,sm"),
                      what + ": ob1 over self and shared memory (got " + std::to_string(got.size()) + " settings, btl '" +
                          btl_value + "')");
            }
  h.check(cases == 4 * 4 * 3 * 3 * 3 * 2 && set == 2 * 2, "the combinations cover both outcomes (" +
                                                               std::to_string(cases) + " cases, " + std::to_string(set) + " set)");
}

}  // namespace

int main(int argc, char** argv) {
  // before MPI_Init: what this environment asks for, and what was set already
  const settings expected = reshard::mpi::local_transports([](const char* n) -> const char* { return std::getenv(n); });
  std::map<std::string, std::optional<std::string>> before;
  for (const char* name : {"OMPI_MCA_pml", "OMPI_MCA_btl", "OMPI_MCA_mtl"}) {
    const char* v = std::getenv(name);
    before[name] = v ? std::optional<std::string>(v) : std::nullopt;
  }
  const bool applied = reshard::mpi::use_local_transports();
  std::vector<std::string> wrong;
  for (const auto& [name, value] : expected) {
    const char* now = std::getenv(name.c_str());
    if (!now || value != now) wrong.push_back(name + " is not " + value);
  }
  for (const auto& [name, value] : before)
    if (value && (!std::getenv(name.c_str()) || *value != std::getenv(name.c_str())))
      wrong.push_back(name + " was replaced");

  MPI_Init(&argc, &argv);
  {
    reshard_mpi_test::harness h(MPI_COMM_WORLD, "mpi.launch");
    check_combinations(h);
    h.check(applied == !expected.empty(), "use_local_transports says whether it set anything");
    for (const auto& w : wrong) h.check(false, "use_local_transports: " + w);
    if (wrong.empty()) h.check(true, "use_local_transports set what local_transports names, replacing nothing");
    // the processes started with those transports talk
    int mine = h.rank() + 1, sum = 0;
    MPI_Allreduce(&mine, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    h.check(sum == h.size() * (h.size() + 1) / 2, "MPI_Allreduce after MPI_Init with those transports");
    if (h.rank() == 0)
      std::printf("mpi.launch: this run %s\n", expected.empty() ? "left the transports to MPI" : "set OMPI_MCA_pml=ob1 and OMPI_MCA_btl");
    const int code = h.finish();
    MPI_Finalize();
    return code;
  }
}
