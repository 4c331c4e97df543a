// The job's debug server (issue 15, "Access"): on the controller, a Unix
// socket that `crown stacks` (python/crown/cli.py) reaches from another
// terminal, served by a thread of its own, so it answers while the
// controller's program is blocked, GIL and all. It lives in a directory only
// the job's user can enter (CROWN_DEBUG_DIR, else $XDG_RUNTIME_DIR/crown or
// /tmp/crown-UID, made 0700 and refused if anyone else can enter it), as
// job-PID.sock beside job-PID.token (0600, 32 random bytes in hex). With
// CROWN_DEBUG_TCP=[HOST][:PORT] it also listens on TCP, for a client on
// another node that shares the directory (CROWN_DEBUG_DIR in the user's
// home), and writes "HOST PORT NODE" to job-PID.tcp (0600). A local client
// must be the same user (SO_PEERCRED, checked at accept); every client and
// the server prove to each other that they read the token (only the job's
// user can), before the client says what it wants (protocol 2; the lines
// are in src/debug/admission.h):
//   server: "crown-debug 2 SNONCE\n"
//   client: "CNONCE CPROOF\n"        server: "SPROOF\n" (or "refused: why\n")
//   client: "COMMAND [ARGS]\n"       server: the answer, then closes.
// Handshakes run on the accepting thread without blocking, bounded per pool
// (local, remote) and per remote address; only clients that proved the
// token reach the answerers, and local ones are answered first.
// Commands: "ping" ("ok"); "status": a line per rank that joined, "rank R
// state alive host H heard T pid P rss B actors A queued Q inflight I
// handled M" (or "state lost host H heard T", or "state silent host H heard
// T error WHY"), then "end"; T: milliseconds since the controller last read
// bytes (a frame, a heartbeat) from the rank, left out for the controller
// itself and for a rank it has no live link to;
// "stacks [native]": every live rank's stacks
// (stacks.h), each as "rank R pid P host-bytes H python-bytes Y native-bytes
// N error-bytes E\n" followed by those bytes, then "end\n"; "pdb list",
// "pdb read RANK SESSION" (waits up to 2 s for a prompt) and "pdb send RANK
// SESSION LINE": remote pdb sessions (pdb.h), each answered as one line of
// JSON ("ok" for send). A rank stopped at a prompt has state "stopped".
#pragma once

#include <memory>
#include <string>

#include "crown/actor/proc.h"

namespace crown::debug {

class DebugServer {
 public:
  /// Listens for `proc` (the controller's); throws crown::Error saying why
  /// it cannot (a directory others can enter, say).
  static std::unique_ptr<DebugServer> start(Proc& proc);
  /// Stops serving and removes the socket and the token.
  ~DebugServer();
  const std::string& socketPath() const;

  struct Impl;

 private:
  explicit DebugServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// Where the debug servers of this user's jobs listen (made if missing).
std::string debugDirectory();

}  // namespace crown::debug
