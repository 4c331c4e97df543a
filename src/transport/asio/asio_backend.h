// AsioBackend: one Boost.Asio backend of the fabric, over TCP between hosts
// or over abstract Unix domain sockets within one (same frames, same
// handshake: an abstract socket has no file permissions, so SEC-1 matters
// there too). It listens on one acceptor and keeps one Link per peer to
// write to (link.h); the links run on the IoPool, each on its own strand.
// Thread-safe.
#pragma once

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange

#include <boost/asio.hpp>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "crown/transport/transport.h"

namespace crown::transport {

namespace asio = boost::asio;
using Socket = asio::generic::stream_protocol::socket;  // TCP or Unix
using Acceptor = asio::basic_socket_acceptor<asio::generic::stream_protocol>;
// Every link runs on its own strand: the pool has several threads, and one
// link's socket, queue and timers are touched by one of them at a time.
using Strand = asio::strand<asio::io_context::executor_type>;

class Link;

class AsioBackend final : public Backend {
 public:
  enum class Kind { kTcp, kUnix };
  AsioBackend(Kind kind, const AsioOptions& options);
  ~AsioBackend() override;

  std::string name() const override { return kind_ == Kind::kTcp ? "tcp" : "unix"; }
  std::string address() const override { return address_; }
  bool reaches(const std::string& address) const override;
  std::string describe(const std::string& address) const override;
  void start(std::vector<std::string> peers, TransportCallbacks callbacks) override;
  void admit(Rank rank, const std::string& address) override;
  void send(Rank to, OutMessage message) override;
  void stop(std::chrono::milliseconds flushTimeout) override;
  void depart(const std::string& lastWords, std::chrono::milliseconds bound) override;
  /// The latest of the live links with `peer` (its send link, and the one
  /// the peer opened, when they differ).
  std::optional<std::chrono::steady_clock::time_point> lastHeard(Rank peer) const override;

  // For the links.
  asio::io_context& io();
  const AsioOptions& options() const { return options_; }
  /// Where `peer` listens, and that place for people.
  asio::generic::stream_protocol::endpoint target(Rank peer) const;
  std::string describePeer(Rank peer) const { return describe(peerAddress(peer)); }
  const TransportCallbacks& callbacks() const { return callbacks_; }
  void reportPeerLost(Rank peer, const LinkError& error);
  /// A server link authenticated as `peer`: it becomes the send link to
  /// that peer unless this rank already has one.
  void offerSendLink(Rank peer, const std::shared_ptr<Link>& link);
  /// The link is closed; `dropSendLink`: it is no longer the send link to its peer.
  void forget(const std::shared_ptr<Link>& link, bool dropSendLink);
  bool stopping() const { return stopping_; }
  /// A link's heartbeat timer fired `late`: this process was suspended.
  void noteSuspension(std::chrono::milliseconds late);
  /// For a link lost soon after a suspension: " (this process was just
  /// suspended for N ms: the peer has likely given this rank up)"; else "".
  std::string suspensionNote() const;
  /// A server link from `source` finished its handshake, either way.
  void authenticationEnded(const std::string& source);
  /// An answer to request `id` came from `peer` on a link other than the
  /// one the request went out on (each side writes on its own send link).
  void answered(Rank peer, std::uint64_t id);
  /// `peer` said how it is dying (a departing notice, link.cpp).
  void noteLastWords(Rank peer, std::string words);
  /// For a link to `peer` that was lost: "; its last words: killed by
  /// SIGSEGV", or with `sayIfNone` (its connection broke), that it left none.
  std::string lastWordsNote(Rank peer, bool sayIfNone);

 private:
  asio::awaitable<void> acceptLoop();
  /// Counts a connection from `source` that has yet to authenticate; false
  /// (and counts nothing) when that source already has its share.
  bool admitUnauthenticated(const std::string& source);
  std::size_t unauthenticated();
  std::string peerAddress(Rank peer) const;

  Kind kind_;
  AsioOptions options_;
  std::shared_ptr<IoPool> pool_;
  bool ownsPool_ = false;
  Strand acceptStrand_;
  Acceptor acceptor_;
  std::string address_;
  TransportCallbacks callbacks_;
  bool started_ = false;
  std::atomic<bool> stopping_{false};
  std::atomic<std::int64_t> suspensionEnded_{0};  // steady_clock ticks
  std::atomic<std::int64_t> suspensionMs_{0};

  mutable std::mutex mutex_;  // guards peers_, sendLinks_, lost_, lastWords_, links_
  std::vector<std::string> peers_;  // by rank: where each listens ("" until it joins)
  std::vector<std::shared_ptr<Link>> sendLinks_;  // by peer rank
  std::vector<bool> lost_;
  std::vector<std::string> lastWords_;  // by peer rank: what its departing notice said
  std::set<std::shared_ptr<Link>> links_;  // every open link, for stop()
  // Connections accepted but not yet authenticated, by source address (the
  // peer's IP; all local sockets are one source): bounded per source and
  // in total, so a flood of idle connections cannot take every descriptor.
  std::map<std::string, std::size_t> unauthenticated_;
  std::size_t unauthenticatedTotal_ = 0;
  std::size_t maxUnauthenticated_;
  std::size_t maxUnauthenticatedPerSource_;
};

}  // namespace crown::transport
