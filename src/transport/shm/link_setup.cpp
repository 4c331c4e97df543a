#include "transport/shm/link_setup.h"

#include <unistd.h>

#include <array>

#include "crown/common/error.h"
#include "crown/common/log.h"
#include "crown/transport/handshake.h"
#include "transport/shm/socket_util.h"

namespace crown::transport::shm {

std::variant<OpenedLink, LinkError> openLink(const std::string& name, Rank to,
                                             std::size_t ringBytes, const AsioOptions& options) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  socklen_t size = 0;
  sockaddr_un address = abstractAddress(name, size);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&address), size) != 0) {
    if (fd >= 0) ::close(fd);
    return LinkError{LinkError::Kind::kRefused, "nobody listens at @" + name + " (shared memory)"};
  }
  setTimeouts(fd, options.authTimeout);
  try {
    ClientHandshake handshake(options.secret, options.security, options.rank, to);
    std::array<std::uint8_t, kHelloBytes> hello{};
    std::array<std::uint8_t, kServerAuthBytes> proof{};
    if (!readAll(fd, hello.data(), hello.size())) throw ProtocolError("no hello came");
    auto auth = handshake.onHello(hello);
    if (!sendAll(fd, auth.data(), auth.size()) || !readAll(fd, proof.data(), proof.size())) {
      throw ProtocolError("the peer refused this rank's proof of the job secret");
    }
    handshake.onServerAuth(proof);
    Ring ring = Ring::create(ringBytes);
    sendFd(fd, ring.fd());
    setTimeouts(fd, std::chrono::milliseconds(0));
    return OpenedLink{fd, std::move(ring)};
  } catch (const std::exception& e) {
    ::close(fd);
    return LinkError{LinkError::Kind::kAuthFailed,
                     "shared-memory link to rank " + std::to_string(to) + ": " + e.what()};
  }
}

std::optional<AcceptedLink> acceptLink(int fd, const AsioOptions& options) {
  setTimeouts(fd, options.authTimeout);
  try {
    ServerHandshake handshake(options.secret, options.security, options.rank, options.size);
    auto hello = handshake.hello();
    std::array<std::uint8_t, kClientAuthBytes> auth{};
    if (!sendAll(fd, hello.data(), hello.size()) || !readAll(fd, auth.data(), auth.size())) {
      return std::nullopt;
    }
    LinkSession session;
    auto proof = handshake.onClientAuth(auth, session);
    if (!sendAll(fd, proof.data(), proof.size())) return std::nullopt;
    AcceptedLink link{session.peer, Ring::attach(receiveFd(fd))};
    setTimeouts(fd, std::chrono::milliseconds(0));
    return link;
  } catch (const std::exception& e) {
    log::get().warn("shared-memory backend: refused a link: {}", e.what());
    ::shutdown(fd, SHUT_RDWR);
    return std::nullopt;
  }
}

}  // namespace crown::transport::shm
