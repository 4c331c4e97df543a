// Admission to the debug server (debug_server.cpp): every client's handshake
// runs here, on the server's accepting thread, as a nonblocking state
// machine, so a client that has not proved the token holds no answerer and
// makes nobody wait (issue 43: 64 silent TCP connections used to hold every
// answerer for its 5 s window while the job's own user waited 27 s).
//
// The handshake is mutual (protocol 2), so a client also learns that it
// reached the job's server and not a process that copied a socket's name:
//   server: "HELLO 2 SNONCE\n"                  HELLO: crown-debug (crown-console in Python)
//   client: "CNONCE CPROOF\n"                   CPROOF = HMAC(token, "HELLO client" SNONCE CNONCE)
//   server: "SPROOF\n"                          SPROOF = HMAC(token, "HELLO server" SNONCE CNONCE)
//           or "refused: why\n", then closes
//   client: "COMMAND [ARGS]\n"                  sent only once SPROOF checks out
// (nonces 32 random bytes, all in hex; the labels keep a client's proof from
// serving as a server's, and one service's proof from serving at the other).
//
// Bounds, each refused at once with "error: ... busy" rather than queued:
// local (Unix socket) clients, already checked to be the job's user with
// SO_PEERCRED at accept, have their own pool; remote (TCP) clients share
// another, with a few per peer address, so one host cannot take them all.
// Every handshake ends within kHandshakeSeconds. Owned by one thread.
#pragma once

#include <poll.h>

#include <chrono>
#include <span>
#include <string>
#include <vector>

#include "crown/transport/auth.h"

namespace crown::debug {

/// A client that proved the token and sent its command; its socket is
/// blocking again, and the caller now owns it.
struct AdmittedClient {
  int fd = -1;
  bool local = false;
  std::string command;
};

/// `bytes` in lower-case hex, as the debug protocol and token file write them.
std::string hexOf(std::span<const std::uint8_t> bytes);

/// The proof one side of the debug handshake sends, hex: `role` is
/// "client" or "server" (admission.h's header says what it covers).
std::string debugProof(const transport::Secret& token, const std::string& hello,
                       const std::string& role, const transport::Nonce& serverNonce,
                       const transport::Nonce& clientNonce);

class Admission {
 public:
  static constexpr int kHandshakeSeconds = 5;
  static constexpr std::size_t kMaxLocal = 64;
  static constexpr std::size_t kMaxRemote = 64;
  static constexpr std::size_t kMaxRemotePerAddress = 4;

  Admission(transport::Secret token, std::string hello);
  ~Admission();  // closes the clients still shaking hands
  Admission(const Admission&) = delete;
  Admission& operator=(const Admission&) = delete;

  /// A client just accepted: greeted, or refused and closed (over a bound,
  /// or, local, not the job's user).
  void add(int fd, bool local);
  /// One poll entry per client still shaking hands, appended to `fds`.
  void appendPollEntries(std::vector<pollfd>& fds) const;
  /// Reads what `entries` (those appendPollEntries appended, polled) say is
  /// there, closes the clients that fail or outlive their window, and
  /// returns those that completed.
  std::vector<AdmittedClient> progress(std::span<const pollfd> entries);
  /// How long poll may sleep before the next handshake's window ends (-1: none).
  int pollTimeoutMs() const;

 private:
  enum class Stage { kProof, kCommand };
  struct Pending {
    int fd = -1;
    bool local = false;
    std::string address;  // the peer's, for a remote client
    Stage stage = Stage::kProof;
    transport::Nonce serverNonce{};
    std::string received;
    std::chrono::steady_clock::time_point deadline;
  };

  // Handles one complete line; false when the client is done for (refused).
  bool onLine(Pending& client, const std::string& line);
  std::size_t remoteFrom(const std::string& address) const;

  transport::Secret token_;
  std::string hello_;
  std::vector<Pending> pending_;
};

}  // namespace crown::debug
