// Issue 10, part 4: a flood of idle, unauthenticated connections at a low
// descriptor limit. Before the fix the accept loop spun on EMFILE (92 % of a
// core), the flooded rank's own connect to a healthy peer failed and it took
// that peer for lost. Now the accept loop backs off, connections waiting
// for authentication are bounded, and a local shortage is waited out.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <dirent.h>

#include "crown/transport/transport.h"
#include "support/transport_inbox.h"

namespace crown::transport {
namespace {

using namespace std::chrono_literals;

std::size_t openDescriptors() {
  std::size_t count = 0;
  if (DIR* dir = ::opendir("/proc/self/fd")) {
    while (::readdir(dir) != nullptr) ++count;
    ::closedir(dir);
  }
  return count;
}

double cpuSeconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// The soft limit of this process, restored when the test ends.
struct SoftFileLimit {
  explicit SoftFileLimit(rlim_t soft) {
    ::getrlimit(RLIMIT_NOFILE, &saved);
    rlimit lowered = saved;
    lowered.rlim_cur = soft;
    ::setrlimit(RLIMIT_NOFILE, &lowered);
  }
  ~SoftFileLimit() { ::setrlimit(RLIMIT_NOFILE, &saved); }
  rlimit saved{};
};

// A child process that opens `count` idle connections to `address` and
// holds them for `hold`; its own descriptor limit is the hard one.
pid_t flood(const std::string& address, int count, std::chrono::milliseconds hold) {
  pid_t child = ::fork();
  if (child != 0) return child;
  rlimit limit{};
  ::getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = limit.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &limit);
  auto colon = address.rfind(':');
  sockaddr_in target{};
  target.sin_family = AF_INET;
  target.sin_port = htons(static_cast<std::uint16_t>(std::stoi(address.substr(colon + 1))));
  ::inet_pton(AF_INET, address.substr(0, colon).c_str(), &target.sin_addr);
  for (int i = 0; i < count; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0) ::connect(fd, reinterpret_cast<sockaddr*>(&target), sizeof target);
  }
  ::usleep(static_cast<useconds_t>(hold.count() * 1000));
  ::_exit(0);
}

AsioOptions optionsFor(Rank rank) {
  static const Secret secret = randomSecret();
  AsioOptions options = crown::testing::loopbackOptions(rank, 2, secret);
  options.connectTimeout = 10s;
  options.authTimeout = 500ms;
  return options;
}

struct Node : crown::testing::TransportInbox {
  explicit Node(Rank rank) : transport(makeTcpBackend(optionsFor(rank))) {}
  void send(Rank to, std::string payload) {
    transport->send(to, crown::testing::testMessage(to, std::move(payload)));
  }
  std::unique_ptr<Backend> transport;
};

TEST(FdExhaustion, AFloodOfIdleConnectionsNeitherSpinsNorLosesAHealthyPeer) {
  Node a(0), b(1);
  std::vector<std::string> peers{a.transport->address(), b.transport->address()};
  a.transport->start(peers, a.callbacks());
  b.transport->start(peers, b.callbacks());
  {
    // Room for the backends' own sockets and a few more: the flood takes
    // the rest, so both the accept loop and a's connect meet EMFILE.
    SoftFileLimit limit(openDescriptors() + 8);
    pid_t flooder = flood(b.transport->address(), 1100, 3s);
    std::this_thread::sleep_for(300ms);  // the flood is in
    double cpuBefore = cpuSeconds();
    auto wallBefore = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(1s);
    double cpuShare = (cpuSeconds() - cpuBefore) /
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - wallBefore).count();
    EXPECT_LT(cpuShare, 0.25) << "the flooded rank burns CPU while out of descriptors";
    a.send(1, "through the flood");
    EXPECT_TRUE(b.waitFor([&] { return b.received.size() == 1; }, 15s))
        << "a healthy peer was not reached during the flood";
    ::kill(flooder, SIGKILL);
    ::waitpid(flooder, nullptr, 0);
  }
  std::lock_guard lock(a.mutex);
  EXPECT_TRUE(a.lost.empty()) << "a shortage of descriptors was taken for a lost peer: "
                              << (a.lostWhy.empty() ? "" : a.lostWhy[0].toString());
  EXPECT_TRUE(a.failed.empty()) << a.failures[0].toString();
}

}  // namespace
}  // namespace crown::transport
