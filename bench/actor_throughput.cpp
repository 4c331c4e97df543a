// actor_throughput: how many 64-byte messages per second the controller
// (rank 0) gets to an actor on rank 1, beside a raw TCP stream of the same
// messages between the same two processes, measured in the same run:
//   crown one-way    send() N messages, then one call() that, by ORD-1,
//                    is handled after all of them
//   crown pipelined  call() with a window of requests in flight
//   raw_tcp          one write per length-prefixed message to a thread on
//                    rank 1 that parses them and acks each batch
// Each is measured in kRounds interleaved rounds; the median round counts.
// Run:  mpirun -n 2 ./actor_throughput [results dir or file.json]
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <vector>

#include "bench_util.h"
#include "payload.h"
#include "raw_tcp.h"

namespace {

using namespace crown::bench;

constexpr std::uint64_t kOneWayMessages = 200000;
constexpr std::uint64_t kRequests = 100000;
constexpr std::uint64_t kWindow = 1000;   // requests in flight
constexpr std::uint64_t kWarmup = 10000;  // messages (or requests) before the first round
constexpr int kRounds = 3;
constexpr auto kReplyTimeout = std::chrono::seconds(60);

/// One-way message: counted.
struct Item : Payload64 {
  using Payload64::Payload64;
};
/// Request: answered with its sequence number.
struct Work : Payload64 {
  using Payload64::Payload64;
};

/// What the sink has counted so far.
struct Counts {
  std::uint64_t received = 0;
  std::uint64_t outOfOrder = 0;  // ORD-1 says this stays 0
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& received& outOfOrder;
  }
};

struct GetCounts {
  template <class Archive>
  void serialize(Archive&, unsigned) {}
};

/// Starts the raw TCP sink; it acks (with its count) after each batch of
/// messages. Replies with its endpoint.
struct StartTcpSink {
  std::vector<std::uint64_t> batches;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& batches;
  }
};

// The raw stream's frame: a 4-byte length, then the payload.
using FrameLength = std::uint32_t;
constexpr std::size_t kFrameBytes = sizeof(FrameLength) + kPayloadBytes;

// Reads frames until `target` have arrived in total; `expected` is the next
// sequence number. Parses every frame as a real receiver would: length,
// payload, order.
void receiveFrames(int fd, std::vector<char>& buffer, std::size_t& filled, std::uint64_t& expected,
                   std::uint64_t target, std::uint64_t& outOfOrder) {
  std::size_t begin = 0;
  while (expected < target) {
    while (filled - begin >= kFrameBytes && expected < target) {
      FrameLength length = 0;
      std::memcpy(&length, buffer.data() + begin, sizeof length);
      if (length != kPayloadBytes) throw std::runtime_error("raw tcp sink: bad frame length");
      std::uint64_t seq = 0;
      std::memcpy(&seq, buffer.data() + begin + sizeof length, sizeof seq);
      if (seq != expected) ++outOfOrder;
      ++expected;
      begin += kFrameBytes;
    }
    if (expected == target) break;
    std::memmove(buffer.data(), buffer.data() + begin, filled - begin);
    filled -= begin;
    begin = 0;
    ssize_t n = ::recv(fd, buffer.data() + filled, buffer.size() - filled, 0);
    if (n == 0) throw std::runtime_error("raw tcp sink: sender closed early");
    if (n < 0) {
      if (errno == EINTR) continue;
      throwErrno("raw tcp sink: recv");
    }
    filled += static_cast<std::size_t>(n);
  }
  std::memmove(buffer.data(), buffer.data() + begin, filled - begin);
  filled -= begin;
}

class Sink : public crown::Actor {
 public:
  Sink() {
    handle<Item>([this](const Item& item) {
      if (item.seq() != counts_.received) ++counts_.outOfOrder;
      ++counts_.received;
    });
    handle<GetCounts>([this](const GetCounts&) { return counts_; });
    handle<Work>([](const Work& work) { return work.seq(); });

    handle<StartTcpSink>([this](const StartTcpSink& start) {
      return server_.start(fabricHost(), [start](int fd) {
        std::vector<char> buffer(1 << 16);
        std::size_t filled = 0;
        std::uint64_t expected = 0;
        std::uint64_t outOfOrder = 0;
        std::uint64_t target = 0;
        for (std::uint64_t batch : start.batches) {
          target += batch;
          receiveFrames(fd, buffer, filled, expected, target, outOfOrder);
          Counts ack{expected, outOfOrder};
          writeAll(fd, &ack, sizeof ack);
        }
      });
    });
  }

 private:
  Counts counts_;  // touched by one handler at a time (the mailbox runs one message at a time)
  OneShotServer server_;
};

struct Rate {
  std::uint64_t messages = 0;
  double seconds = 0;
  double sendSeconds = 0;  // one-way only: the send loop alone, before the receiver catches up
  double perSecond() const { return seconds > 0 ? static_cast<double>(messages) / seconds : 0; }
};

nlohmann::json toJson(const Rate& rate) {
  return {{"messages", rate.messages}, {"seconds", rate.seconds}, {"msgs_per_s", rate.perSecond()}};
}

void checkCounts(const Counts& counts, std::uint64_t expected, const char* what) {
  if (counts.received != expected || counts.outOfOrder != 0) {
    throw std::runtime_error(std::string(what) + ": sink counted " +
                             std::to_string(counts.received) + " of " + std::to_string(expected) +
                             ", " + std::to_string(counts.outOfOrder) + " out of order");
  }
}

void warmUpOneWay(const crown::ActorRef<Sink>& sink, std::uint64_t& seq) {
  for (std::uint64_t i = 0; i < kWarmup; ++i, ++seq) sink.send(Item(seq));
  checkCounts(sink.call<Counts>(GetCounts{}).get(kReplyTimeout), seq, "crown one-way warm-up");
}

// `seq` runs on across rounds: the sink checks that the Items arrive in
// send order (ORD-1).
Rate measureOneWay(const crown::ActorRef<Sink>& sink, std::uint64_t& seq) {
  auto start = Clock::now();
  for (std::uint64_t i = 0; i < kOneWayMessages; ++i, ++seq) sink.send(Item(seq));
  double sendSeconds = secondsSince(start);
  // ORD-1: handled after every Item above, so it answers once they all are.
  Counts counts = sink.call<Counts>(GetCounts{}).get(kReplyTimeout);
  Rate rate{kOneWayMessages, secondsSince(start), sendSeconds};
  checkCounts(counts, seq, "crown one-way");
  return rate;
}

// Keeps `kWindow` requests in flight: each reply awaited (in issue order,
// which is also reply order for one actor) makes room for the next request.
void pipeline(const crown::ActorRef<Sink>& sink, std::uint64_t requests) {
  std::vector<crown::Future<std::uint64_t>> window(kWindow);
  auto await = [&](std::uint64_t seq) {
    if (window[seq % kWindow].get(kReplyTimeout) != seq) {
      throw std::runtime_error("crown pipelined: reply out of order");
    }
  };
  for (std::uint64_t seq = 0; seq < requests; ++seq) {
    if (seq >= kWindow) await(seq - kWindow);
    window[seq % kWindow] = sink.call<std::uint64_t>(Work(seq));
  }
  for (std::uint64_t seq = requests > kWindow ? requests - kWindow : 0; seq < requests; ++seq)
    await(seq);
}

Rate measurePipelined(const crown::ActorRef<Sink>& sink) {
  auto start = Clock::now();
  pipeline(sink, kRequests);
  return {kRequests, secondsSince(start)};
}

// The controller's end of the raw stream: one connection for every round.
class RawStream {
 public:
  explicit RawStream(const crown::ActorRef<Sink>& sink) {
    std::vector<std::uint64_t> batches{kWarmup};
    batches.insert(batches.end(), kRounds, kOneWayMessages);
    fd_ = connectTo(sink.call<TcpEndpoint>(StartTcpSink{batches}).get(kReplyTimeout));
    FrameLength length = kPayloadBytes;
    std::memcpy(frame_.data(), &length, sizeof length);
  }
  ~RawStream() { ::close(fd_); }
  RawStream(const RawStream&) = delete;
  RawStream& operator=(const RawStream&) = delete;

  void warmUp() { stream(kWarmup); }

  Rate measure() {
    auto start = Clock::now();
    stream(kOneWayMessages);
    return {kOneWayMessages, secondsSince(start)};
  }

 private:
  void stream(std::uint64_t messages) {
    for (std::uint64_t i = 0; i < messages; ++i, ++seq_) {
      std::memcpy(frame_.data() + sizeof(FrameLength), &seq_, sizeof seq_);
      writeAll(fd_, frame_.data(), frame_.size());  // one write per message, as crown's sends are
    }
    Counts ack;
    if (!readAll(fd_, &ack, sizeof ack))
      throw std::runtime_error("raw tcp: sink closed before its ack");
    checkCounts(ack, seq_, "raw tcp");
  }

  int fd_ = -1;
  std::uint64_t seq_ = 0;
  std::array<char, kFrameBytes> frame_{};
};

// The round with the median rate; `rounds` is not empty.
Rate median(std::vector<Rate> rounds) {
  std::sort(rounds.begin(), rounds.end(),
            [](const Rate& a, const Rate& b) { return a.perSecond() < b.perSecond(); });
  return rounds[rounds.size() / 2];
}

nlohmann::json ratesOf(const std::vector<Rate>& rounds) {
  nlohmann::json rates = nlohmann::json::array();
  for (const auto& rate : rounds) rates.push_back(rate.perSecond());
  return rates;
}

void printLine(const std::string& name, const Rate& rate, const Rate& raw) {
  printRow(name,
           {std::to_string(rate.messages), fixed(rate.seconds, 3), fixed(rate.perSecond() / 1e3, 1),
            fixed(ratio(rate.perSecond(), raw.perSecond()), 3)});
}

}  // namespace

int main(int argc, char** argv) {
  auto results = resultsFile(argc, argv, "actor_throughput");
  return crown::run(argc, argv, [&](crown::Controller& ctl) {
    if (ctl.size() < 2) throw crown::ConfigError("actor_throughput needs two ranks: mpirun -n 2");
    auto sink = ctl.spawn<Sink>(1, "sink");

    std::uint64_t itemSeq = 0;
    RawStream raw(sink);
    warmUpOneWay(sink, itemSeq);
    pipeline(sink, kWarmup);
    raw.warmUp();
    // Interleaved rounds, so that crown and its anchor see the same load on
    // a shared machine; the median round of each is reported.
    std::vector<Rate> oneWayRounds, pipelinedRounds, rawRounds;
    for (int round = 0; round < kRounds; ++round) {
      oneWayRounds.push_back(measureOneWay(sink, itemSeq));
      pipelinedRounds.push_back(measurePipelined(sink));
      rawRounds.push_back(raw.measure());
    }
    Rate oneWay = median(oneWayRounds);
    Rate pipelined = median(pipelinedRounds);
    Rate rawTcp = median(rawRounds);

    bool sameHost = ctl.topology().hostIndexOf[0] == ctl.topology().hostIndexOf[1];
    std::cout << "actor_throughput: rank 0 -> rank 1 (" << (sameHost ? "same host" : "two hosts")
              << "), " << kPayloadBytes << "-byte messages, median of " << kRounds << " rounds\n";
    printRow("name", {"messages", "seconds", "k msg/s", "vs raw_tcp"});
    printLine("crown one-way send", oneWay, rawTcp);
    std::cout << "  (of which the send loop: " << fixed(oneWay.sendSeconds, 3) << " s)\n";
    printLine("crown call, " + std::to_string(kWindow) + " in flight", pipelined, rawTcp);
    printLine("raw tcp stream (4+64 B)", rawTcp, rawTcp);
    std::cout << std::flush;

    nlohmann::json json = {
        {"bench", "actor_throughput"},
        {"config",
         {{"ranks", ctl.size()},
          {"same_host", sameHost},
          {"payload_bytes", kPayloadBytes},
          {"oneway_messages", kOneWayMessages},
          {"requests", kRequests},
          {"window", kWindow},
          {"warmup", kWarmup},
          {"rounds", kRounds}}},
        {"metrics",
         {{"oneway_msgs_per_s", oneWay.perSecond()},
          {"oneway_seconds", oneWay.seconds},
          {"oneway_send_loop_seconds", oneWay.sendSeconds},
          {"pipelined_reqs_per_s", pipelined.perSecond()},
          {"pipelined_seconds", pipelined.seconds}}},
        {"anchors", {{"raw_tcp", toJson(rawTcp)}}},
        {"rounds",
         {{"oneway_msgs_per_s", ratesOf(oneWayRounds)},
          {"pipelined_reqs_per_s", ratesOf(pipelinedRounds)},
          {"raw_tcp_msgs_per_s", ratesOf(rawRounds)}}},
        {"ratios",
         {{"oneway_vs_raw_tcp", ratio(oneWay.perSecond(), rawTcp.perSecond())},
          {"pipelined_vs_raw_tcp", ratio(pipelined.perSecond(), rawTcp.perSecond())}}}};
    writeResults(results, json);
  });
}
