// The debug server's commands (server_commands.h), each answered as text a
// line-oriented client reads: stacks and status as a header line per rank
// and "end", pdb as one JSON document.
#include "server_commands.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "crown/common/error.h"
#include "crown/debug/pdb.h"
#include "crown/debug/stacks.h"
#include "crown/debug/status.h"

namespace crown::debug {
namespace {

std::string encodeStacks(const std::vector<RankStacks>& all) {
  std::string out;
  for (const auto& one : all) {
    out += "rank " + std::to_string(one.rank) + " pid " + std::to_string(one.pid) +
           " host-bytes " + std::to_string(one.host.size()) + " python-bytes " +
           std::to_string(one.python.size()) + " native-bytes " +
           std::to_string(one.native.size()) + " error-bytes " +
           std::to_string(one.error.size()) + "\n";
    out += one.host + one.python + one.native + one.error;
  }
  return out + "end\n";
}

// " heard MS": how long ago the controller last read bytes from rank `r`;
// a live link carries a heartbeat at least every CROWN_HEARTBEAT_INTERVAL_MS,
// so a large value means a quiet, or dying, link. Empty for the controller
// itself and for a rank it has no live link to.
std::string heardField(const Proc& proc, Rank r) {
  auto heard = proc.lastHeard(r);
  if (!heard) return "";
  auto ago = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - *heard);
  return " heard " + std::to_string(std::max<std::int64_t>(ago.count(), 0));
}

std::string encodeStatus(Proc& proc) {
  std::vector<Rank> live;
  std::string out;
  std::set<Rank> stopped;  // at a pdb prompt
  for (const PdbSession& session : pdbSessions(proc)) {
    if (session.waiting) stopped.insert(session.rank);
  }
  for (Rank r = 0; r < proc.size(); ++r) {
    if (proc.alive(r)) {
      live.push_back(r);
    } else if (proc.joined(r)) {
      out += "rank " + std::to_string(r) + " state lost host " + proc.host(r) + heardField(proc, r) +
             "\n";
    }
  }
  for (const auto& one : collectStatus(proc, live, std::chrono::milliseconds(2000))) {
    std::string state = !one.error.empty()        ? "silent"
                        : stopped.count(one.rank) ? "stopped"
                                                  : "alive";
    // After the answers came (up to 2 s): how fresh each link is now.
    out += "rank " + std::to_string(one.rank) + " state " + state + " host " + one.host +
           heardField(proc, one.rank);
    if (one.error.empty()) {
      out += " pid " + std::to_string(one.pid) + " rss " + std::to_string(one.rssBytes) +
             " actors " + std::to_string(one.actors) + " queued " + std::to_string(one.queued) +
             " inflight " + std::to_string(one.requestsInFlight) + " handled " +
             std::to_string(one.handled);
    } else {
      out += " error " + one.error;  // the rest of the line
    }
    out += "\n";
  }
  return out + "end\n";
}

std::string jsonLine(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

// "pdb list", "pdb read RANK SESSION", "pdb send RANK SESSION LINE": the
// remote pdb sessions (pdb.h), answered as one JSON document and a newline.
std::string answerPdb(Proc& proc, const std::string& args) {
  std::istringstream in(args);
  std::string verb;
  in >> verb;
  if (verb == "list") {
    nlohmann::json sessions = nlohmann::json::array();
    for (const PdbSession& s : pdbSessions(proc)) {
      sessions.push_back({{"rank", s.rank}, {"session", s.session}, {"actor", s.actor},
                          {"member", s.member}, {"coords", s.coords}, {"host", s.host},
                          {"function", s.function}, {"file", s.file}, {"line", s.line},
                          {"waiting", s.waiting}});
    }
    return jsonLine(sessions);
  }
  Rank rank = 0;
  std::uint64_t session = 0;
  if (!(in >> rank >> session) || (verb != "read" && verb != "send")) {
    throw Error("pdb takes list, read RANK SESSION or send RANK SESSION LINE, not '" + args + "'");
  }
  if (verb == "read") {
    PdbRead read = pdbRead(proc, rank, session, std::chrono::milliseconds(2000));
    return jsonLine({{"output", read.output}, {"waiting", read.waiting}, {"ended", read.ended}});
  }
  std::string line;
  if (in.peek() == ' ') in.get();  // one space before the line; the rest is the line
  std::getline(in, line);
  pdbSend(proc, rank, session, line);
  return "ok\n";
}

}  // namespace

std::string answerCommand(Proc& proc, const std::string& command) {
  if (command == "ping") return "ok\n";
  if (command == "status") return encodeStatus(proc);
  if (command == "stacks" || command == "stacks native") {
    bool native = command == "stacks native";
    std::vector<Rank> live;
    for (Rank r = 0; r < proc.size(); ++r) {
      if (proc.alive(r)) live.push_back(r);
    }
    auto bound = std::chrono::milliseconds(native ? 10000 : 5000);
    return encodeStacks(collectStacks(proc, live, native, bound));
  }
  if (command.rfind("pdb ", 0) == 0) return answerPdb(proc, command.substr(4));
  return "error: no command '" + command +
         "' (ping, status, stacks, stacks native, pdb list|read|send)\n";
}

}  // namespace crown::debug
