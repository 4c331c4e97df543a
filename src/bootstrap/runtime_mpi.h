// The Runtime's MPI state (crown/bootstrap/runtime.h), shared by the files
// that make up the Runtime: bootstrap (runtime.cpp) and shutdown
// (runtime_finish.cpp).
#pragma once

#include <mpi.h>

#include <memory>

#include "bootstrap/mpi_service.h"
#include "bootstrap/trace_setup.h"
#include "crown/bootstrap/runtime.h"

namespace crown {

struct Runtime::Mpi {
  // Shared with the Proc (Proc::Options::mpi), which may be destroyed after
  // it; MPI_Finalize still runs on it, last, in finish().
  std::shared_ptr<detail::MpiService> service = std::make_shared<detail::MpiService>();
  MPI_Comm comm = MPI_COMM_NULL;
  bool ownsMpi = false;  // crown initialised MPI, so crown finalises it
  detail::TraceSetup trace;  // CROWN_TRACE: the controller writes it in finish()
};

}  // namespace crown
