#include "actor/send_sequencer.h"

#include "crown/actor/proc.h"

namespace crown::detail {

std::size_t SendSequencer::Hash::operator()(const Key& k) const {
  std::uint64_t h = k.sender.local * 0x9E3779B97F4A7C15ull ^ k.sender.rank;
  h = (h ^ k.dest.local) * 0x9E3779B97F4A7C15ull ^ k.dest.rank;
  return std::hash<std::uint64_t>()(h);
}

std::vector<std::uint64_t>& SendSequencer::meshCounters(const wire::ActorId& sender,
                                                         std::uint64_t destLocal) {
  auto& counters = meshes_[Key{sender, {0, destLocal}}];
  if (counters.empty()) counters.assign(worldSize_, 0);
  return counters;
}

std::uint64_t SendSequencer::next(const wire::ActorId& sender, const wire::ActorId& dest) {
  std::lock_guard lock(mutex_);
  if (dest.local & kMeshLocalBit) return ++meshCounters(sender, dest.local).at(dest.rank);
  return ++direct_[Key{sender, dest}];
}

std::vector<std::uint64_t> SendSequencer::next(const wire::ActorId& sender,
                                               std::uint64_t destLocal,
                                               const std::vector<std::size_t>& ranks) {
  std::vector<std::uint64_t> seqs;
  seqs.reserve(ranks.size());
  std::lock_guard lock(mutex_);
  if (destLocal & kMeshLocalBit) {
    auto& counters = meshCounters(sender, destLocal);
    for (std::size_t rank : ranks) seqs.push_back(++counters.at(rank));
  } else {
    for (std::size_t rank : ranks)
      seqs.push_back(++direct_[Key{sender, {static_cast<Rank>(rank), destLocal}}]);
  }
  return seqs;
}

}  // namespace crown::detail
