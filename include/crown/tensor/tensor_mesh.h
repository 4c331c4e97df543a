// The controller's side of distributed tensors.
//   TensorClient  the engines of a mesh, the ref ids, and the pending batch
//                 of commands (flushed as one cast every CROWN_TENSOR_BATCH
//                 commands, on fetch and on sync); what front ends build on.
//   TensorMesh    a C++ controller's API over it: factories and kernels
//                 that return DTensors.
//   DTensor       one distributed tensor: a ref on every proc of the mesh,
//                 with its shape and type known on the controller. When the
//                 last copy goes, the ref is deleted on every proc (batched).
// Thread-safe: a mutex guards the batch.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "crown/mesh/proc_mesh.h"
#include "crown/tensor/command.h"
#include "crown/tensor/engine.h"

namespace crown::tensor {

class TensorClient {
 public:
  /// Spawns the engines on every proc of `procs` (blocks until they run).
  explicit TensorClient(const ProcMesh& procs, std::uint64_t seed = 0);
  ~TensorClient();
  TensorClient(const TensorClient&) = delete;
  TensorClient& operator=(const TensorClient&) = delete;

  const mesh::Shape& shape() const { return engines_.shape(); }
  /// A ref id no other tensor of this client has.
  RefId newRef();
  /// The first of `count` such ids in a row, for a front end that hands
  /// them out itself (Python's, one per recorded op).
  RefId newRefs(std::size_t count);
  /// Appends to the batch; flushes when it is full.
  void record(Command command);
  /// Appends to the batch without flushing; true when the batch is now full
  /// (the caller flushes: a front end that must not block while it holds a lock).
  bool append(Command command);
  /// Deletes `ref` on every proc with the next flush.
  void drop(RefId ref);
  /// Casts the pending batch to every engine.
  void flush();
  /// Flushes, then reads `ref`'s shard on `rank` (a world rank of the mesh).
  Future<FetchReply> fetchReply(RefId ref, std::size_t rank);
  /// fetchReply() as a tensor; a poisoned ref fails it with RemoteError.
  Future<LocalTensor> fetch(RefId ref, std::size_t rank);
  /// Batches cast so far: an actor of a proc that is given a ref with this
  /// count reads it once its engine has them (Engine::shard).
  std::uint64_t batchesSent() const;
  /// The engines' mesh actor id, the same on every proc.
  std::uint64_t engineLocal() const { return engines_.localId(); }
  /// Flushes and waits until every engine has run every command so far;
  /// returns each engine's stats, by rank in the mesh (row-major).
  std::vector<EngineStats> sync();
  /// Records the move of `ref`'s shards to `target`'s engines, where they
  /// become `result` (a ref of `target`), by the routes of
  /// transferRoutes(), and flushes both clients. Between two
  /// engines of one proc nothing goes over MPI: the target gets a copy, or
  /// with `view` the shard itself (writes to either show in both). A view
  /// joins the two clients' view group (viewGroup_).
  void moveTo(TensorClient& target, RefId ref, RefId result, bool view = false,
              std::string origin = {});

 private:
  // The clients whose engines share shards (views) form a view group,
  // transitively: a view of a view is ordered after the first mesh too. A
  // flush starts with an AwaitEngine for each other member that has sent
  // batches since this client's last flush, even with nothing else to
  // send (a fetch): the meshes' casts travel apart, and a view must not be
  // read or written ahead of the other mesh's earlier commands; the others'
  // pending commands are flushed first. One process-wide mutex
  // (viewGroupsMutex) guards groups, awaited_ and every flush, taken before
  // mutex_: the flushes of a group must not interleave.
  struct ViewGroup {
    std::vector<TensorClient*> members;
  };
  static std::mutex& viewGroupsMutex();
  void joinViewGroupLocked(TensorClient& other);
  void flushGroupLocked();  // every member's pending batch, this one's last
  void flushLocked();       // this one's

  ActorMesh<Engine> engines_;
  mutable std::mutex mutex_;
  CommandBatch pending_;
  std::vector<RefId> dropped_;
  std::atomic<std::uint64_t> batchesSent_{0};  // read by the view group's others
  const std::uint64_t serial_;                 // names this client in others' awaited_
  std::shared_ptr<ViewGroup> viewGroup_;       // null until the first view
  std::map<std::uint64_t, std::uint64_t> awaited_;  // serial -> batches awaited
  RefId nextRef_ = 1;
  std::size_t batchLimit_;
};

class DTensor;

/// Where each shard of a mesh tensor of `from` comes from on a mesh of `to`
/// (to_mesh): (from, to) pairs of world ranks, one per rank of `to`.
/// Monarch's rule first: when `to` has every dimension of `from`, of the
/// same sizes, the shard at each coordinate of `to` is the source's at the
/// same coordinates of those dimensions (copied along `to`'s other
/// dimensions). Otherwise, when every proc of `to` holds a shard, it keeps
/// its own (a slice, other labels). Throws ConfigError when neither applies.
std::vector<std::pair<Rank, Rank>> transferRoutes(const mesh::Shape& from, const mesh::Shape& to);

class TensorMesh {
 public:
  explicit TensorMesh(const ProcMesh& procs, std::uint64_t seed = 0);

  TensorClient& client() { return *client_; }
  const mesh::Shape& shape() const { return client_->shape(); }

  /// Uniform in [0, 1), a different shard on every proc (seeded per rank).
  DTensor rand(std::vector<std::int64_t> shape, ScalarType type = ScalarType::f32);
  DTensor zeros(std::vector<std::int64_t> shape, ScalarType type = ScalarType::f32);
  DTensor ones(std::vector<std::int64_t> shape, ScalarType type = ScalarType::f32);
  DTensor full(std::vector<std::int64_t> shape, double value, ScalarType type = ScalarType::f32);
  /// start, start + step, ... below end.
  DTensor arange(double start, double end, double step = 1, ScalarType type = ScalarType::f32);
  DTensor matmul(const DTensor& a, const DTensor& b);
  /// A kernel by name, whose results have these shapes and types (the
  /// controller cannot infer them for kernels it does not know).
  std::vector<DTensor> call(const std::string& kernel, const std::vector<DTensor>& inputs,
                            const std::vector<std::pair<std::vector<std::int64_t>, ScalarType>>&
                                results,
                            std::vector<std::int64_t> ints = {}, std::vector<double> reals = {});
  /// Flushes and waits for every engine.
  void sync() { client_->sync(); }

 private:
  friend class DTensor;
  DTensor define(Call call, std::vector<std::int64_t> shape, ScalarType type);
  std::shared_ptr<TensorClient> client_;
};

class DTensor {
 public:
  const std::vector<std::int64_t>& shape() const { return handle_->shape; }
  ScalarType dtype() const { return handle_->dtype; }
  RefId ref() const { return handle_->ref; }

  DTensor operator+(const DTensor& other) const { return binary("add", other); }
  DTensor operator-(const DTensor& other) const { return binary("sub", other); }
  DTensor operator*(const DTensor& other) const { return binary("mul", other); }
  DTensor operator/(const DTensor& other) const { return binary("div", other); }
  /// Every element's sum (mean) as a 0-d tensor.
  DTensor sum() const;
  DTensor mean() const;

  /// The reduction over the members along `dims` (labels of the mesh), on each of them.
  DTensor reduce(const std::vector<std::string>& dims, Reduction reduction = Reduction::sum) const;
  // const char*, not std::string: {"dp", "tp"} would make a string of two iterators.
  DTensor reduce(const char* dim, Reduction reduction = Reduction::sum) const {
    return reduce(std::vector<std::string>{dim}, reduction);
  }
  /// Member i of the group gets block i (dimension 0) of the reduction.
  DTensor reduceScatter(const std::vector<std::string>& dims,
                        Reduction reduction = Reduction::sum) const;
  /// Every member's shard, stacked on a new dimension 0 (Monarch's "stack").
  DTensor allgather(const std::vector<std::string>& dims) const;
  DTensor alltoall(const std::vector<std::string>& dims) const;
  /// Member `root`'s shard (its index in the group) on every member.
  DTensor broadcast(const std::vector<std::string>& dims, std::int64_t root = 0) const;

  /// This tensor on the mesh of `target` (Monarch's to_mesh; the routes of
  /// transferRoutes()): over MPI between procs, handed over within one.
  DTensor toMesh(TensorMesh& target) const;

  /// The shard at `coords` (labels not given: index 0).
  Future<LocalTensor> fetch(const std::map<std::string, std::size_t>& coords = {}) const;

 private:
  friend class TensorMesh;
  struct Handle {
    std::shared_ptr<TensorClient> client;
    RefId ref = 0;
    std::vector<std::int64_t> shape;
    ScalarType dtype = ScalarType::f32;
    ~Handle();
  };
  explicit DTensor(std::shared_ptr<Handle> handle) : handle_(std::move(handle)) {}
  // Records `call` with one new ref as its result.
  static DTensor record(const std::shared_ptr<TensorClient>& client, Call call,
                        std::vector<std::int64_t> shape, ScalarType type);
  DTensor binary(const char* kernel, const DTensor& other) const;
  DTensor collective(CollectiveKind kind, const std::vector<std::string>& dims,
                     Reduction reduction, std::int64_t root,
                     std::vector<std::int64_t> resultShape) const;
  DTensor unary(const char* kernel, std::vector<std::int64_t> shape) const;
  std::shared_ptr<Handle> handle_;
};

}  // namespace crown::tensor
