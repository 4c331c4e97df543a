// Log forwarding's two ends (log_relay.h) and rankRanges.
#include "debug/log_relay.h"

#include <unistd.h>

#include <algorithm>
#include <tuple>

namespace crown::debug {

std::string rankRanges(std::vector<Rank> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string out;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(ranks[i]);
    if (j > i) out += '-' + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

namespace detail {
namespace {

std::string cut(std::string line) {
  if (line.size() <= kMaxLogLine) return line;
  line.resize(kMaxLogLine);
  return line + "... [cut at " + std::to_string(kMaxLogLine) + " bytes]";
}

// One write(2) per call, so lines printed by other threads (the
// controller's own program) do not land inside it.
void writeAll(int fd, const std::string& text) {
  std::size_t at = 0;
  while (at < text.size()) {
    ssize_t wrote = ::write(fd, text.data() + at, text.size() - at);
    if (wrote <= 0) return;  // a closed terminal: nothing more to do
    at += static_cast<std::size_t>(wrote);
  }
}

}  // namespace

void LogForwarder::write(int stream, std::string_view text) {
  const std::size_t slot = stream == 2 ? 1 : 0;
  std::lock_guard lock(mutex_);
  std::string& partial = partial_[slot];
  std::vector<std::string> lines;
  std::size_t start = 0;
  for (std::size_t newline; (newline = text.find('\n', start)) != std::string_view::npos;
       start = newline + 1) {
    partial.append(text.substr(start, newline - start));
    lines.push_back(cut(std::move(partial)));
    partial.clear();
  }
  partial.append(text.substr(start));
  if (partial.size() > kMaxLogLine) {  // a line that never ends goes in pieces
    lines.push_back(cut(std::move(partial)));
    partial.clear();
  }
  if (!lines.empty()) sendLocked(stream, std::move(lines));
}

void LogForwarder::flushPartial() {
  std::lock_guard lock(mutex_);
  for (std::size_t slot = 0; slot < partial_.size(); ++slot) {
    if (partial_[slot].empty()) continue;
    sendLocked(slot == 0 ? 1 : 2, {std::move(partial_[slot])});
    partial_[slot].clear();
  }
}

void LogForwarder::sendLocked(int stream, std::vector<std::string> lines) {
  try {
    proc_.send(collector_, LogLines{proc_.rank(), static_cast<std::uint8_t>(stream),
                                    std::move(lines)});
  } catch (const std::exception&) {  // NOLINT: the controller is gone; the job is ending
  }
}

LogCollector::~LogCollector() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (timer_.joinable()) timer_.join();
  std::lock_guard lock(mutex_);
  printLocked();
}

void LogCollector::setWindow(std::chrono::milliseconds window) {
  std::lock_guard lock(mutex_);
  window_ = window;
  if (window.count() > 0 && !timer_.joinable()) timer_ = std::thread([this] { timerMain(); });
  if (window.count() == 0) printLocked();  // what waited for the old window
  changed_.notify_all();
}

void LogCollector::setOutput(int out, int err) {
  std::lock_guard lock(mutex_);
  printLocked();
  fds_ = {out, err};
}

void LogCollector::add(const LogLines& got) {
  const int stream = got.stream == 2 ? 2 : 1;
  std::lock_guard lock(mutex_);
  if (window_.count() == 0) {
    std::string text;
    for (const auto& line : got.lines) text += "[rank " + std::to_string(got.rank) + "] " + line + '\n';
    writeAll(fds_[stream == 2 ? 1 : 0], text);
    return;
  }
  if (groups_.empty()) {
    deadline_ = std::chrono::steady_clock::now() + window_;
    changed_.notify_all();
  }
  for (const auto& line : got.lines) {
    std::size_t& nth = seen_[{stream, line, got.rank}];
    auto& groups = groupsOfText_[{stream, line}];
    if (nth == groups.size()) {
      groups.push_back(groups_.size());
      groups_.push_back(Group{stream, line, {}});
    }
    groups_[groups[nth++]].ranks.push_back(got.rank);
  }
}

void LogCollector::print() {
  std::lock_guard lock(mutex_);
  printLocked();
}

void LogCollector::printLocked() {
  std::array<std::string, 2> out;
  for (const Group& group : groups_) {
    std::string prefix = group.ranks.size() == 1
                             ? "[rank " + std::to_string(group.ranks[0]) + "] "
                             : "[ranks " + rankRanges(group.ranks) + "] ";
    out[group.stream == 2 ? 1 : 0] += prefix + group.text + '\n';
  }
  groups_.clear();
  seen_.clear();
  groupsOfText_.clear();
  if (!out[0].empty()) writeAll(fds_[0], out[0]);
  if (!out[1].empty()) writeAll(fds_[1], out[1]);
}

void LogCollector::timerMain() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    if (groups_.empty()) {
      changed_.wait(lock);
    } else if (changed_.wait_until(lock, deadline_) == std::cv_status::timeout) {
      printLocked();
    }
  }
}

}  // namespace detail
}  // namespace crown::debug
