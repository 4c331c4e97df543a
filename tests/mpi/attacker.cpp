// An intruder: connects to a crown rank's port and tries, in turn, raw
// garbage, garbage after the hello, a forged handshake with a wrong secret
// followed by a well-formed frame, and a frame with no handshake at all.
// Exits 0 when the rank closed the connection every time without answering
// past its hello; 1 otherwise.
//   attacker tcp:HOST:PORT|unix:NAME DEST_RANK DEST_LOCAL
#include <utility>  // before Asio: Boost 1.74 uses std::exchange without including it

#include <crown/transport/auth.h>
#include <crown/wire/frame.h>
#include <boost/asio.hpp>

#include <chrono>
#include <iostream>

#include "attack_messages.h"

namespace asio = boost::asio;
using asio::ip::tcp;
using Socket = asio::generic::stream_protocol::socket;
using Target = asio::generic::stream_protocol::endpoint;
using namespace crown;

namespace {

std::string frameTo(const wire::ActorId& dest) {
  wire::Envelope envelope{wire::MessageKind::kOneWay, {0, 0}, dest, 0, "crown.testing.Poke"};
  wire::Bytes payload = wire::toBytes(testing::Poke{666});
  return wire::encodeFrameHead(envelope, payload.size()) + payload;
}

// True when the server closes the connection within 10 s, having sent at
// most its hello (which it sends before it knows anything of the client).
bool closedByServer(Socket& socket, std::size_t helloAlreadyRead) {
  socket.non_blocking(false);
  timeval limit{10, 0};
  setsockopt(socket.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  std::size_t received = helloAlreadyRead;
  for (;;) {
    char buffer[256];
    boost::system::error_code ec;
    std::size_t n = socket.read_some(asio::buffer(buffer), ec);
    received += n;
    if (received > transport::kHelloBytes) {
      std::cerr << "attacker: the server answered past its hello\n";
      return false;
    }
    if (ec) return ec == asio::error::eof || ec == asio::error::connection_reset;
  }
}

// `attack` returns how many bytes of the server's hello it read.
bool attempt(const Target& target, const std::string& name,
             const std::function<std::size_t(Socket&)>& attack) {
  asio::io_context io;
  Socket socket(io);
  socket.connect(target);
  std::size_t helloRead = 0;
  try {
    helloRead = attack(socket);
  } catch (const boost::system::system_error&) {
    // the server may close before the whole attack is written: a rejection too
  }
  bool rejected = closedByServer(socket, helloRead);
  std::cout << "attacker: " << name << ": " << (rejected ? "rejected" : "NOT REJECTED")
            << std::endl;
  return rejected;
}

std::array<std::uint8_t, transport::kHelloBytes> readHello(Socket& socket) {
  std::array<std::uint8_t, transport::kHelloBytes> hello{};
  asio::read(socket, asio::buffer(hello));
  return hello;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: attacker tcp:HOST:PORT|unix:NAME DEST_RANK DEST_LOCAL\n";
    return 2;
  }
  std::string spec = argv[1];
  Target target;
  if (spec.rfind("unix:", 0) == 0) {
    target = asio::local::stream_protocol::endpoint(std::string(1, '\0') + spec.substr(5));
  } else if (spec.rfind("tcp:", 0) == 0) {
    auto colon = spec.rfind(':');
    target = tcp::endpoint(asio::ip::make_address(spec.substr(4, colon - 4)),
                           static_cast<unsigned short>(std::stoi(spec.substr(colon + 1))));
  } else {
    std::cerr << "attacker: target must be tcp:HOST:PORT or unix:NAME\n";
    return 2;
  }
  wire::ActorId dest{static_cast<Rank>(std::stoul(argv[2])), std::stoull(argv[3])};
  bool ok = true;

  ok &= attempt(target, "garbage", [](Socket& socket) {
    asio::write(socket, asio::buffer(std::string(200, '\x5a')));
    return std::size_t{0};
  });
  ok &= attempt(target, "garbage after hello", [](Socket& socket) {
    readHello(socket);
    asio::write(socket, asio::buffer(std::string(transport::kClientAuthBytes, '\x01')));
    return transport::kHelloBytes;
  });
  ok &= attempt(target, "wrong HMAC, then a frame", [&](Socket& socket) {
    auto hello = readHello(socket);
    auto decoded = transport::decodeHello(hello);
    if (!decoded) throw std::runtime_error("no hello");
    transport::LinkBinding link{decoded->security, decoded->server, 0, decoded->nonce,
                                transport::randomNonce()};
    transport::ClientAuth forged{0, link.clientNonce,
                                 transport::clientProof(transport::randomSecret(), link)};
    auto bytes = transport::encodeClientAuth(forged);
    asio::write(socket, asio::buffer(bytes));
    asio::write(socket, asio::buffer(frameTo(dest)));
    return transport::kHelloBytes;
  });
  ok &= attempt(target, "frame without handshake", [&](Socket& socket) {
    asio::write(socket, asio::buffer(frameTo(dest)));
    return std::size_t{0};
  });
  return ok ? 0 : 1;
}
