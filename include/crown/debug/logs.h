// Logs of every rank on the controller's terminal (issue 15). A worker's
// front end hands what its program writes to stdout and stderr to
// forwardOutput(); its complete lines go to the controller, whose debug
// module prints them prefixed with the rank ("[rank 3] ..."). Within a
// window (setLogWindow, Monarch's aggregate_window_sec) the same line from
// many ranks is printed once, with the ranks ("[ranks 0-15] ..."), so the
// odd one out stands out. flushLogs() is the barrier before the end of a
// job: every line written so far is printed when it returns. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "crown/actor/proc.h"
#include "crown/wire/serialize.h"

namespace crown::debug {

/// Lines of one rank's stdout (stream 1) or stderr (stream 2), without
/// their newlines; one-way to the controller's debug agent.
struct LogLines {
  Rank rank = 0;
  std::uint8_t stream = 1;
  std::vector<std::string> lines;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& rank& stream& lines;
  }
};

/// To a worker's debug agent: send the partial last lines too, then reply.
struct FlushLogsRequest {
  template <class Archive>
  void serialize(Archive&, unsigned) {}
};
/// To the controller's own agent, behind the lines already in its mailbox.
struct PrintLogsRequest {
  template <class Archive>
  void serialize(Archive&, unsigned) {}
};
struct LogsFlushed {
  Rank rank = 0;
  std::string host;
  std::string error;  ///< set by the asker for a rank that did not answer
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& rank& host& error;
  }
};

/// A line longer than this is cut, and says so.
constexpr std::size_t kMaxLogLine = 4096;

/// On a worker: `text`, written to `stream` (1 or 2), goes to the
/// controller line by line; a partial last line waits for its newline (or
/// for flushLogs). Blocks only as any send does (flow control).
void forwardOutput(Proc& proc, int stream, std::string_view text);

/// On the controller: `window` after the first line of a quiet spell, the
/// lines that came in it are printed, the same line of many ranks once
/// (0: each line at once, prefixed with its rank).
void setLogWindow(Proc& proc, std::chrono::milliseconds window);

/// On the controller: where the workers' forwarded lines go from now on,
/// as file descriptors for their stdout's and stderr's lines (1 and 2: its
/// own terminal again). A served job sends them to the client attached to
/// it (python/crown/_attach_server.py).
void redirectWorkerOutput(Proc& proc, int out, int err);

/// On the controller: every other live rank sends what it holds (a slow
/// one is skipped after `timeout`), then every line that came is printed.
void flushLogs(Proc& proc, std::chrono::milliseconds timeout);

/// "0-3,5,7-9": ranks in order, runs joined (the prefix of a merged line).
std::string rankRanges(std::vector<Rank> ranks);

}  // namespace crown::debug

CROWN_MESSAGE(crown::debug::LogLines, "crown::LogLines");
CROWN_MESSAGE(crown::debug::FlushLogsRequest, "crown::FlushLogsRequest");
CROWN_MESSAGE(crown::debug::PrintLogsRequest, "crown::PrintLogsRequest");
CROWN_MESSAGE(crown::debug::LogsFlushed, "crown::LogsFlushed");
