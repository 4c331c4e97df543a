// CastEntries: the member entries of a cast's result, held column by column
// (issue 14): the ranks, the ok flags, each entry's type as an index into a
// table of the distinct type names, and every payload in one buffer. A hop
// appends a child subtree's entries with a few copies, and the wire form is
// the same columns, so no entry is decoded or encoded again on its way up
// the tree: a result of n entries crosses each level in O(columns) copies,
// not n archive calls. Plain value; one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include <boost/serialization/split_member.hpp>

#include "crown/wire/serialize.h"

namespace crown::mesh {

/// One member's outcome: its reply, or a detail::RemoteFailure.
struct CastEntry {
  std::uint64_t rank = 0;
  bool ok = false;
  std::string type;     ///< the reply's type name (ok)
  wire::Bytes payload;  ///< the reply, or the RemoteFailure

  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& rank& ok& type& payload;
  }
};

class CastEntries {
 public:
  std::size_t size() const { return ranks_.size(); }
  bool empty() const { return ranks_.empty(); }

  void push_back(const CastEntry& entry);
  /// Moves every entry of `other` to the end of these (other is left empty).
  void append(CastEntries&& other);
  /// Makes room for this many entries holding this many payload bytes in
  /// all, so that appends up to them allocate nothing.
  void reserve(std::size_t entries, std::size_t payloadBytes);
  /// The payload bytes of every entry together.
  std::size_t payloadBytes() const { return payloads_.size(); }
  /// About what these entries take encoded (a little more, never less than
  /// their columns): what to reserve for them.
  std::size_t encodedBytes() const;

  std::uint64_t rank(std::size_t i) const { return ranks_[i]; }
  bool ok(std::size_t i) const { return ok_[i] != 0; }
  const std::string& type(std::size_t i) const { return types_[typeOf_[i]]; }
  std::string_view payload(std::size_t i) const;
  /// Entry i, copied out of the columns.
  CastEntry operator[](std::size_t i) const;

  /// Iterates entries by value (each one copied out as it is read).
  class const_iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = CastEntry;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = CastEntry;
    const_iterator(const CastEntries* entries, std::size_t at) : entries_(entries), at_(at) {}
    CastEntry operator*() const { return (*entries_)[at_]; }
    const_iterator& operator++() {
      ++at_;
      return *this;
    }
    bool operator==(const const_iterator& other) const { return at_ == other.at_; }

   private:
    const CastEntries* entries_;
    std::size_t at_;
  };
  const_iterator begin() const { return {this, 0}; }
  const_iterator end() const { return {this, size()}; }

  template <class Archive>
  void save(Archive& archive, unsigned) const {
    archive& ranks_& ok_& typeOf_& types_& ends_& payloads_;
  }
  /// Throws ProtocolError for columns that do not describe entries: of
  /// different lengths, a type index past the table, or payload ends that
  /// decrease or pass the buffer.
  template <class Archive>
  void load(Archive& archive, unsigned) {
    archive& ranks_& ok_& typeOf_& types_& ends_& payloads_;
    check();
  }
  BOOST_SERIALIZATION_SPLIT_MEMBER()

 private:
  std::uint32_t typeIndex(const std::string& type);
  void check() const;

  std::vector<std::uint64_t> ranks_;
  std::vector<std::uint8_t> ok_;
  std::vector<std::uint32_t> typeOf_;  // index into types_
  std::vector<std::string> types_;     // distinct; few (one per reply type, plus "")
  std::vector<std::uint64_t> ends_;    // payload i is payloads_[ends_[i-1], ends_[i])
  wire::Bytes payloads_;
};

}  // namespace crown::mesh
