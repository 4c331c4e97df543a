// Remote pdb (issue 15): a breakpoint() in an endpoint, on any rank, stops
// there, and its pdb talks to the controller instead of a terminal. The
// rank's front end hands each prompt's output to pdbPrompt(), which sends
// it to the controller's debug agent and waits for the line the user types
// for that session; the controller keeps every stopped session (its
// actor, where it stopped, its unread output) for `crown debug`, through
// the debug server (server.h). Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "crown/actor/proc.h"
#include "crown/wire/serialize.h"

namespace crown::debug {

/// Where a pdb session stopped. `session` is unique on its rank.
struct PdbSession {
  Rank rank = 0;
  std::uint64_t session = 0;
  std::string actor;     ///< the name its mesh was spawned under
  int member = 0;        ///< the actor's rank in its mesh
  std::string coords;    ///< the member's point, "procs=2" (a ranks(...) selection matches it)
  std::string host;
  std::string function;  ///< where it stopped
  std::string file;
  int line = 0;
  bool waiting = false;  ///< at a prompt, so a line may be sent (pdbSend)
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& rank& session& actor& member& coords& host& function& file& line& waiting;
  }
};

/// A rank's pdb to the controller's agent: output, then (unless `ended`,
/// the session continued) a prompt that waits for a line.
struct PdbPrompt {
  PdbSession where;
  std::string output;
  bool ended = false;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& where& output& ended;
  }
};

/// The controller's agent to a rank's: the line typed for one session.
struct PdbInput {
  std::uint64_t session = 0;
  std::string line;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& session& line;
  }
};

/// On any rank, from the thread the session stopped on: `output` (ending
/// with pdb's prompt) goes to the controller, and the line typed for it
/// comes back, without its newline. Empty when it never will (the
/// controller is lost, or this proc stops): pdb then continues.
std::optional<std::string> pdbPrompt(Proc& proc, const PdbSession& where, std::string output);

/// On any rank: the session continued; its last output goes to the controller.
void pdbEnded(Proc& proc, const PdbSession& where, std::string output);

/// On the controller: the sessions stopped now, on live ranks, by rank.
std::vector<PdbSession> pdbSessions(Proc& proc);

struct PdbRead {
  std::string output;  ///< what the session wrote since the last read
  bool waiting = false;
  bool ended = false;  ///< it continued (or its rank is lost): it is forgotten now
};

/// On the controller: waits at most `wait` for the session to be at a
/// prompt (or to end), then takes its output. Throws crown::Error for a
/// session that is not known.
PdbRead pdbRead(Proc& proc, Rank rank, std::uint64_t session, std::chrono::milliseconds wait);

/// On the controller: `line` goes to a session at its prompt. Throws
/// crown::Error for one that is not known or not at a prompt.
void pdbSend(Proc& proc, Rank rank, std::uint64_t session, const std::string& line);

}  // namespace crown::debug

CROWN_MESSAGE(crown::debug::PdbPrompt, "crown::PdbPrompt");
CROWN_MESSAGE(crown::debug::PdbInput, "crown::PdbInput");
