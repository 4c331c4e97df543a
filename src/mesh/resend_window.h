// ResendWindow: the broadcasts a cast hop sent lately to each of its
// children, kept so that when a child is lost they can be resent at once to
// the child's own children (the route a later cast adopts around it). The
// members' ORD-1 gaps then close without waiting for the gap timeout
// (DLV-1), and a member that had them already drops the copies (the
// reorder buffer's duplicates). Bounded per child by a count and a byte
// total (CROWN_CAST_RESEND_WINDOW, CROWN_CAST_RESEND_WINDOW_BYTES), keeping
// the newest past the byte bound. What falls outside, members report lost
// (LostMessages): what a dead hop failed to forward is the last of what it
// was sent, so when more was lost than the window holds, the broadcasts
// resent come after a gap, which the members see, give up and report. A
// broadcast's bytes are one buffer shared by every window it is in.
// Thread-safe.
#pragma once

#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "crown/mesh/cast_tree.h"
#include "crown/wire/payload.h"

namespace crown::mesh::detail {

class ResendWindow {
 public:
  /// One broadcast as a hop sent it: its bytes and the tree it travels.
  struct Sent {
    std::shared_ptr<const wire::Bytes> bytes;
    std::shared_ptr<const CastTree> tree;
  };

  /// 0 messages: nothing is kept (a loss is noticed only by a later message
  /// from the same sender to the same actor, as a gap).
  ResendWindow(std::size_t messages, std::size_t bytes) : messages_(messages), bytes_(bytes) {}

  /// `sent` went to `child`; the oldest fall out past the bounds.
  void record(std::size_t child, const Sent& sent);
  /// What went to `child` (lost), oldest first, and forgets it.
  std::vector<Sent> take(std::size_t child);

 private:
  struct Child {
    std::deque<Sent> sent;
    std::size_t bytes = 0;
  };
  const std::size_t messages_;
  const std::size_t bytes_;
  std::mutex mutex_;
  std::unordered_map<std::size_t, Child> children_;
};

}  // namespace crown::mesh::detail
