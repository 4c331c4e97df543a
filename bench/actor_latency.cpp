// actor_latency: round trip of one request from the controller (rank 0) to an
// actor on rank 1, beside its two anchors measured in the same run between
// the same two processes:
//   raw_tcp  blocking POSIX sockets, TCP_NODELAY, same message sizes;
//            run in blocks that alternate with crown's
//   mpi      an 8-byte ping-pong (MPI_Send, then MPI_Irecv polled to a
//            deadline) on each rank's MPI service thread
// Run:  mpirun -n 2 ./actor_latency [results dir or file.json]
#include <mpi.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <iostream>

#include "bench_util.h"
#include "payload.h"
#include "raw_tcp.h"

namespace {

using namespace crown::bench;

constexpr int kWarmup = 1000;
constexpr int kIterations = 20000;
constexpr int kBlocks = 10;  // crown and raw tcp alternate in blocks of kIterations / kBlocks
constexpr int kMpiBytes = 8;
constexpr int kMpiTag = 7301;  // MPI_COMM_WORLD is ours: crown talks on a dup of it
constexpr double kMpiDeadlineSeconds = 30;

/// The request: 64 payload bytes carrying a sequence number.
struct Ping64 : Payload64 {
  using Payload64::Payload64;
};

/// Starts the raw TCP pong server; replies with its endpoint.
struct StartTcpPong {
  template <class Archive>
  void serialize(Archive&, unsigned) {}
};

/// Runs `rounds` MPI pongs on rank 1's MPI service thread, then replies.
struct StartMpiPong {
  int rounds = 0;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& rounds;
  }
};

// Waits for an MPI request by polling MPI_Test (what MPI_Wait does inside),
// but gives up at a deadline: a peer that never answers fails the bench
// instead of hanging it.
void waitWithin(MPI_Request& request, Clock::time_point deadline) {
  for (unsigned spins = 0;; ++spins) {
    int done = 0;
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done) return;
    if ((spins & 1023) == 0 && Clock::now() > deadline) {
      MPI_Cancel(&request);
      MPI_Request_free(&request);
      throw std::runtime_error("MPI ping-pong: no answer from the peer within the deadline");
    }
  }
}

Clock::time_point mpiDeadline() {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(kMpiDeadlineSeconds));
}

class LatencyTarget : public crown::Actor {
 public:
  LatencyTarget() {
    handle<Ping64>([](const Ping64& ping) { return static_cast<std::uint32_t>(ping.seq()); });

    handle<StartTcpPong>([this](const StartTcpPong&) {
      return server_.start(fabricHost(), [](int fd) {
        // Same shape as crown's round trip: 64 bytes in, a 4-byte value back.
        std::array<char, kPayloadBytes> in{};
        while (readAll(fd, in.data(), in.size())) writeAll(fd, in.data(), sizeof(std::uint32_t));
      });
    });

    handle<StartMpiPong>([](const StartMpiPong& start) {
      // THR-1: the pong runs on this rank's MPI service thread; this handler
      // blocks its pool thread meanwhile (the pool lets another take the links).
      crown::Runtime::current().onMpiThread([&] {
        std::array<char, kMpiBytes> buffer{};
        auto deadline = mpiDeadline();
        for (int i = 0; i < start.rounds; ++i) {
          MPI_Request request;
          MPI_Irecv(buffer.data(), kMpiBytes, MPI_BYTE, 0, kMpiTag, MPI_COMM_WORLD, &request);
          waitWithin(request, deadline);
          MPI_Send(buffer.data(), kMpiBytes, MPI_BYTE, 0, kMpiTag, MPI_COMM_WORLD);
        }
      });
      return start.rounds;
    });
  }

 private:
  OneShotServer server_;
};

double crownRoundTrip(const crown::ActorRef<LatencyTarget>& target, std::uint32_t seq) {
  Ping64 ping(seq);
  auto start = Clock::now();
  std::uint32_t reply = target.call<std::uint32_t>(ping).get();
  double micros = microsSince(start);
  if (reply != seq) throw std::runtime_error("crown: reply out of order");
  return micros;
}

// The controller's end of the raw TCP ping-pong: one connection throughout.
class RawPinger {
 public:
  explicit RawPinger(const crown::ActorRef<LatencyTarget>& target)
      : fd_(connectTo(target.call<TcpEndpoint>(StartTcpPong{}).get())) {}
  ~RawPinger() { ::close(fd_); }  // the server's read sees EOF and its thread ends
  RawPinger(const RawPinger&) = delete;
  RawPinger& operator=(const RawPinger&) = delete;

  double roundTrip(std::uint32_t seq) {
    std::memcpy(out_.data(), &seq, sizeof seq);
    std::uint32_t reply = 0;
    auto start = Clock::now();
    writeAll(fd_, out_.data(), out_.size());
    if (!readAll(fd_, &reply, sizeof reply)) throw std::runtime_error("raw tcp: peer closed");
    double micros = microsSince(start);
    if (reply != seq) throw std::runtime_error("raw tcp: reply out of order");
    return micros;
  }

 private:
  int fd_;
  std::array<char, kPayloadBytes> out_{};
};

struct OverTcp {
  LatencySummary crown;
  LatencySummary rawTcp;
};

// Blocks of crown calls and raw round trips alternate, so that both see the
// same load on a shared machine; each one's samples are pooled.
OverTcp measureCrownAndRawTcp(const crown::ActorRef<LatencyTarget>& target) {
  RawPinger raw(target);
  std::uint32_t seq = 0;
  for (int i = 0; i < kWarmup; ++i, ++seq) {
    crownRoundTrip(target, seq);
    raw.roundTrip(seq);
  }
  std::vector<double> crownSamples, rawSamples;
  crownSamples.reserve(kIterations);
  rawSamples.reserve(kIterations);
  for (int block = 0; block < kBlocks; ++block) {
    for (int i = 0; i < kIterations / kBlocks; ++i, ++seq)
      crownSamples.push_back(crownRoundTrip(target, seq));
    for (int i = 0; i < kIterations / kBlocks; ++i, ++seq) rawSamples.push_back(raw.roundTrip(seq));
  }
  return {summarize(std::move(crownSamples)), summarize(std::move(rawSamples))};
}

LatencySummary measureMpi(crown::Controller& ctl, const crown::ActorRef<LatencyTarget>& target) {
  const int rounds = kWarmup + kIterations;
  // Not waited on until our pings are done: it completes when rank 1's pongs do.
  auto pong = target.call<int>(StartMpiPong{rounds});
  std::vector<double> samples;
  samples.reserve(kIterations);
  // THR-1: the ping loop runs on rank 0's MPI service thread.
  ctl.runtime().onMpiThread([&] {
    std::array<char, kMpiBytes> buffer{};
    auto deadline = mpiDeadline();
    for (int i = 0; i < rounds; ++i) {
      auto start = Clock::now();
      MPI_Send(buffer.data(), kMpiBytes, MPI_BYTE, 1, kMpiTag, MPI_COMM_WORLD);
      MPI_Request request;
      MPI_Irecv(buffer.data(), kMpiBytes, MPI_BYTE, 1, kMpiTag, MPI_COMM_WORLD, &request);
      waitWithin(request, deadline);
      double micros = microsSince(start);
      if (i >= kWarmup) samples.push_back(micros);
    }
  });
  if (pong.get(std::chrono::seconds(30)) != rounds)
    throw std::runtime_error("mpi: pong count mismatch");
  return summarize(std::move(samples));
}

void printLine(const std::string& name, const LatencySummary& s, double rawP50) {
  printRow(name, {fixed(s.p50), fixed(s.p99), fixed(s.mean), fixed(ratio(s.p50, rawP50))});
}

}  // namespace

int main(int argc, char** argv) {
  auto results = resultsFile(argc, argv, "actor_latency");
  return crown::run(argc, argv, [&](crown::Controller& ctl) {
    if (ctl.size() < 2) throw crown::ConfigError("actor_latency needs two ranks: mpirun -n 2");
    auto target = ctl.spawn<LatencyTarget>(1, "latency-target");

    auto [crownRtt, rawTcp] = measureCrownAndRawTcp(target);
    LatencySummary mpi = measureMpi(ctl, target);

    bool sameHost = ctl.topology().hostIndexOf[0] == ctl.topology().hostIndexOf[1];
    std::cout << "actor_latency: rank 0 -> rank 1 (" << (sameHost ? "same host" : "two hosts")
              << "), " << kIterations << " round trips after " << kWarmup << " warm-up\n";
    printRow("name", {"p50 us", "p99 us", "mean us", "p50/raw_tcp"});
    printLine("crown call (64 B -> u32)", crownRtt, rawTcp.p50);
    printLine("raw tcp (64 B -> 4 B)", rawTcp, rawTcp.p50);
    printLine("mpi ping-pong (8 B)", mpi, rawTcp.p50);
    std::cout << std::flush;

    nlohmann::json json = {{"bench", "actor_latency"},
                           {"config",
                            {{"ranks", ctl.size()},
                             {"same_host", sameHost},
                             {"payload_bytes", kPayloadBytes},
                             {"mpi_bytes", kMpiBytes},
                             {"warmup", kWarmup},
                             {"iterations", kIterations},
                             {"interleaved_blocks", kBlocks}}},
                           {"metrics", toJson(crownRtt)},
                           {"anchors", {{"raw_tcp", toJson(rawTcp)}, {"mpi", toJson(mpi)}}},
                           {"ratios",
                            {{"p50_vs_raw_tcp", ratio(crownRtt.p50, rawTcp.p50)},
                             {"p99_vs_raw_tcp", ratio(crownRtt.p99, rawTcp.p99)},
                             {"p50_vs_mpi", ratio(crownRtt.p50, mpi.p50)}}}};
    writeResults(results, json);
  });
}
