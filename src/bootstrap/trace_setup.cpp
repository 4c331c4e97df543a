#include "bootstrap/trace_setup.h"

#include <limits>

#include "bootstrap/mpi_check.h"
#include "crown/common/env.h"
#include "crown/common/log.h"
#include "crown/common/trace.h"

namespace crown::detail {
namespace {

constexpr int kRounds = 8;
constexpr int kClockTag = 7101;

std::string broadcastPath(MPI_Comm comm, int rank) {
  std::string path = rank == 0 ? env::get("CROWN_TRACE").value_or("") : "";
  int length = static_cast<int>(path.size());
  CROWN_CHECK_MPI(MPI_Bcast(&length, 1, MPI_INT, 0, comm));
  path.resize(static_cast<std::size_t>(length));
  if (length > 0) CROWN_CHECK_MPI(MPI_Bcast(path.data(), length, MPI_CHAR, 0, comm));
  return path;
}

// Rank 0 and `peer`: rank 0 sends its time, the peer answers with its own,
// and the exchange of least round trip gives peer - midpoint.
std::int64_t measureOffset(MPI_Comm comm, int peer) {
  std::int64_t best = std::numeric_limits<std::int64_t>::max(), offset = 0;
  for (int i = 0; i < kRounds; ++i) {
    std::int64_t sent = trace::now(), theirs = 0;
    CROWN_CHECK_MPI(MPI_Send(&sent, 1, MPI_INT64_T, peer, kClockTag, comm));
    CROWN_CHECK_MPI(MPI_Recv(&theirs, 1, MPI_INT64_T, peer, kClockTag, comm, MPI_STATUS_IGNORE));
    std::int64_t back = trace::now();
    if (back - sent < best) {
      best = back - sent;
      offset = theirs - (sent + back) / 2;
    }
  }
  return offset;
}

void answerClock(MPI_Comm comm) {
  for (int i = 0; i < kRounds; ++i) {
    std::int64_t theirs = 0;
    CROWN_CHECK_MPI(MPI_Recv(&theirs, 1, MPI_INT64_T, 0, kClockTag, comm, MPI_STATUS_IGNORE));
    std::int64_t mine = trace::now();
    CROWN_CHECK_MPI(MPI_Send(&mine, 1, MPI_INT64_T, 0, kClockTag, comm));
  }
}

}  // namespace

TraceSetup setUpTrace(MPI_Comm comm, int rank, int size) {
  TraceSetup setup;
  setup.path = broadcastPath(comm, rank);
  if (setup.path.empty()) return setup;
  trace::enable(static_cast<std::size_t>(
      env::integer("CROWN_TRACE_MAX_EVENTS", 1000000, 0, std::int64_t{1} << 32)));
  if (rank == 0) {
    setup.offsetsNs.assign(static_cast<std::size_t>(size), 0);
    for (int peer = 1; peer < size; ++peer) setup.offsetsNs[peer] = measureOffset(comm, peer);
    log::get().info("tracing to {}", setup.path);
  } else {
    answerClock(comm);
  }
  return setup;
}

}  // namespace crown::detail
