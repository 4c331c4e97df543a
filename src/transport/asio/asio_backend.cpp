#include "transport/asio/asio_backend.h"
#include "transport/last_words.h"
#include "transport/shm/shm_backend.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstring>
#include <future>
#include <thread>

#include "crown/common/log.h"
#include "transport/asio/link.h"
#include "transport/io_pool_impl.h"

namespace crown::transport {
namespace {

using tcp = asio::ip::tcp;
using Unix = asio::local::stream_protocol;
using GenericEndpoint = asio::generic::stream_protocol::endpoint;
using namespace std::chrono_literals;

// Address bytes: TCP "ip:port"; Unix "name\nhost" (the abstract socket's
// name lives in the host's network namespace, so only that host reaches it).
struct UnixAddress {
  std::string name, host;
};
UnixAddress parseUnix(const std::string& address) {
  auto cut = address.find('\n');
  if (cut == std::string::npos) return {address, ""};
  return {address.substr(0, cut), address.substr(cut + 1)};
}

// A quarter of the descriptors this process may open, and 1024 at most,
// may sit in unauthenticated connections; a source (one host) gets a
// quarter of that, and never fewer than 64: all ranks of a big node may
// connect at once at start-up.
std::size_t unauthenticatedBound() {
  rlimit limit{};
  std::size_t files = ::getrlimit(RLIMIT_NOFILE, &limit) == 0 ? limit.rlim_cur : 1024;
  return std::clamp<std::size_t>(files / 4, 16, 1024);
}

// Where an accepted connection comes from: its IP (any port), or "local".
std::string sourceOf(Socket& socket) {
  boost::system::error_code ec;
  auto remote = socket.remote_endpoint(ec);
  if (ec) return "unknown";
  if (remote.protocol().family() == AF_INET || remote.protocol().family() == AF_INET6) {
    tcp::endpoint ip;
    std::memcpy(ip.data(), remote.data(), std::min<std::size_t>(remote.size(), ip.capacity()));
    return ip.address().to_string();
  }
  return "local";
}

GenericEndpoint parseTcp(const std::string& address) {
  auto colon = address.rfind(':');
  if (colon == std::string::npos) throw ConfigError("not a TCP address: " + address);
  return tcp::endpoint(asio::ip::make_address(address.substr(0, colon)),
                       static_cast<std::uint16_t>(std::stoul(address.substr(colon + 1))));
}

std::string randomSocketName(Rank rank) {
  auto nonce = randomNonce();
  std::string name = "crown-";
  for (int i = 0; i < 8; ++i) name += "0123456789abcdef"[nonce[i] & 15];
  return name + "-" + std::to_string(rank);
}

}  // namespace

AsioBackend::AsioBackend(Kind kind, const AsioOptions& options)
    : kind_(kind),
      options_(options),
      pool_(options.pool ? options.pool : std::make_shared<IoPool>()),
      ownsPool_(!options.pool),
      acceptStrand_(asio::make_strand(IoPoolAccess::io(*pool_))),
      acceptor_(acceptStrand_),
      maxUnauthenticated_(unauthenticatedBound()),
      maxUnauthenticatedPerSource_(
          std::min(maxUnauthenticated_, std::max<std::size_t>(64, maxUnauthenticated_ / 4))) {
  GenericEndpoint endpoint;
  std::string where;
  try {
    if (kind_ == Kind::kTcp) {
      where = options.bindAddress;
      endpoint = tcp::endpoint(asio::ip::make_address(options.bindAddress), 0);
    } else {
      // Abstract socket names live in the network namespace, not the file
      // system: nothing to clean up, and only this host can connect.
      where = "@" + randomSocketName(options.rank);
      endpoint = Unix::endpoint(std::string(1, '\0') + where.substr(1));
    }
    acceptor_.open(endpoint.protocol());
    if (kind_ == Kind::kTcp) acceptor_.set_option(asio::socket_base::reuse_address(true));
    acceptor_.bind(endpoint);
    acceptor_.listen(asio::socket_base::max_listen_connections);
  } catch (const boost::system::system_error& e) {
    throw BootstrapError("rank " + std::to_string(options.rank) + " cannot listen on " + where +
                         ": " + e.code().message() +
                         (kind_ == Kind::kTcp ? " (choose another address with CROWN_ADDR or "
                                                "CROWN_IFACE)"
                                              : ""));
  }
  if (kind_ == Kind::kTcp) {
    GenericEndpoint bound = acceptor_.local_endpoint();
    tcp::endpoint ip;  // the generic endpoint holds a sockaddr_in or sockaddr_in6
    std::memcpy(ip.data(), bound.data(), bound.size());
    address_ = options.bindAddress + ":" + std::to_string(ip.port());
  } else {
    address_ = where.substr(1) + "\n" + options.host;
  }
}

AsioBackend::~AsioBackend() { stop(0ms); }

asio::io_context& AsioBackend::io() { return IoPoolAccess::io(*pool_); }

bool AsioBackend::reaches(const std::string& address) const {
  if (address.empty()) return false;
  return kind_ == Kind::kTcp || parseUnix(address).host == options_.host;
}

std::string AsioBackend::describe(const std::string& address) const {
  return kind_ == Kind::kTcp ? address : "local socket @" + parseUnix(address).name;
}

std::string AsioBackend::peerAddress(Rank peer) const {
  std::lock_guard lock(mutex_);
  return peers_.at(peer);
}

void AsioBackend::admit(Rank rank, const std::string& address) {
  std::lock_guard lock(mutex_);
  if (rank >= peers_.size()) {
    throw ConfigError("rank " + std::to_string(rank) + " has no slot among " +
                      std::to_string(peers_.size()));
  }
  peers_[rank] = address;
}

GenericEndpoint AsioBackend::target(Rank peer) const {
  std::string address = peerAddress(peer);
  if (kind_ == Kind::kTcp) return parseTcp(address);
  return Unix::endpoint(std::string(1, '\0') + parseUnix(address).name);
}

void AsioBackend::start(std::vector<std::string> peers, TransportCallbacks callbacks) {
  CROWN_CHECK(peers.size() == options_.size, "one address per rank is needed");
  {
    std::lock_guard lock(mutex_);
    peers_ = std::move(peers);
  }
  callbacks_ = std::move(callbacks);
  sendLinks_.resize(options_.size);
  lost_.assign(options_.size, false);
  lastWords_.resize(options_.size);
  asio::co_spawn(acceptStrand_, acceptLoop(), asio::detached);
  started_ = true;
  if (ownsPool_) pool_->start();
}

// Out of descriptors, accept() fails at once for as long as the shortage
// lasts: the loop backs off (10 ms doubling to 1 s) instead of spinning, and
// says so once a second at most. While too many connections are still
// unauthenticated it stops accepting; the kernel's backlog holds the rest.
asio::awaitable<void> AsioBackend::acceptLoop() {
  static log::RateLimit failedLog, refusedLog;
  asio::steady_timer pause(acceptStrand_);
  auto backoff = 10ms;
  auto wait = [&](std::chrono::milliseconds delay) -> asio::awaitable<void> {
    boost::system::error_code ignored;
    pause.expires_after(delay);
    co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
  };
  for (;;) {
    while (acceptor_.is_open() && unauthenticated() >= maxUnauthenticated_) co_await wait(10ms);
    boost::system::error_code ec;
    Strand strand = asio::make_strand(io());
    Socket socket(strand);
    co_await acceptor_.async_accept(socket, asio::redirect_error(asio::use_awaitable, ec));
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) co_return;
    if (ec) {
      if (auto dropped = failedLog.admit()) {
        log::get().warn("accept failed: {}; retrying in {} ms ({} such lines dropped)",
                        ec.message(), backoff.count(), *dropped);
      }
      if (isLocalShortage(ec)) {
        co_await wait(backoff);
        backoff = std::min<std::chrono::milliseconds>(backoff * 2, 1s);
      }
      continue;
    }
    backoff = 10ms;
    std::string source = sourceOf(socket);
    if (!admitUnauthenticated(source)) {
      if (auto dropped = refusedLog.admit()) {
        log::get().warn(
            "refused a connection from {}: {} connections from there are still unauthenticated "
            "({} such lines dropped)",
            source, maxUnauthenticatedPerSource_, *dropped);
      }
      boost::system::error_code ignored;
      socket.close(ignored);
      continue;
    }
    auto link = std::make_shared<Link>(*this, std::move(strand), std::move(socket), source);
    {
      std::lock_guard lock(mutex_);
      links_.insert(link);
    }
    link->startServer();
  }
}

void AsioBackend::noteSuspension(std::chrono::milliseconds late) {
  auto now = std::chrono::steady_clock::now().time_since_epoch().count();
  if (suspensionEnded_.exchange(now) < now - std::chrono::steady_clock::duration(1s).count()) {
    log::get().warn("this process was suspended or starved for {} ms (SIGSTOP, a debugger?); its "
                    "peers may have taken it for lost",
                    late.count());
  }
  suspensionMs_ = late.count();
}

std::string AsioBackend::suspensionNote() const {
  auto ended = std::chrono::steady_clock::time_point(
      std::chrono::steady_clock::duration(suspensionEnded_.load()));
  auto bound = options_.heartbeatInterval * options_.heartbeatMisses * 2;
  if (suspensionEnded_.load() == 0 || std::chrono::steady_clock::now() - ended > bound) return "";
  return " (this process was just suspended for " + std::to_string(suspensionMs_.load()) +
         " ms: the peer has likely given this rank up)";
}

bool AsioBackend::admitUnauthenticated(const std::string& source) {
  std::lock_guard lock(mutex_);
  std::size_t& fromSource = unauthenticated_[source];
  if (fromSource >= maxUnauthenticatedPerSource_) return false;
  ++fromSource;
  ++unauthenticatedTotal_;
  return true;
}

void AsioBackend::authenticationEnded(const std::string& source) {
  std::lock_guard lock(mutex_);
  auto entry = unauthenticated_.find(source);
  if (entry == unauthenticated_.end()) return;
  --unauthenticatedTotal_;
  if (--entry->second == 0) unauthenticated_.erase(entry);
}

std::size_t AsioBackend::unauthenticated() {
  std::lock_guard lock(mutex_);
  return unauthenticatedTotal_;
}

void AsioBackend::send(Rank to, OutMessage message) {
  std::shared_ptr<Link> link;
  {
    std::lock_guard lock(mutex_);
    if (to >= sendLinks_.size()) {
      throw ConfigError("rank " + std::to_string(to) + " does not exist (size " +
                        std::to_string(sendLinks_.size()) + ")");
    }
    if (!sendLinks_[to]) {
      sendLinks_[to] = std::make_shared<Link>(*this, to);
      links_.insert(sendLinks_[to]);
    }
    link = sendLinks_[to];
  }
  link->send(std::move(message));
}

void AsioBackend::offerSendLink(Rank peer, const std::shared_ptr<Link>& link) {
  std::lock_guard lock(mutex_);
  if (sendLinks_[peer]) return;  // this rank opened its own first: keep using it (ORD-1)
  sendLinks_[peer] = link;  // already ready to write: authenticated server links are
}

void AsioBackend::reportPeerLost(Rank peer, const LinkError& error) {
  {
    std::lock_guard lock(mutex_);
    if (peer >= lost_.size() || lost_[peer]) return;
    lost_[peer] = true;
  }
  if (callbacks_.onPeerLost) callbacks_.onPeerLost(peer, error);
}

void AsioBackend::answered(Rank peer, std::uint64_t id) {
  std::shared_ptr<Link> link;
  {
    std::lock_guard lock(mutex_);
    if (peer < sendLinks_.size()) link = sendLinks_[peer];
  }
  if (link) link->answered(id);
}

void AsioBackend::noteLastWords(Rank peer, std::string words) {
  if (words.size() > kMaxLastWords) words.resize(kMaxLastWords);
  std::lock_guard lock(mutex_);
  if (peer < lastWords_.size()) lastWords_[peer] = std::move(words);
}

std::string AsioBackend::lastWordsNote(Rank peer, bool sayIfNone) {
  std::string words;
  {
    std::lock_guard lock(mutex_);
    if (peer < lastWords_.size()) words = lastWords_[peer];
  }
  return transport::lastWordsNote(words, sayIfNone);
}

void AsioBackend::depart(const std::string& lastWords, std::chrono::milliseconds bound) {
  if (stopping_ || !started_) return;
  std::vector<std::shared_ptr<Link>> links;
  {
    std::lock_guard lock(mutex_);
    links.assign(links_.begin(), links_.end());
  }
  for (auto& link : links) link->sendNotice(wire::kNoticeDeparting, lastWords);
  auto deadline = std::chrono::steady_clock::now() + bound;
  while (std::chrono::steady_clock::now() < deadline &&
         !std::all_of(links.begin(), links.end(), [](auto& link) { return link->idle(); })) {
    std::this_thread::sleep_for(1ms);
  }
}

std::optional<std::chrono::steady_clock::time_point> AsioBackend::lastHeard(Rank peer) const {
  std::optional<std::chrono::steady_clock::time_point> latest;
  std::lock_guard lock(mutex_);  // then each link's, as stop() takes them
  for (const auto& link : links_) {
    auto heard = link->lastHeardFrom(peer);
    if (heard && (!latest || *heard > *latest)) latest = heard;
  }
  return latest;
}

void AsioBackend::forget(const std::shared_ptr<Link>& link, bool dropSendLink) {
  std::lock_guard lock(mutex_);
  links_.erase(link);
  // A dead peer's link stays its send link, so later sends fail at once; a
  // link closed for a bad frame goes, so the next send opens a fresh one.
  if (!dropSendLink) return;
  for (auto& sendLink : sendLinks_) {
    if (sendLink == link) sendLink.reset();
  }
}

void AsioBackend::stop(std::chrono::milliseconds flushTimeout) {
  if (stopping_.exchange(true) || !started_) return;
  auto deadline = std::chrono::steady_clock::now() + flushTimeout;
  for (;;) {
    bool idle = true;
    {
      std::lock_guard lock(mutex_);
      for (auto& link : sendLinks_) idle = idle && (!link || link->idle());
    }
    if (idle || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(1ms);
  }
  // Close everything, each on its own strand, and wait (bounded) for that.
  std::vector<std::shared_ptr<Link>> links;
  {
    std::lock_guard lock(mutex_);
    links.assign(links_.begin(), links_.end());
  }
  auto pending = std::make_shared<std::atomic<std::size_t>>(1 + links.size());
  auto allClosed = std::make_shared<std::promise<void>>();
  auto done = allClosed->get_future();
  auto closeOn = [&](Strand& strand, std::function<void()> close) {
    asio::post(strand, [close = std::move(close), pending, allClosed] {
      close();
      if (pending->fetch_sub(1) == 1) allClosed->set_value();
    });
  };
  closeOn(acceptStrand_, [this] {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
  });
  for (auto& link : links) closeOn(link->strand(), [link] { link->close(); });
  done.wait_for(1s);
  if (ownsPool_) pool_->stop();
}

std::unique_ptr<Backend> makeTcpBackend(const AsioOptions& options) {
  return std::make_unique<AsioBackend>(AsioBackend::Kind::kTcp, options);
}

std::unique_ptr<Backend> makeUnixBackend(const AsioOptions& options) {
  return std::make_unique<AsioBackend>(AsioBackend::Kind::kUnix, options);
}

std::unique_ptr<Transport> makeAsioTransport(const AsioOptions& options) {
  std::vector<std::unique_ptr<Backend>> backends;
  if (options.sharedMemory) backends.push_back(shm::makeShmBackend(options));
  if (options.listenLocal) {
    try {
      backends.push_back(makeUnixBackend(options));
    } catch (const BootstrapError& e) {
      log::get().warn("no same-host socket ({}); ranks on this host use TCP", e.what());
    }
  }
  backends.push_back(makeTcpBackend(options));
  return makeRoutingTransport(std::move(backends), options.rank, options.size);
}

}  // namespace crown::transport
