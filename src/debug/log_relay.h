// The two ends of log forwarding (crown/debug/logs.h), owned by the debug
// module: a worker's LogForwarder cuts what its program writes into lines
// and sends them; the controller's LogCollector merges and prints them.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "crown/actor/proc.h"
#include "crown/debug/logs.h"

namespace crown::debug::detail {

class LogForwarder {
 public:
  /// Lines go to actor `collector` (the controller's debug agent).
  LogForwarder(Proc& proc, ActorId collector) : proc_(proc), collector_(collector) {}
  void write(int stream, std::string_view text);
  /// Sends the partial last lines as lines of their own.
  void flushPartial();

 private:
  void sendLocked(int stream, std::vector<std::string> lines);  // under mutex_

  Proc& proc_;
  const ActorId collector_;
  std::mutex mutex_;  // also keeps one rank's lines in the order written
  std::array<std::string, 2> partial_;  // stdout's, stderr's
};

class LogCollector {
 public:
  LogCollector() = default;
  ~LogCollector();  // prints what is left
  LogCollector(const LogCollector&) = delete;
  LogCollector& operator=(const LogCollector&) = delete;

  void setWindow(std::chrono::milliseconds window);
  // Where lines are written: file descriptors for stdout's and stderr's
  // lines (what is due goes to the old ones first).
  void setOutput(int out, int err);
  void add(const LogLines& lines);  // the agent's thread
  void print();                     // everything that came, now

 private:
  // One line of the window as printed: the n-th time a rank wrote `text`
  // in it joins the n-th group of that text, so nothing is merged away.
  struct Group {
    int stream = 1;
    std::string text;
    std::vector<Rank> ranks;
  };
  void printLocked();  // under mutex_
  void timerMain();

  std::mutex mutex_;
  std::condition_variable changed_;
  std::array<int, 2> fds_{1, 2};  // stdout's lines, stderr's (setOutput)
  std::chrono::milliseconds window_{0};
  std::vector<Group> groups_;  // in the order their first line came
  // (stream, text, rank) -> how many of the groups of that text the rank is in
  std::map<std::tuple<int, std::string, Rank>, std::size_t> seen_;
  std::map<std::pair<int, std::string>, std::vector<std::size_t>> groupsOfText_;
  std::chrono::steady_clock::time_point deadline_{};
  bool stopping_ = false;
  std::thread timer_;  // started with the first window
};

}  // namespace crown::debug::detail
