// Tracing's part of bootstrap (issue 15, CROWN_TRACE): whether the job is
// traced, and how far each rank's clock is from rank 0's.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

namespace crown::detail {

struct TraceSetup {
  std::string path;                    ///< where the controller writes it; "" when not traced
  std::vector<std::int64_t> offsetsNs; ///< on rank 0: rank r's trace::now() minus rank 0's
};

/// Rank 0's CROWN_TRACE decides for every rank (one broadcast), so a rank
/// launched without the variable is traced too. When traced, starts
/// recording (CROWN_TRACE_MAX_EVENTS per rank) and measures each rank's
/// clock offset by ping-pong with rank 0, the round trip of least delay of
/// several giving the offset (half of it is the error bound). Collective
/// over `comm`; on the MPI thread, while every rank is in bootstrap.
TraceSetup setUpTrace(MPI_Comm comm, int rank, int size);

}  // namespace crown::detail
