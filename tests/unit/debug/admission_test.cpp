// The debug server's admission (src/debug/admission.h): the mutual
// handshake, refusals, and the bounds that keep unauthenticated clients
// from holding anything but a poll entry.
#include "debug/admission.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace crown::debug {
namespace {

std::string readLine(int fd) {
  std::string line;
  char c = 0;
  while (::recv(fd, &c, 1, 0) == 1 && c != '\n') line += c;
  return line;
}

void sendText(int fd, const std::string& text) {
  ASSERT_EQ(::send(fd, text.data(), text.size(), MSG_NOSIGNAL), static_cast<ssize_t>(text.size()));
}

template <std::size_t N>
std::array<std::uint8_t, N> fromHex(const std::string& text) {
  std::array<std::uint8_t, N> out{};
  for (std::size_t i = 0; i < N; ++i) out[i] = std::stoi(text.substr(2 * i, 2), nullptr, 16);
  return out;
}

// Polls `admission` until it hands over a client or `rounds` pass.
std::vector<AdmittedClient> pump(Admission& admission, int rounds = 50) {
  for (int i = 0; i < rounds; ++i) {
    std::vector<pollfd> fds;
    admission.appendPollEntries(fds);
    ::poll(fds.data(), fds.size(), 20);
    auto admitted = admission.progress(fds);
    if (!admitted.empty()) return admitted;
  }
  return {};
}

class AdmissionTest : public ::testing::Test {
 protected:
  transport::Secret token = transport::randomSecret();
  Admission admission{token, "crown-debug"};

  // A local client's end, its server end handed to `admission`.
  int connectLocal() {
    int pair[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
    admission.add(pair[1], /*local=*/true);
    return pair[0];
  }
};

TEST_F(AdmissionTest, BothSidesProveTheTokenBeforeTheCommand) {
  int client = connectLocal();
  std::string greeting = readLine(client);
  ASSERT_EQ(greeting.substr(0, 14), "crown-debug 2 ");
  auto serverNonce = fromHex<32>(greeting.substr(14));
  transport::Nonce clientNonce = transport::randomNonce();
  sendText(client, hexOf(clientNonce) + " " +
                       debugProof(token, "crown-debug", "client", serverNonce, clientNonce) + "\n");
  // Not yet admitted: the server proves itself first.
  EXPECT_TRUE(pump(admission, 5).empty());
  EXPECT_EQ(readLine(client), debugProof(token, "crown-debug", "server", serverNonce, clientNonce));
  sendText(client, "status\n");
  auto admitted = pump(admission);
  ASSERT_EQ(admitted.size(), 1u);
  EXPECT_EQ(admitted[0].command, "status");
  EXPECT_TRUE(admitted[0].local);
  ::close(admitted[0].fd);
  ::close(client);
}

TEST_F(AdmissionTest, AWrongProofIsRefusedAndNothingIsAdmitted) {
  int client = connectLocal();
  std::string greeting = readLine(client);
  auto serverNonce = fromHex<32>(greeting.substr(14));
  transport::Nonce clientNonce = transport::randomNonce();
  // A proof made with another token, and one that reflects the server's label.
  transport::Secret other = transport::randomSecret();
  sendText(client, hexOf(clientNonce) + " " +
                       debugProof(other, "crown-debug", "client", serverNonce, clientNonce) + "\n");
  EXPECT_TRUE(pump(admission, 5).empty());
  EXPECT_EQ(readLine(client), "refused: the proof does not match the job's token");

  int second = connectLocal();
  serverNonce = fromHex<32>(readLine(second).substr(14));
  sendText(second, hexOf(clientNonce) + " " +
                       debugProof(token, "crown-console", "client", serverNonce, clientNonce) +
                       "\n");
  EXPECT_TRUE(pump(admission, 5).empty());
  EXPECT_EQ(readLine(second), "refused: the proof does not match the job's token");
  ::close(client);
  ::close(second);
}

TEST_F(AdmissionTest, LocalClientsPastThePoolAreRefusedAtOnce) {
  std::vector<int> clients;
  for (std::size_t i = 0; i < Admission::kMaxLocal; ++i) clients.push_back(connectLocal());
  int extra = connectLocal();
  EXPECT_EQ(readLine(extra).substr(0, 28), "error: the debug server is b");
  for (int fd : clients) ::close(fd);
  ::close(extra);
}

TEST_F(AdmissionTest, RemoteClientsAreBoundedPerAddress) {
  int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof address;
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(::listen(listener, 16), 0);
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &size), 0);
  std::vector<int> clients;
  for (std::size_t i = 0; i <= Admission::kMaxRemotePerAddress; ++i) {
    int client = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_EQ(::connect(client, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    admission.add(::accept(listener, nullptr, nullptr), /*local=*/false);
    clients.push_back(client);
  }
  for (std::size_t i = 0; i < Admission::kMaxRemotePerAddress; ++i) {
    EXPECT_EQ(readLine(clients[i]).substr(0, 14), "crown-debug 2 ");
  }
  EXPECT_NE(readLine(clients.back()).find("busy with other connections from 127.0.0.1"),
            std::string::npos);
  // A local client is not held up by them.
  int local = connectLocal();
  EXPECT_EQ(readLine(local).substr(0, 14), "crown-debug 2 ");
  for (int fd : clients) ::close(fd);
  ::close(local);
  ::close(listener);
}

}  // namespace
}  // namespace crown::debug
