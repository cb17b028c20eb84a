// reshard/mpi/common.hpp: what the MPI adapters share (opt-in: reshard::mpi): checking MPI return
// codes and that a communicator is usable, with errors naming the operation.
#pragma once

#include <mpi.h>

#include <string>

#include "reshard/error.hpp"

namespace reshard::mpi::detail {

/// Throws reshard::error "<op>: <call> failed: <MPI's text>" unless `code` is MPI_SUCCESS.
inline void check_mpi(int code, const char* op, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  report_error(std::string(op) + ": " + call + " failed: " + std::string(text, len));
}

/// Checks that MPI is running and `comm` is a communicator, and returns its size and this
/// process's rank in it; errors are "<op>: ...".
struct comm_info {
  int size = 0;
  int me = 0;
};
inline comm_info expect_comm(MPI_Comm comm, const char* op) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized)
    report_error(std::string(op) +
                 ": MPI is not initialized (call MPI_Init first) or already finalized");
  if (comm == MPI_COMM_NULL) report_error(std::string(op) + ": the communicator is MPI_COMM_NULL");
  comm_info c;
  check_mpi(MPI_Comm_size(comm, &c.size), op, "MPI_Comm_size");
  check_mpi(MPI_Comm_rank(comm, &c.me), op, "MPI_Comm_rank");
  return c;
}

}  // namespace reshard::mpi::detail
