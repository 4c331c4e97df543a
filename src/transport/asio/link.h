// Link: one connection of an AsioBackend with one peer. The client side
// connects and proves it holds the job secret; the server side accepts and
// checks (SEC-1). Both sides then read frames. A rank writes to a peer over
// exactly one link, its send link for that peer (ORD-1): the connection it
// opened, or the one the peer opened first if that came earlier, so that a
// request and its reply share one connection in both directions.
//
// Senders on other threads write straight to the socket when its queue is
// empty (no thread hop on the latency path) and otherwise append to the
// queue, which the link's strand drains with one gathered write per batch
// (coalescing small frames; a payload's segments go out where they lie).
// Once the handshake has given the link its session keys, every frame is
// sealed (frame_seal.h) at the moment its place on the wire is fixed, under
// the link's mutex: frames queued while connecting are sealed when it ends.
// A large payload's seal is only begun then; the strand seals it a chunk at
// a time just before writing that chunk, so sealing overlaps the transfer.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <unordered_set>

#include "crown/transport/handshake.h"
#include "transport/asio/asio_backend.h"
#include "transport/frame_seal.h"

namespace crown::transport {

// Thrown inside a link's coroutines only, and caught at their ends.
struct LinkFailure : std::runtime_error {
  explicit LinkFailure(LinkError e) : std::runtime_error(e.message), error(std::move(e)) {}
  LinkError error;
};

bool isTcp(Socket& socket);
/// A broken connection as a LinkError: the peer closed it, or it broke.
LinkError connectionError(const boost::system::error_code& ec, const std::string& what);
/// Out of descriptors, buffers or memory in this process: a local problem,
/// to wait out, never a sign that the peer died.
bool isLocalShortage(const boost::system::error_code& ec);
/// No Nagle on TCP, large socket buffers, non-blocking (for direct writes).
void tuneSocket(Socket& socket);

class Link : public std::enable_shared_from_this<Link> {
 public:
  /// A client link to `peer`; connects on the first send.
  Link(AsioBackend& backend, Rank peer);
  /// A server link: `socket` was accepted on `strand`, from `source`
  /// (counted by the backend until the handshake ends).
  Link(AsioBackend& backend, Strand strand, Socket socket, std::string source);

  void startServer();
  void send(OutMessage message);  // any thread
  /// Queues a notice (wire::MessageKind::kNotice) of `type` saying `text`,
  /// when the link is ready; any thread.
  void sendNotice(std::string_view type, const std::string& text);
  /// Nothing queued or being written (for stop()).
  bool idle();
  /// The answer to request `id` came back; false when it was not sent here.
  bool answered(std::uint64_t id);
  /// When this link last read bytes from `peer`, while it is ready and
  /// `peer`'s; nullopt before its first bytes or once it died. Any thread.
  std::optional<std::chrono::steady_clock::time_point> lastHeardFrom(Rank peer);
  void close();  // on the strand
  Strand& strand() { return strand_; }

 private:
  enum class State { kIdle, kConnecting, kReady, kDead };
  struct QueuedFrame {
    std::string head;  // frame header + envelope
    OutMessage message;
    std::size_t written = 0;  // bytes of head+body+tag already on the wire
    bool sealed = false;
    bool encrypted = false;  // `ciphertext` goes out instead of the payload
    std::string ciphertext;  // the payload's from body offset cipherBegin (all, unless streamed)
    std::size_t cipherBegin = 0;
    FrameTag tag{};
    std::size_t tagBytes = 0;
    std::unique_ptr<StreamedSeal> streamed;  // while a large payload is sealed as it goes
    std::size_t bodySealed = 0;              // of a streamed payload
    std::size_t size() const { return head.size() + message.payload.size() + tagBytes; }
    /// Bytes that may go on the wire: all, or a streamed frame's sealed part.
    std::size_t ready() const { return streamed ? head.size() + bodySealed : size(); }
  };

  asio::awaitable<void> connectAndAuthenticate();
  asio::awaitable<bool> authenticateClient();  // server side
  void endAuthentication();  // server side: tells the backend, once
  /// async_connect, waiting out a shortage of descriptors (isLocalShortage).
  asio::awaitable<void> connectPatiently(const bool& expired);
  asio::awaitable<void> retryAfter(std::chrono::milliseconds& backoff,
                                  const boost::system::error_code& ec, const bool& expired);
  /// Connects and reads the peer's hello, retrying while the peer turns
  /// connections away unread.
  asio::awaitable<void> connectUntilGreeted(std::array<std::uint8_t, kHelloBytes>& hello,
                                            const bool& expired);
  asio::awaitable<void> readFrames();
  /// A frame from the peer broke the protocol: tell the peer why, let that
  /// reach it, then close. Only this link; the peer lives on (SEC-1).
  asio::awaitable<void> closeAfterNotice(const std::string& why);
  /// Handles a notice the peer sent; true when it closed the link.
  bool onNotice(const std::string& type, const std::string& text);
  /// Sends heartbeats while the link is quiet and fails it when the peer is.
  void startHeartbeats();  // on the strand
  void scheduleHeartbeat();
  template <class Out>
  static void gatherBuffers(const QueuedFrame& frame, Out& out);
  void startWrite();                      // on the strand
  void wrote(std::size_t bytes);          // the strand's write ended: pops what went out
  void fail(const LinkError& givenError);  // any thread
  bool tryWriteDirect(QueuedFrame& frame);  // with mutex_ held
  /// Takes the handshake's keys and seals what queued meanwhile; with mutex_ held.
  void beginSession(const LinkSession& session);
  void seal(QueuedFrame& frame);  // with mutex_ held, in wire order
  void sealNextChunk(QueuedFrame& frame);  // a streamed frame's, with mutex_ held

  AsioBackend& backend_;
  Rank peer_ = 0;  // a server link learns it in the handshake
  Strand strand_;
  Socket socket_;
  std::string remote_;
  std::string source_;  // a server link's, while its handshake runs
  std::mutex mutex_;
  State state_ = State::kIdle;
  std::optional<LinkError> error_;  // why it died (kDead)
  bool writing_ = false;
  std::deque<QueuedFrame> queue_;
  // Requests sent on this link whose answers have not come back (on it, or
  // on the peer's own send link): a link closed over a bad frame fails
  // these, not every request to the peer.
  std::unordered_set<std::uint64_t> inFlight_;
  std::optional<FrameSealer> sealer_;  // under mutex_; none under FabricSecurity::kAuth
  std::optional<FrameOpener> opener_;  // the reading coroutine's
  std::chrono::steady_clock::time_point lastSend_{};
  std::atomic<std::int64_t> lastHeard_{0};  // steady_clock ticks of the last bytes read
  asio::steady_timer heartbeat_{strand_};
};

}  // namespace crown::transport
