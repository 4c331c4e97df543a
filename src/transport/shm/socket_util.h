// The shared-memory backend's Unix sockets (shm_backend.cpp): abstract
// addresses, blocking exchanges bounded by the socket's timeouts (the
// handshake), and the one-byte signs of life that keep a quiet link known
// alive (heartbeats go over the socket, frames through the ring).
#pragma once

#include <sys/socket.h>
#include <sys/un.h>

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>

namespace crown::transport::shm {

sockaddr_un abstractAddress(const std::string& name, socklen_t& size);

/// The process at the other end of connected Unix socket `fd`, as the
/// kernel saw it connect (SO_PEERCRED); 0 when it cannot say.
pid_t peerProcess(int fd);

/// SO_RCVTIMEO and SO_SNDTIMEO; 0 blocks without a bound.
void setTimeouts(int fd, std::chrono::milliseconds bound);

/// False when the peer closed or a timeout passed first.
bool sendAll(int fd, const void* data, std::size_t size);
bool readAll(int fd, void* data, std::size_t size);

// After the handshake a link's socket carries, back from the reader to the
// writer and also the other way, heartbeat bytes (0) and at most one
// refusal: 1, a u16 length, the text of why the reader refused a frame (it
// then closes the link, as an Asio link does after a bad frame).

/// Writes one heartbeat byte without blocking (a full socket buffer means
/// the peer has years of them unread: nothing is lost by skipping one).
void sendHeartbeat(int fd);

/// Writes the refusal (its text cut to 512 bytes).
void sendRefusal(int fd, const std::string& why);

/// What the socket says of its peer, without blocking: heartbeat bytes that
/// arrived (read and dropped), a refusal, and whether its end is gone (its
/// process ended, or it shut the link).
struct SocketNews {
  bool heard = false;
  bool hungUp = false;
  std::optional<std::string> refusal;
};
SocketNews readNews(int fd);

}  // namespace crown::transport::shm
