#include "transport/shm/liveness.h"

#include <algorithm>
#include <map>

#include "transport/last_words.h"
#include "transport/shm/socket_util.h"

namespace crown::transport::shm {

std::vector<std::pair<Rank, std::chrono::milliseconds>> beat(const std::vector<Beat>& links,
                                                             bool suspended,
                                                             std::chrono::milliseconds bound) {
  using Clock = std::chrono::steady_clock;
  auto now = Clock::now().time_since_epoch().count();
  std::map<Rank, std::int64_t> heard;  // the latest per peer over its links
  for (const Beat& link : links) {
    sendHeartbeat(link.socket);
    if (suspended) *link.heard = now;
    heard[link.peer] = std::max(heard[link.peer], link.heard->load());
  }
  std::vector<std::pair<Rank, std::chrono::milliseconds>> silent;
  for (auto [peer, ticks] : heard) {
    auto silence =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::duration(now - ticks));
    if (silence > bound) silent.emplace_back(peer, silence);
  }
  return silent;
}

LinkError lossReason(LinkError error, const std::string& lastWords, const std::string& suspended) {
  bool broke = error.kind == LinkError::Kind::kClosed && suspended.empty();
  error.message += lastWordsNote(lastWords, broke) + suspended;
  return error;
}

}  // namespace crown::transport::shm
