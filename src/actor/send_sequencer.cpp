#include "actor/send_sequencer.h"

#include <algorithm>

namespace crown::detail {
namespace {
// Past this many destination ranks a short list costs more than a vector by rank.
constexpr std::size_t kFewRanks = 8;
}  // namespace

std::size_t SendSequencer::Hash::operator()(const Key& k) const {
  std::uint64_t h = k.sender.local * 0x9E3779B97F4A7C15ull ^ k.sender.rank;
  h = (h ^ k.destLocal) * 0x9E3779B97F4A7C15ull;
  return std::hash<std::uint64_t>()(h);
}

std::uint64_t& SendSequencer::Counters::at(Rank rank, Rank worldSize) {
  if (!byRank.empty()) return byRank.at(rank);
  for (auto& [r, count] : few)
    if (r == rank) return count;
  if (few.size() < kFewRanks) return few.emplace_back(rank, 0).second;
  byRank.assign(worldSize, 0);
  for (auto& [r, count] : few) byRank.at(r) = count;
  few.clear();
  few.shrink_to_fit();
  return byRank.at(rank);
}

std::uint64_t SendSequencer::next(const wire::ActorId& sender, const wire::ActorId& dest) {
  std::lock_guard lock(mutex_);
  return ++counters_[Key{sender, dest.local}].at(dest.rank, worldSize_);
}

std::vector<std::uint64_t> SendSequencer::next(const wire::ActorId& sender,
                                               std::uint64_t destLocal,
                                               const std::vector<std::size_t>& ranks) {
  std::vector<std::uint64_t> seqs;
  seqs.reserve(ranks.size());
  std::lock_guard lock(mutex_);
  Counters& counters = counters_[Key{sender, destLocal}];
  for (std::size_t rank : ranks) seqs.push_back(++counters.at(static_cast<Rank>(rank), worldSize_));
  return seqs;
}

void SendSequencer::forgetSender(const wire::ActorId& sender) {
  std::lock_guard lock(mutex_);
  std::erase_if(counters_, [&](const auto& entry) { return entry.first.sender == sender; });
}

void SendSequencer::forgetDestination(std::uint64_t destLocal) {
  std::lock_guard lock(mutex_);
  std::erase_if(counters_, [&](const auto& entry) { return entry.first.destLocal == destLocal; });
}

void SendSequencer::forgetDestination(std::uint64_t destLocal,
                                      const std::vector<std::size_t>& ranks) {
  std::lock_guard lock(mutex_);
  for (auto it = counters_.begin(); it != counters_.end();) {
    Counters& counters = it->second;
    if (it->first.destLocal == destLocal) {
      for (std::size_t rank : ranks) {
        if (rank < counters.byRank.size()) counters.byRank[rank] = 0;  // 0: nothing sent yet
        std::erase_if(counters.few, [&](const auto& count) { return count.first == rank; });
      }
      if (counters.few.empty() && std::all_of(counters.byRank.begin(), counters.byRank.end(),
                                              [](std::uint64_t count) { return count == 0; })) {
        it = counters_.erase(it);
        continue;
      }
    }
    ++it;
  }
}

std::size_t SendSequencer::entries() {
  std::lock_guard lock(mutex_);
  return counters_.size();
}

}  // namespace crown::detail
