// Aggregation: combines the outcomes of one cast hop's subtree (or, at the
// sender, of the whole cast) as they arrive from any thread: the member's
// own actor, each child hop's subtree result, or a child hop's loss. When
// every expected part is in, `done` gets the result (DLV-1: a lost child
// counts, with an error entry for each member below it). Thread-safe.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "crown/mesh/cast.h"
#include "crown/mesh/cast_tree.h"
#include "crown/mesh/reducer.h"

namespace crown::mesh::detail {

/// A member's outcome as a cast entry.
CastEntry entryFor(std::uint64_t rank, crown::detail::Outcome&& outcome);
CastEntry failureEntry(std::uint64_t rank, const std::exception_ptr& error);

class Aggregation {
 public:
  Aggregation(CastMode mode, const std::string& reducerKey, std::size_t parts,
              std::function<void(CastResult&&)> done, std::function<void(CastEntry&&)> onEntry);

  /// The result of a hop whose one part is its member's `entry` (a leaf of
  /// a collect or reduce), made at once: no aggregation outlives the call.
  static CastResult alone(CastMode mode, const std::string& reducerKey, CastEntry entry);

  /// One member's outcome (one part): the local actor's, or a known-lost member's.
  void member(CastEntry entry);
  /// Child hop `hop`'s subtree result (one part); `tree` names the members
  /// of a partial value that cannot be folded.
  void child(CastResult&& subtree, const CastTree& tree, std::size_t hop);
  /// A child hop was lost: every member below it fails with `error` (one part),
  /// but for those whose entry has been relayed up already (stream mode):
  /// each member has one entry.
  void childLost(const std::vector<std::size_t>& subtree, const std::exception_ptr& error);
  /// Stream mode: an entry relayed from below; not a part.
  void relay(CastEntry entry);

 private:
  void add(CastEntry&& entry);           // with mutex_ held
  void relayLocked(CastEntry&& entry);   // with mutex_ held
  /// Folds `value` into the result; the error when it cannot be.
  std::exception_ptr fold(const std::string& type, const wire::Bytes& value);
  void finishPart();

  CastMode mode_;
  std::shared_ptr<const Reducer> reducer_;  // null outside kReduce, or for an unknown key
  std::string reducerKey_;
  std::function<void(CastResult&&)> done_;
  std::function<void(CastEntry&&)> onEntry_;

  std::mutex mutex_;
  std::size_t remaining_;
  CastResult result_;
  std::set<std::uint64_t> relayed_;  // stream mode: the members whose entry went up
};

}  // namespace crown::mesh::detail
