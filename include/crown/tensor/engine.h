// Engine: the tensor engine of one proc, spawned as a mesh actor on every
// proc of a TensorMesh (on first use). It holds the ref table (ref id ->
// this proc's shard, or the Failure that poisoned it) and runs the commands
// of its controller's batches in order (ORD-1: batches and fetches from the
// controller arrive in send order). Collectives go through the MPI service
// (THR-1), over one communicator per set of mesh dimensions made when the
// engine starts. Runs on the actor's thread, one message at a time.
#pragma once

#include <atomic>
#include <chrono>
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

  /// The engine of actor `id` if this process hosts it, else null: actors
  /// of the same proc reach the engine's refs through it (an endpoint that
  /// is passed a mesh tensor gets its shard here).
  static Engine* find(const ActorId& id);

  /// Waits until the engine of actor `id` in this process exists and has
  /// run its first `batches` batches (AwaitEngine); false after `timeout`,
  /// once `giveUp` is set (the waiting engine is being destroyed), or when
  /// that engine is destroyed meanwhile.
  static bool awaitRun(const ActorId& id, std::uint64_t batches, std::chrono::milliseconds timeout,
                       const std::atomic<bool>& giveUp);

  /// The shard behind `ref` here, once this engine has been given `batches`
  /// batches and run every command of them (the caller's message may come
  /// before the batch that defines the ref: it waits at most `timeout`).
  /// Throws crown::Error naming the Failure of a poisoned ref, or saying it
  /// is not defined.
  LocalTensor shard(RefId ref, std::uint64_t batches = 0,
                    std::chrono::milliseconds timeout = std::chrono::seconds(60)) const;
  /// Defines `ref` here as `tensor` (what an actor of this proc made: rref).
  void define(RefId ref, LocalTensor tensor);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  bool registered_ = false;  // in find()'s table (the actor's thread only)
};

}  // namespace crown::tensor

