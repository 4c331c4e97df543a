// SendSequencer: hands out the ORD-1 positions (seq 1, 2, ...) of the
// messages each sender actor of this process sends to each destination
// actor, whether directly or through a cast. Mesh actors (kMeshLocalBit)
// have the same local id on every rank, so their counters are one vector
// per (sender, mesh) indexed by rank: a cast to N members reserves N
// positions without N hash lookups. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
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

 private:
  struct Key {
    wire::ActorId sender;
    wire::ActorId dest;
    friend bool operator==(const Key&, const Key&) = default;
  };
  struct Hash {
    std::size_t operator()(const Key& k) const;
  };

  std::vector<std::uint64_t>& meshCounters(const wire::ActorId& sender, std::uint64_t destLocal);

  Rank worldSize_;
  std::mutex mutex_;
  std::unordered_map<Key, std::uint64_t, Hash> direct_;
  std::unordered_map<Key, std::vector<std::uint64_t>, Hash> meshes_;  // dest.rank unused
};

}  // namespace crown::detail
