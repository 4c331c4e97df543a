#include "mesh/resend_window.h"

#include <iterator>

namespace crown::mesh::detail {

void ResendWindow::record(std::size_t child, const Sent& sent) {
  if (messages_ == 0) return;
  std::lock_guard lock(mutex_);
  Child& window = children_[child];
  window.sent.push_back(sent);
  window.bytes += sent.bytes->size();
  // The newest is kept even past the byte bound: then a member that lost
  // more than the window holds still gets a later broadcast, sees the gap,
  // and reports it; nothing is lost unnoticed.
  while (window.sent.size() > messages_ || (window.bytes > bytes_ && window.sent.size() > 1)) {
    window.bytes -= window.sent.front().bytes->size();
    window.sent.pop_front();
  }
}

std::vector<ResendWindow::Sent> ResendWindow::take(std::size_t child) {
  std::lock_guard lock(mutex_);
  auto it = children_.find(child);
  if (it == children_.end()) return {};
  std::vector<Sent> sent(std::make_move_iterator(it->second.sent.begin()),
                         std::make_move_iterator(it->second.sent.end()));
  children_.erase(it);
  return sent;
}

}  // namespace crown::mesh::detail
