// ValueMesh<R>: the replies of a cast, one per member, indexed by the
// coordinates of the mesh (slice) that was cast to. An entry is a value or
// the member's error (DLV-1: a failed member does not fail the others).
// MeshError: one error naming every failed member. Plain values: any thread.
#pragma once

#include <exception>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "crown/actor/future.h"
#include "crown/mesh/cast.h"
#include "crown/mesh/shape.h"

namespace crown {

/// Some members of a mesh operation failed: each with its rank and error.
class MeshError : public Error {
 public:
  struct Failure {
    std::size_t rank = 0;
    std::exception_ptr error;
    std::string what;  ///< the error's message
  };
  /// "`action` failed on 2 of 8 ranks:\n  rank 3: ...".
  MeshError(const std::string& action, std::size_t members, std::vector<Failure> failures);
  const std::vector<Failure>& failures() const { return failures_; }

 private:
  std::vector<Failure> failures_;
};

namespace mesh::detail {
/// The row-major position of coords (one per label) in shape.
std::size_t indexOf(const Shape& shape, const std::map<std::string, std::size_t>& coords);
/// The exception a failed entry carries.
std::exception_ptr errorOf(const CastEntry& entry);
std::string describe(const std::exception_ptr& error);

/// A cast entry as a reply of type R: its value, or its error (also when
/// the reply is of another type than R, which `adverb<R>()` names; a
/// RawReply takes a reply of any type, undecoded).
template <class R>
void decodeEntry(const CastEntry& entry, std::optional<crown::detail::Stored<R>>& value,
                 std::exception_ptr& error, const char* adverb) {
  using Value = crown::detail::Stored<R>;
  if (!entry.ok) {
    error = errorOf(entry);
  } else if constexpr (std::is_same_v<Value, RawReply>) {
    value.emplace(RawReply{entry.type, entry.payload});  // of whatever type: undecoded
  } else if (entry.type != wire::messageName<Value>()) {
    error = std::make_exception_ptr(ProtocolError(
        "reply of type " + entry.type + " where " + wire::messageName<Value>() +
        " was expected: check the reply type given to " + adverb + "<R>()"));
  } else if constexpr (std::is_void_v<R>) {
    value.emplace();  // a void handler replies with no bytes
  } else {
    try {
      value.emplace(wire::fromBytes<Value>(entry.payload));
    } catch (...) {
      error = std::current_exception();
    }
  }
}
}  // namespace mesh::detail

template <class R>
class ValueMesh {
 public:
  using Value = detail::Stored<R>;
  struct Entry {
    std::optional<Value> value;
    std::exception_ptr error;
  };

  ValueMesh() = default;
  ValueMesh(mesh::Shape shape, std::vector<Entry> entries)
      : shape_(std::move(shape)), entries_(std::move(entries)) {}

  /// From a collecting cast's result; entries are checked against R.
  static ValueMesh fromCast(mesh::Shape shape, mesh::CastResult&& result) {
    std::vector<Entry> entries(shape.size());
    for (auto& entry : entries)
      entry.error = std::make_exception_ptr(Error("no reply came back for this member"));
    for (const mesh::CastEntry& cast : result.entries) {
      Entry& entry = entries.at(shape.slice().indexOf(cast.rank));
      entry.error = nullptr;
      mesh::detail::decodeEntry<R>(cast, entry.value, entry.error, "call");
    }
    return ValueMesh(std::move(shape), std::move(entries));
  }

  const mesh::Shape& shape() const { return shape_; }
  std::size_t size() const { return entries_.size(); }

  /// The reply of the member at coords (one index per label): get({{"procs", 2}}).
  /// Rethrows that member's error.
  R get(const std::map<std::string, std::size_t>& coords) const {
    return at(mesh::detail::indexOf(shape_, coords));
  }
  /// The reply of the member at row-major position index.
  R at(std::size_t index) const {
    const Entry& entry = entries_.at(index);
    if (entry.error) std::rethrow_exception(entry.error);
    if constexpr (!std::is_void_v<R>) return *entry.value;
  }
  bool ok(std::size_t index) const { return !entries_.at(index).error; }
  std::exception_ptr error(std::size_t index) const { return entries_.at(index).error; }
  /// The rank of the member at row-major position index.
  std::size_t rank(std::size_t index) const { return shape_.slice().rankAt(index); }
  const std::vector<Entry>& entries() const { return entries_; }

  std::vector<MeshError::Failure> failures() const {
    std::vector<MeshError::Failure> failures;
    auto ranks = shape_.ranks();
    for (std::size_t i = 0; i < entries_.size(); ++i) {
      if (entries_[i].error) {
        failures.push_back({ranks[i], entries_[i].error, mesh::detail::describe(entries_[i].error)});
      }
    }
    return failures;
  }

  /// Every reply in row-major order; throws MeshError naming each failed member.
  std::vector<Value> values() const {
    auto failed = failures();
    if (!failed.empty()) throw MeshError("call", size(), std::move(failed));
    std::vector<Value> values;
    for (const auto& entry : entries_) values.push_back(*entry.value);
    return values;
  }

 private:
  mesh::Shape shape_;
  std::vector<Entry> entries_;
};

}  // namespace crown
