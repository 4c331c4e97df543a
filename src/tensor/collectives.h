// Collectives: how an engine runs a Collective command over MPI (CPU
// tensors). One communicator per set of the mesh's dimensions, made when the
// engine starts (MpiService::commOver is collective: every engine makes
// them in the same order). Before the data moves, the members agree, in
// one small allreduce, on whether any input failed and on the element count
// and type: a poisoned or mismatched input poisons the result on every
// member instead of leaving the others waiting (deferred errors; DLV-1).
// Used on the engine's thread; every wait is on the MPI service (THR-1).
#pragma once

#include <array>
#include <climits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "crown/actor/proc.h"
#include "crown/mesh/shape.h"
#include "crown/tensor/command.h"
#include "tensor/ref_table.h"

namespace crown::tensor::detail {

class Collectives {
 public:
  /// `instance`: which copy of the communicators (one per engine stream,
  /// MpiService::commOver).
  Collectives(Proc& proc, const mesh::Shape& shape, std::uint32_t instance = 0);

  struct Outcome {
    LocalTensor result;          ///< when it ran
    RefTable::Poison failure;    ///< when it did not
  };
  /// Runs `command` on `source` (null: not defined here). Every member of
  /// the group must call it, in the same order as the others.
  Outcome run(const Collective& command, const RefTable::Value* source);

  /// How many of `commands`, from `first` on, run as one MPI allreduce
  /// (runFused), like a bucket of gradients: small CPU allreduces in a row,
  /// over the same dims with the same reduction and type, whose sources the
  /// controller described, none reading what an earlier one wrote. Decided
  /// from the commands alone, so every member groups them alike. 0 or 1:
  /// none to fuse.
  static std::size_t fusable(const std::vector<Command>& commands, std::size_t first);
  /// Runs `commands` (a run that fusable() gave) as one allreduce of their
  /// sources packed end to end, while the members agree. If the agreement
  /// finds a failure anywhere, each runs on its own instead (run(), which
  /// says what failed where). One outcome per command.
  std::vector<Outcome> runFused(const std::vector<Collective>& commands,
                                const std::vector<const RefTable::Value*>& sources);

 private:
  struct Group {
    Comm comm;
    std::size_t size = 0;
    std::vector<Rank> members;  // world ranks, by index in the group
  };
  // Throws ConfigError for dims that are not the mesh's, or without MPI.
  const Group& group(const std::vector<std::string>& dims);
  LocalTensor move(const Collective& command, const Group& group, const LocalTensor& source);
  // The data of a CPU collective posted into fresh memory (post never
  // writes in place; run() does for inPlace commands):
  // `done` completes when MPI has moved it into `out`; finish() then does
  // the rest (avg's division, the write into an in-place source).
  struct Posted {
    Future<void> done;
    LocalTensor out;
    LocalTensor send;  // the copy MPI reads, kept alive until done
  };
  Posted post(const Collective& command, const Group& group, const LocalTensor& input);
  // reduce_ of a contiguous source that this member has good: straight in
  // its memory (no copy there and back). Should the agreement then find a
  // failure elsewhere, the result ref is poisoned on every member all the
  // same; what views of it read is then undefined, as after a failed
  // in-place torch op.
  static bool inPlace(const Collective& command, const LocalTensor& input);
  // The bytes of `command`'s source as the controller described it (shape
  // and a type MPI has); nothing when it did not.
  static std::optional<std::int64_t> describedBytes(const Collective& command);
  // Whether `command`'s data moves during the agreement: the controller gave
  // its source's shape and type, and it is small (latency-bound).
  static bool overlaps(const Collective& command, std::size_t members);
  // The agreement's facts, from this member (run, runFused): the lowest
  // member whose input failed, and the extremes of the element counts and
  // types (as minima of x and -x); kNoFailure where there is nothing to say.
  using Facts = std::array<std::int64_t, 5>;
  static constexpr std::int64_t kNoFailure = INT64_MAX;
  Facts facts(bool good, std::int64_t count, ScalarType type) const;
  // Posts the agreement: every member's `facts` become their minima, in
  // place (kept alive by the caller until it is done).
  Future<void> agree(const Group& group, Facts& facts);
  // `tensor` (contiguous, CPU) allreduced into its own memory.
  Future<void> allreduceInPlace(const Group& group, const LocalTensor& tensor,
                                Reduction reduction);
  // reduce_'s result: the source itself, `result` written into its memory
  // (views and all) unless it went there directly.
  static LocalTensor intoSource(const LocalTensor& source, const LocalTensor& result);
  // The outcome of `command` failing with `message` (`lost`: a member lost).
  Outcome failed(const Collective& command, std::string message,
                 const ProcessLost* lost = nullptr) const;
  static constexpr std::int64_t kOverlapBytes = 1 << 20;  // and the most runFused packs
  static constexpr std::size_t kMostFused = 64;
  // Keeps a failed collective's buffers for the life of the engine stream.
  void keep(Posted posted, LocalTensor stand);
  LocalTensor finish(const Collective& command, const Group& group, const LocalTensor& input,
                     LocalTensor out);

  Proc& proc_;
  mesh::Shape shape_;
  std::uint32_t instance_;
  std::string unavailable_;  // why there are no collectives here ("" when there are)
  std::map<std::vector<std::size_t>, Group> groups_;
  std::vector<LocalTensor> abandoned_;
};

/// MPI's operation for a reduction (avg: a sum, divided by divideBy).
ReduceOp mpiReduce(Reduction reduction);
/// avg: the sum divided by the group's size (integer division for integers).
void divideBy(LocalTensor& tensor, std::size_t count);

}  // namespace crown::tensor::detail
