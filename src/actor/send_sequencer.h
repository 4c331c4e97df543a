// SendSequencer: hands out the ORD-1 positions (seq 1, 2, ...) of the
// messages each sender actor of this process sends to each destination
// actor, whether directly or through a cast. Counters are kept per (sender,
// destination local id), with one count per destination rank: a handful in
// a short list, or, once the destination is many ranks (a mesh actor has
// the same local id on every rank), one vector indexed by rank, so that a
// cast to N members reserves N positions without N hash lookups.
// Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "crown/wire/envelope.h"

namespace crown::detail {

class SendSequencer {
 public:
  explicit SendSequencer(Rank worldSize) : worldSize_(worldSize) {}

  std::uint64_t next(const wire::ActorId& sender, const wire::ActorId& dest);
  /// The next position from sender to {rank, destLocal} for each rank.
  std::vector<std::uint64_t> next(const wire::ActorId& sender, std::uint64_t destLocal,
                                  const std::vector<std::size_t>& ranks);

  /// Drops the counters of a sender that was stopped.
  void forgetSender(const wire::ActorId& sender);
  /// Drops every sender's counters towards actor `destLocal` (a stopped mesh).
  void forgetDestination(std::uint64_t destLocal);
  /// Drops every sender's counts towards actor `destLocal` on `ranks` only
  /// (a stopped slice of a mesh: its other members keep their order), and
  /// the counters left with no count.
  void forgetDestination(std::uint64_t destLocal, const std::vector<std::size_t>& ranks);
  /// How many (sender, destination) entries are held: for tests of pruning.
  std::size_t entries();

 private:
  struct Key {
    wire::ActorId sender;
    std::uint64_t destLocal = 0;
    friend bool operator==(const Key&, const Key&) = default;
  };
  struct Hash {
    std::size_t operator()(const Key& k) const;
  };
  struct Counters {
    std::vector<std::pair<Rank, std::uint64_t>> few;  // while `byRank` is empty
    std::vector<std::uint64_t> byRank;
    std::uint64_t& at(Rank rank, Rank worldSize);
  };

  Rank worldSize_;
  std::mutex mutex_;
  std::unordered_map<Key, Counters, Hash> counters_;
};

}  // namespace crown::detail
