// shm_ring: the shared-memory ring of issue 14 (src/transport/shm/ring.h)
// between two processes of one host, beside its anchors in the same run and
// between the same two processes:
//   ring     a 64 B ping-pong over two rings (one each way), segments passed
//            over a Unix socket with SCM_RIGHTS, as crown's links will
//   asleep   the ring's ping-pong with spinning off (as with more ranks
//            than cores): every wait sleeps on a futex, the cost of a wake-up
//   unix     the same ping-pong over that Unix socket (what crown's
//            same-host links use today)
//   mpi      MPI_Send/MPI_Recv of 64 B (Open MPI's shared-memory transport)
// and 64 MiB one way (ring: through a 1 MiB ring, read into a buffer, the
// copy in and out counted; mpi: MPI_Send/MPI_Recv), as bandwidth. Then
// frames of 64 KiB to 64 MiB one way, as the shared-memory backend sends
// them (record.h), each size three ways: copied through the ring, lent
// (lending.h: the reader copies from the writer's memory), and MPI_Send;
// the sizes where lending wins give lendFromBytes() its default.
//   mpirun --oversubscribe -n 2 build/bench/shm_ring [RESULTS]
// The ring alone, without crown's actors: what the fast path can gain.
#include <mpi.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <functional>

#include "bench_util.h"
#include "crown/wire/payload.h"
#include "transport/shm/lending.h"
#include "transport/shm/record.h"
#include "transport/shm/ring.h"

namespace {

using namespace crown::bench;
using crown::transport::shm::Ring;

constexpr int kRoundTrips = 20000;
constexpr int kWarmUp = 1000;
constexpr std::size_t kSmall = 64;
constexpr std::size_t kBulk = std::size_t{64} << 20;
constexpr int kBulkRounds = 5;

void writeAll(int fd, const void* data, std::size_t size) {
  const char* at = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, at, size);
    if (n <= 0) throw std::runtime_error("unix socket write failed");
    at += n;
    size -= static_cast<std::size_t>(n);
  }
}

void readAll(int fd, void* data, std::size_t size) {
  char* at = static_cast<char*>(data);
  while (size > 0) {
    ssize_t n = ::read(fd, at, size);
    if (n <= 0) throw std::runtime_error("unix socket read failed");
    at += n;
    size -= static_cast<std::size_t>(n);
  }
}

// One socket between rank 0 and rank 1: an abstract name rank 0 listens on.
int connectPair(int rank) {
  int name = rank == 0 ? static_cast<int>(::getpid()) : 0;
  MPI_Bcast(&name, 1, MPI_INT, 0, MPI_COMM_WORLD);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::string path = "crown-shm-bench-" + std::to_string(name);
  std::memcpy(address.sun_path + 1, path.data(), path.size());
  socklen_t size = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + path.size());
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  if (rank == 0) {
    if (::bind(fd, reinterpret_cast<sockaddr*>(&address), size) != 0 || ::listen(fd, 1) != 0)
      throw std::runtime_error("cannot listen on the bench's Unix socket");
    MPI_Barrier(MPI_COMM_WORLD);
    int peer = ::accept(fd, nullptr, nullptr);
    ::close(fd);
    return peer;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), size) != 0)
    throw std::runtime_error("cannot connect to the bench's Unix socket");
  return fd;
}

// rank 0 times each round trip; rank 1 echoes.
LatencySummary pingPong(int rank, const std::function<void()>& send, const std::function<void()>& receive) {
  std::vector<double> samples;
  samples.reserve(kRoundTrips);
  for (int i = 0; i < kWarmUp + kRoundTrips; ++i) {
    if (rank == 0) {
      auto start = Clock::now();
      send();
      receive();
      if (i >= kWarmUp) samples.push_back(microsSince(start));
    } else {
      receive();
      send();
    }
  }
  return summarize(std::move(samples));
}

// 64 MiB from rank 0 to rank 1, the receiver's end timed; GB/s, best round.
double bulk(int rank, const std::function<void()>& send, const std::function<void()>& receive) {
  double best = 0;
  for (int round = 0; round < kBulkRounds; ++round) {
    MPI_Barrier(MPI_COMM_WORLD);
    auto start = Clock::now();
    if (rank == 0) {
      send();
    } else {
      receive();
    }
    double seconds = secondsSince(start);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1) best = std::max(best, static_cast<double>(kBulk) / seconds / 1e9);
  }
  MPI_Bcast(&best, 1, MPI_DOUBLE, 1, MPI_COMM_WORLD);
  return best;
}

// Frames of `bytes` from rank 0 to rank 1, as many as make about 256 MiB
// (at least 8): GB/s at the receiver, best of three rounds.
double frames(int rank, std::size_t bytes, Ring& out, Ring& in, bool lend, pid_t lender) {
  using namespace crown::transport::shm;
  auto source = std::make_shared<std::string>(bytes, 'f');
  crown::wire::Payload payload(std::string("head"));
  payload.append(source, source->data(), source->size());
  crown::transport::OutMessage message{
      {crown::wire::MessageKind::kOneWay, {0, 1}, {1, 1}, 0, "bench::Bulk"}, std::move(payload)};
  int count = static_cast<int>(std::max<std::size_t>(8, (std::size_t{256} << 20) / bytes));
  auto deadline = Clock::now() + std::chrono::minutes(5);
  double best = 0;
  for (int round = 0; round < 3; ++round) {
    MPI_Barrier(MPI_COMM_WORLD);
    auto start = Clock::now();
    for (int i = 0; i < count; ++i) {
      if (rank == 0) {
        std::string head;
        Ring::Result written = lend ? out.write(lentRecordParts(message, head), deadline)
                                    : out.write(recordParts(message, head), deadline);
        if (written == Ring::Result::kDone && lend) written = out.awaitReturn(deadline);
        if (written != Ring::Result::kDone) throw std::runtime_error("a frame was not written");
      } else {
        std::uint64_t length = 0;
        Frame frame;
        if (in.begin(length, deadline) != Ring::Result::kDone ||
            readFrame(in, length, crown::wire::FrameLimits{}, lender, frame) != Taken::kFrame) {
          throw std::runtime_error("a frame was not read");
        }
        crown::wire::recycle(std::move(frame.payload));  // as a Python receiver's buffer is
      }
    }
    double seconds = secondsSince(start);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1) best = std::max(best, static_cast<double>(bytes) * count / seconds / 1e9);
  }
  MPI_Bcast(&best, 1, MPI_DOUBLE, 1, MPI_COMM_WORLD);
  return best;
}

double mpiFrames(int rank, std::size_t bytes) {
  std::vector<char> buffer(bytes, 'm');
  int count = static_cast<int>(std::max<std::size_t>(8, (std::size_t{256} << 20) / bytes));
  double best = 0;
  for (int round = 0; round < 3; ++round) {
    MPI_Barrier(MPI_COMM_WORLD);
    auto start = Clock::now();
    for (int i = 0; i < count; ++i) {
      if (rank == 0) {
        MPI_Send(buffer.data(), static_cast<int>(bytes), MPI_BYTE, 1, 3, MPI_COMM_WORLD);
      } else {
        MPI_Recv(buffer.data(), static_cast<int>(bytes), MPI_BYTE, 0, 3, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
      }
    }
    double seconds = secondsSince(start);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1) best = std::max(best, static_cast<double>(bytes) * count / seconds / 1e9);
  }
  MPI_Bcast(&best, 1, MPI_DOUBLE, 1, MPI_COMM_WORLD);
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2) {
    if (rank == 0) std::fprintf(stderr, "shm_ring: run with mpirun -n 2\n");
    MPI_Finalize();
    return 2;
  }
  const int peer = 1 - rank;
  std::vector<std::byte> message(kSmall), got;
  auto deadline = [] { return Clock::now() + std::chrono::seconds(30); };

  LatencySummary mpi = pingPong(
      rank, [&] { MPI_Send(message.data(), kSmall, MPI_BYTE, peer, 1, MPI_COMM_WORLD); },
      [&] { MPI_Recv(message.data(), kSmall, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE); });

  int socket = connectPair(rank);
  LatencySummary unix = pingPong(
      rank, [&] { writeAll(socket, message.data(), kSmall); },
      [&] { readAll(socket, message.data(), kSmall); });

  // Rank 0 makes both rings and passes them; each side writes one.
  Ring out = rank == 0 ? Ring::create(1 << 20) : Ring::attach(crown::transport::shm::receiveFd(socket));
  Ring in = rank == 0 ? Ring::create(1 << 20) : Ring::attach(crown::transport::shm::receiveFd(socket));
  if (rank == 0) {
    crown::transport::shm::sendFd(socket, out.fd());
    crown::transport::shm::sendFd(socket, in.fd());
  } else {
    std::swap(out, in);  // rank 0's out is rank 1's in
  }
  auto check = [](Ring::Result r) {
    if (r != Ring::Result::kDone) throw std::runtime_error("a ring transfer failed");
  };
  LatencySummary ring = pingPong(
      rank, [&] { check(out.write(message, deadline())); }, [&] { check(in.read(got, deadline())); });
  // The same with spinning off, as crown runs more ranks than cores: every
  // wait sleeps on the ring's futex, so each round trip is two wake-ups.
  out.setSpinLimit(std::chrono::nanoseconds(0));
  in.setSpinLimit(std::chrono::nanoseconds(0));
  LatencySummary asleep = pingPong(
      rank, [&] { check(out.write(message, deadline())); }, [&] { check(in.read(got, deadline())); });

  std::vector<std::byte> big(kBulk, std::byte{7});
  double ringBulk = bulk(rank, [&] { check(out.write(big, deadline())); },
                         [&] { check(in.read(got, deadline())); });
  double mpiBulk = bulk(
      rank, [&] { MPI_Send(big.data(), static_cast<int>(kBulk), MPI_BYTE, 1, 2, MPI_COMM_WORLD); },
      [&] {
        MPI_Recv(big.data(), static_cast<int>(kBulk), MPI_BYTE, 0, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      });

  int writerPid = static_cast<int>(::getpid());
  MPI_Bcast(&writerPid, 1, MPI_INT, 0, MPI_COMM_WORLD);
  nlohmann::json sweep = nlohmann::json::array();
  for (std::size_t bytes = 64 << 10; bytes <= kBulk; bytes *= 4) {
    double copied = frames(rank, bytes, out, in, false, writerPid);
    double lent = frames(rank, bytes, out, in, true, writerPid);
    double viaMpi = mpiFrames(rank, bytes);
    sweep.push_back(
        {{"bytes", bytes}, {"copied_GBps", copied}, {"lent_GBps", lent}, {"mpi_GBps", viaMpi}});
  }

  if (rank == 0) {
    std::printf("shm_ring: rank 0 <-> rank 1 (same host), %d round trips of %zu B after %d warm-up\n",
                kRoundTrips, kSmall, kWarmUp);
    printRow("name", {"p50 us", "p99 us", "mean us", "p50/mpi", "p50/unix"});
    auto row = [&](const std::string& name, const LatencySummary& s) {
      printRow(name, {fixed(s.p50), fixed(s.p99), fixed(s.mean), fixed(ratio(s.p50, mpi.p50)),
                      fixed(ratio(s.p50, unix.p50))});
    };
    row("ring ping-pong (64 B)", ring);
    row("ring, waits asleep (64 B)", asleep);
    row("unix socket ping-pong (64 B)", unix);
    row("mpi ping-pong (64 B)", mpi);
    std::printf("64 MiB one way: ring %.2f GB/s, MPI_Send %.2f GB/s (ring/mpi %.2f)\n", ringBulk,
                mpiBulk, ratio(ringBulk, mpiBulk));
    std::printf("frames one way (GB/s): size, copied through the ring, lent, MPI_Send\n");
    for (const auto& row : sweep) {
      std::printf("%10zu B  copied %6.2f  lent %6.2f  mpi %6.2f  (lent/copied %.2f)\n",
                  row["bytes"].get<std::size_t>(), row["copied_GBps"].get<double>(),
                  row["lent_GBps"].get<double>(), row["mpi_GBps"].get<double>(),
                  ratio(row["lent_GBps"].get<double>(), row["copied_GBps"].get<double>()));
    }
    nlohmann::json json = {{"frames_one_way", sweep},
                           {"ring", toJson(ring)},
                           {"ring_asleep", toJson(asleep)},
                           {"unix", toJson(unix)},
                           {"mpi", toJson(mpi)},
                           {"ring_over_mpi_p50", ratio(ring.p50, mpi.p50)},
                           {"ring_over_unix_p50", ratio(ring.p50, unix.p50)},
                           {"bulk_64MiB_GBps", {{"ring", ringBulk}, {"mpi", mpiBulk}}}};
    writeResults(resultsFile(argc, argv, "shm_ring"), json);
  }
  ::close(socket);
  MPI_Finalize();
  return 0;
}
