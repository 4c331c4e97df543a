#include "debug/pdb_sessions.h"

#include "crown/common/error.h"

namespace crown::debug::detail {

bool PdbRegistry::take(PdbPrompt&& prompt) {
  std::lock_guard lock(mutex_);
  auto [it, added] = sessions_.try_emplace({prompt.where.rank, prompt.where.session});
  Entry& entry = it->second;
  bool stoppedAnew = !prompt.ended && (added || entry.ended);
  entry.where = std::move(prompt.where);
  entry.where.waiting = !prompt.ended;
  entry.output += prompt.output;
  entry.ended = prompt.ended;  // a session that stops again (a later breakpoint) is back
  changed_.notify_all();
  return stoppedAnew;
}

std::vector<PdbSession> PdbRegistry::list(const Alive& alive) {
  std::lock_guard lock(mutex_);
  std::vector<PdbSession> out;
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    bool gone = !alive(it->first.first);
    // An ended session is kept only for its unread output; a lost rank's not at all.
    if (gone || (it->second.ended && it->second.output.empty())) {
      it = sessions_.erase(it);
      continue;
    }
    if (!it->second.ended) out.push_back(it->second.where);
    ++it;
  }
  return out;
}

PdbRegistry::Entry& PdbRegistry::find(const Key& key) {
  auto it = sessions_.find(key);
  if (it == sessions_.end()) {
    throw Error("no pdb session " + std::to_string(key.second) + " on rank " +
                std::to_string(key.first) + " (crown debug's list shows those stopped now)");
  }
  return it->second;
}

PdbRead PdbRegistry::read(Rank rank, std::uint64_t session, std::chrono::milliseconds wait,
                          const Alive& alive) {
  std::unique_lock lock(mutex_);
  Key key{rank, session};
  find(key);
  auto deadline = std::chrono::steady_clock::now() + wait;
  // The rank is asked a few times a second: a lost one never answers.
  auto settled = [&] {
    auto it = sessions_.find(key);
    return it == sessions_.end() || it->second.where.waiting || it->second.ended ||
           !alive(rank);
  };
  while (!settled() && std::chrono::steady_clock::now() < deadline) {
    changed_.wait_for(lock, std::min<std::chrono::steady_clock::duration>(
                                deadline - std::chrono::steady_clock::now(),
                                std::chrono::milliseconds(200)));
  }
  auto it = sessions_.find(key);
  if (it == sessions_.end()) return PdbRead{"", false, true};  // its rank was found lost meanwhile
  Entry& entry = it->second;
  PdbRead out{std::move(entry.output), entry.where.waiting, entry.ended || !alive(rank)};
  entry.output.clear();
  if (!alive(rank)) out.output += "\n(rank " + std::to_string(rank) + " is lost)\n";
  if (out.ended) sessions_.erase(key);
  return out;
}

void PdbRegistry::leavePrompt(Rank rank, std::uint64_t session) {
  std::lock_guard lock(mutex_);
  Entry& entry = find({rank, session});
  if (!entry.where.waiting) {
    throw Error("pdb session " + std::to_string(session) + " on rank " + std::to_string(rank) +
                " is running, not at a prompt: read its output first");
  }
  entry.where.waiting = false;
}

void PdbInbox::put(PdbInput&& input) {
  std::lock_guard lock(mutex_);
  lines_[input.session].push_back(std::move(input.line));
  arrived_.notify_all();
}

std::optional<std::string> PdbInbox::take(std::uint64_t session,
                                          const std::function<bool()>& giveUp) {
  std::unique_lock lock(mutex_);
  for (;;) {
    auto it = lines_.find(session);
    if (it != lines_.end() && !it->second.empty()) {
      std::string line = std::move(it->second.front());
      it->second.pop_front();
      if (it->second.empty()) lines_.erase(it);
      return line;
    }
    if (stopped_ || giveUp()) return std::nullopt;
    arrived_.wait_for(lock, std::chrono::milliseconds(250));
  }
}

void PdbInbox::stop() {
  std::lock_guard lock(mutex_);
  stopped_ = true;
  arrived_.notify_all();
}

}  // namespace crown::debug::detail
