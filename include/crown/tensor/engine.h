// Engine: the tensor engine of one proc, spawned as a mesh actor on every
// proc of a TensorMesh (on first use). It holds the ref table (ref id ->
// this proc's shard, or the Failure that poisoned it) and runs the commands
// of its controller's batches in order (ORD-1: batches and fetches from the
// controller arrive in send order). Collectives go through the MPI service
// (THR-1), over one communicator per set of mesh dimensions made when the
// engine starts. Runs on the actor's thread, one message at a time.
#pragma once

#include <cstdint>
#include <memory>

#include "crown/actor/actor.h"
#include "crown/tensor/command.h"

namespace crown::tensor {

class Engine : public Actor {
 public:
  /// `seed` makes rand's generator on each proc (seed mixed with the rank).
  explicit Engine(std::uint64_t seed);
  ~Engine() override;

  /// The shard behind `ref` here; throws crown::Error naming the Failure of
  /// a poisoned ref, or saying it is not defined.
  LocalTensor shard(RefId ref) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace crown::tensor

