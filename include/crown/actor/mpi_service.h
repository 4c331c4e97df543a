// MpiService: how the layers above the actor kernel (tensor collectives,
// RDMA windows, ...) reach MPI without seeing bootstrap's internals or
// mpi.h. Bootstrap implements it with the MPI service thread (THR-1);
// Proc::mpi() hands it out.
//
// PLACEHOLDER interface, to be completed by the asynchronous MPI service.
#pragma once

#include <functional>

namespace crown {

class MpiService {
 public:
  virtual ~MpiService() = default;
  /// Runs `fn` on the MPI service thread and waits; rethrows what it throws.
  virtual void call(std::function<void()> fn) = 0;
};

}  // namespace crown
