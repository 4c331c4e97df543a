#include "mesh/aggregation.h"

#include <set>

#include "crown/actor/failure.h"
#include "crown/common/log.h"

namespace crown::mesh::detail {

CastEntry failureEntry(std::uint64_t rank, const std::exception_ptr& error) {
  auto failure = crown::detail::describeFailure(error, static_cast<Rank>(rank));
  return CastEntry{rank, false, "", wire::toBytes(failure)};
}

CastEntry entryFor(std::uint64_t rank, crown::detail::Outcome&& outcome) {
  if (outcome.error) return failureEntry(rank, outcome.error);
  return CastEntry{rank, true, std::move(outcome.type), std::move(outcome.payload)};
}

Aggregation::Aggregation(CastMode mode, const std::string& reducerKey, std::size_t parts,
                         std::function<void(CastResult&&)> done,
                         std::function<void(CastEntry&&)> onEntry)
    : mode_(mode),
      reducer_(mode == CastMode::kReduce ? findReducer(reducerKey) : nullptr),
      reducerKey_(reducerKey),
      done_(std::move(done)),
      onEntry_(std::move(onEntry)),
      remaining_(parts) {}

CastResult Aggregation::alone(CastMode mode, const std::string& reducerKey, CastEntry entry) {
  CastResult result;
  Aggregation one(mode, reducerKey, 1, [&result](CastResult&& r) { result = std::move(r); },
                  nullptr);
  one.member(std::move(entry));
  return result;
}

void Aggregation::member(CastEntry entry) {
  {
    std::lock_guard lock(mutex_);
    add(std::move(entry));
  }
  finishPart();
}

void Aggregation::child(CastResult&& subtree, const CastTree& tree, std::size_t hop) {
  {
    std::lock_guard lock(mutex_);
    if (mode_ == CastMode::kReduce && subtree.hasValue) {
      // A partial value that cannot be folded fails each member whose reply
      // it holds: the subtree's members that have no entry of their own.
      if (auto error = fold(subtree.valueType, subtree.value)) {
        std::set<std::uint64_t> failed;
        for (std::size_t i = 0; i < subtree.entries.size(); ++i)
          failed.insert(subtree.entries.rank(i));
        for (std::size_t rank : tree.subtree(hop))
          if (!failed.count(rank)) result_.entries.push_back(failureEntry(rank, error));
      }
    }
    if (mode_ == CastMode::kCollect) {
      // The subtree's columns join this hop's as they are (issue 14). The
      // first is moved in whole; at the second, room is made for the parts
      // still to come, taken to be as large as this one, so the columns
      // grow once rather than by doubling (large reallocations made glibc
      // consolidate its free lists in the 16,384-proc profile).
      auto& entries = result_.entries;
      if (!entries.empty()) {
        entries.reserve(entries.size() + subtree.entries.size() * remaining_,
                        entries.payloadBytes() + subtree.entries.payloadBytes() * remaining_);
      }
      entries.append(std::move(subtree.entries));
    } else {
      for (CastEntry entry : subtree.entries) add(std::move(entry));
    }
  }
  finishPart();
}

void Aggregation::childLost(const std::vector<std::size_t>& subtree,
                            const std::exception_ptr& error) {
  {
    std::lock_guard lock(mutex_);
    for (std::size_t rank : subtree) {
      // A hop lost mid-stream may have relayed some of its subtree's entries.
      if (mode_ == CastMode::kStream && relayed_.count(rank)) continue;
      add(failureEntry(rank, error));
    }
  }
  finishPart();
}

void Aggregation::relay(CastEntry entry) {
  std::lock_guard lock(mutex_);
  relayLocked(std::move(entry));
}

void Aggregation::relayLocked(CastEntry&& entry) {
  relayed_.insert(entry.rank);
  if (onEntry_) onEntry_(std::move(entry));
}

void Aggregation::add(CastEntry&& entry) {
  switch (mode_) {
    case CastMode::kStream:
      // Handed on under the mutex, before this part is counted, so the
      // subtree's final answer never overtakes an entry.
      relayLocked(std::move(entry));
      return;
    case CastMode::kReduce:
      if (entry.ok) {
        auto error = fold(entry.type, entry.payload);
        if (!error) return;
        entry = failureEntry(entry.rank, error);
      }
      break;
    default:
      break;
  }
  result_.entries.push_back(entry);
}

std::exception_ptr Aggregation::fold(const std::string& type, const wire::Bytes& value) {
  try {
    if (!reducer_) throw Error("no reducer " + reducerKey_ + " in this program");
    if (type != reducer_->valueType) {
      throw ProtocolError("the reply of type " + type + " cannot be reduced by " + reducerKey_);
    }
    if (!result_.hasValue) {
      result_.value = value;
      result_.valueType = type;
      result_.hasValue = true;
    } else {
      result_.value = reducer_->combine(result_.value, value);
    }
    return nullptr;
  } catch (...) {
    return std::current_exception();
  }
}

void Aggregation::finishPart() {
  CastResult result;
  {
    std::lock_guard lock(mutex_);
    if (remaining_ == 0 || --remaining_ > 0) return;
    result = std::move(result_);
  }
  if (done_) done_(std::move(result));
}

}  // namespace crown::mesh::detail
