// The MPI service under test on every rank: MpiProbe is an actor that the
// controller spawns on each rank, whose handlers drive that rank's
// MpiService (through Proc::mpi(), as a layer above the kernel would) and
// report what they saw. Collective cases are sent to every probe at once,
// since each rank must take part. Shared by mpi_service_test.cpp and
// mpi_abandon_test.cpp.
#pragma once

#include <crown/actor/mpi_service.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "test_actors.h"

namespace crown::testing {

using namespace std::chrono_literals;

constexpr std::size_t kReduceElements = 6;
constexpr DType kDTypes[] = {DType::i8,  DType::u8,  DType::i32, DType::u32,
                             DType::i64, DType::u64, DType::f32, DType::f64};
constexpr ReduceOp kReduceOps[] = {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max};

/// Calls fn(T{}) with the C++ type of `type`.
template <class Fn>
auto withType(DType type, Fn fn) {
  switch (type) {
    case DType::i8:
      return fn(std::int8_t{});
    case DType::u8:
      return fn(std::uint8_t{});
    case DType::i32:
      return fn(std::int32_t{});
    case DType::u32:
      return fn(std::uint32_t{});
    case DType::i64:
      return fn(std::int64_t{});
    case DType::u64:
      return fn(std::uint64_t{});
    case DType::f32:
      return fn(float{});
    case DType::f64:
      return fn(double{});
  }
  throw Error("unknown dtype");
}

/// What `rank` puts into element i: small (a product of four fits in i8),
/// negative for rank 3 in signed types (so min and prod see a sign), with a
/// fraction in floating types (exact in binary).
template <class T>
T contribution(Rank rank, std::size_t i) {
  double v = 1.0 + static_cast<double>((rank + i) % 3);
  if constexpr (std::is_signed_v<T>) {
    if (rank == 3 && i % 2 == 0) v = -v;
  }
  if constexpr (std::is_floating_point_v<T>) v += 0.25;
  return static_cast<T>(v);
}

template <class T>
T fold(ReduceOp op, T a, T b) {
  switch (op) {
    case ReduceOp::sum:
      return static_cast<T>(a + b);
    case ReduceOp::prod:
      return static_cast<T>(a * b);
    case ReduceOp::min:
      return std::min(a, b);
    case ReduceOp::max:
      return std::max(a, b);
  }
  throw Error("unknown op");
}

/// The allreduce of `members`' contributions, folded here, as doubles.
inline std::vector<double> expectedReduce(DType type, ReduceOp op,
                                          const std::vector<Rank>& members) {
  return withType(type, [&](auto zero) {
    using T = decltype(zero);
    std::vector<double> out;
    for (std::size_t i = 0; i < kReduceElements; ++i) {
      T acc = contribution<T>(members[0], i);
      for (std::size_t m = 1; m < members.size(); ++m)
        acc = fold(op, acc, contribution<T>(members[m], i));
      out.push_back(static_cast<double>(acc));
    }
    return out;
  });
}

/// Collects what went wrong in a probe, for the controller to print.
class Checks {
 public:
  void expect(bool ok, const std::string& what) {
    if (!ok) failures_ += (failures_.empty() ? "" : "; ") + what;
  }
  const std::string& failures() const { return failures_; }

 private:
  std::string failures_;
};

/// Expects `future` to fail with ProcessLost for `peer`.
template <class T>
void expectLost(Checks& checks, const Future<T>& future, Rank peer, const std::string& what) {
  try {
    future.get(5s);
    checks.expect(false, what + ": completed instead of failing");
  } catch (const ProcessLost& e) {
    checks.expect(e.rank() == peer, what + ": ProcessLost names rank " + std::to_string(e.rank()));
  } catch (const std::exception& e) {
    checks.expect(false, what + ": failed with another error: " + e.what());
  }
}

// Messages. Each names the case it runs on the receiving rank.
struct ReduceCase {
  int dtype = 0, op = 0;
  std::uint32_t comm = 0;
  template <class A>
  void serialize(A& a, unsigned) {
    a& dtype& op& comm;
  }
};
struct BroadcastCase {
  Rank root = 0;
  std::size_t bytes = 0;
  template <class A>
  void serialize(A& a, unsigned) {
    a& root& bytes;
  }
};
struct ExchangeCase {  // send to and receive from rank ^ 1
  std::size_t bytes = 0;
  template <class A>
  void serialize(A& a, unsigned) {
    a& bytes;
  }
};
struct FloodCase {  // many operations in flight at once
  int count = 0;
  template <class A>
  void serialize(A& a, unsigned) {
    a& count;
  }
};
struct AlongCase {
  std::vector<std::size_t> sizes;
  std::size_t dim = 0;
  template <class A>
  void serialize(A& a, unsigned) {
    a& sizes& dim;
  }
};
struct AlongResult {
  std::uint32_t first = 0, second = 0;  // the Comm ids of two requests
  std::vector<Rank> members;
  Rank rank = 0;
  std::uint64_t splitsBefore = 0, splitsAfterFirst = 0, splitsAfterSecond = 0;
  std::int64_t rankSum = 0;  // allreduce of the world ranks along the communicator
  template <class A>
  void serialize(A& a, unsigned) {
    a& first& second& members& rank& splitsBefore& splitsAfterFirst& splitsAfterSecond& rankSum;
  }
};
struct TruncateCase {  // rank 0 sends 16 bytes where rank 1 has room for 8
  template <class A>
  void serialize(A&, unsigned) {}
};
struct Pid {
  template <class A>
  void serialize(A&, unsigned) {}
};

/// The bytes rank `seed` sends: a pattern that differs per rank and per byte.
inline std::vector<std::uint8_t> pattern(std::size_t bytes, Rank seed) {
  std::vector<std::uint8_t> out(bytes);
  for (std::size_t i = 0; i < bytes; ++i) out[i] = static_cast<std::uint8_t>(i * 31 + seed * 7);
  return out;
}

/// Service-thread CPU time in clock ticks, from /proc (the thread's own utime + stime).
inline long threadTicks(long tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream rest(stat.substr(stat.rfind(')') + 2));
  std::string field;
  long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {  // fields 3.. after "pid (comm)"
    if (i == 14) utime = std::stol(field);
    if (i == 15) stime = std::stol(field);
  }
  return utime + stime;
}

class MpiProbe : public Actor {
 public:
  MpiProbe() {
    handle<Pid>([](const Pid&) { return static_cast<int>(::getpid()); });
    handle<ReduceCase>([](const ReduceCase& c) {
      auto type = static_cast<DType>(c.dtype);
      return withType(type, [&](auto zero) {
        using T = decltype(zero);
        MpiService& mpi = Proc::current().mpi();
        Rank me = Proc::current().rank();
        std::vector<T> data;
        for (std::size_t i = 0; i < kReduceElements; ++i) data.push_back(contribution<T>(me, i));
        mpi.allreduce(Comm(c.comm), data.data(), data.size(), type, static_cast<ReduceOp>(c.op))
            .get(10s);
        return std::vector<double>(data.begin(), data.end());
      });
    });
    handle<BroadcastCase>([](const BroadcastCase& c) {
      Rank me = Proc::current().rank();
      auto want = pattern(c.bytes, c.root);
      std::vector<std::uint8_t> data = me == c.root ? want : std::vector<std::uint8_t>(c.bytes);
      Proc::current().mpi().broadcast(Comm::world(), data.data(), data.size(), c.root).get(10s);
      return data == want;
    });
    handle<ExchangeCase>([](const ExchangeCase& c) {
      MpiService& mpi = Proc::current().mpi();
      Rank me = Proc::current().rank(), partner = me ^ 1u;
      auto out = pattern(c.bytes, me);
      std::vector<std::uint8_t> in(c.bytes);
      auto received = mpi.recv(Comm::world(), partner, 7, in.data(), in.size());
      auto sent = mpi.send(Comm::world(), partner, 7, out.data(), out.size());
      Checks checks;
      checks.expect(received.get(10s) == c.bytes, "received a different byte count");
      sent.get(10s);
      checks.expect(in == pattern(c.bytes, partner), "received other bytes than the partner's");
      return checks.failures();
    });
    handle<TruncateCase>([](const TruncateCase&) {
      MpiService& mpi = Proc::current().mpi();
      std::int64_t big[2] = {1, 2}, small = 0;
      Checks checks;
      if (Proc::current().rank() == 0) mpi.send(Comm::world(), 1, 5, big, sizeof big).get(10s);
      if (Proc::current().rank() != 1) return checks.failures();
      try {
        mpi.recv(Comm::world(), 0, 5, &small, sizeof small).get(10s);
        checks.expect(false, "a truncated recv succeeded");
      } catch (const BootstrapError& e) {  // MPI_ERR_TRUNCATE, naming the operation
        checks.expect(std::string(e.what()).find("MPI_Irecv from rank 0") != std::string::npos,
                      std::string("the error does not name the recv: ") + e.what());
      }
      return checks.failures();
    });
    handle<FloodCase>([](const FloodCase& c) { return flood(c.count); });
    handle<AlongCase>([](const AlongCase& c) {
      MpiService& mpi = Proc::current().mpi();
      AlongResult r;
      r.splitsBefore = mpi.stats().splits;
      Comm first = mpi.commAlong(c.sizes, c.dim);
      r.splitsAfterFirst = mpi.stats().splits;
      Comm second = mpi.commAlong(c.sizes, c.dim);
      r.splitsAfterSecond = mpi.stats().splits;
      r.first = first.id();
      r.second = second.id();
      r.members = mpi.commMembers(first);
      r.rank = mpi.commRank(first);
      r.rankSum = Proc::current().rank();
      mpi.allreduce(first, &r.rankSum, 1, DType::i64, ReduceOp::sum).get(10s);
      return r;
    });
  }

 private:
  // `count` allreduces and `count` ring messages, all posted before any is awaited.
  static std::string flood(int count) {
    MpiService& mpi = Proc::current().mpi();
    Rank me = Proc::current().rank();  // Proc::size() counts spare slots too: the world's own
    auto size = static_cast<Rank>(mpi.commMembers(Comm::world()).size());
    Rank next = (me + 1) % size, prev = (me + size - 1) % size;
    auto n = static_cast<std::size_t>(count);
    std::vector<std::int64_t> sums(n), out(n), in(n, -1);
    std::vector<Future<void>> reduces, sends;
    std::vector<Future<std::size_t>> recvs;
    for (std::size_t k = 0; k < n; ++k) {
      int tag = static_cast<int>(k);
      sums[k] = static_cast<std::int64_t>(me + k);
      out[k] = static_cast<std::int64_t>(k * 1000 + me);
      recvs.push_back(mpi.recv(Comm::world(), prev, tag, &in[k], sizeof in[k]));
      reduces.push_back(mpi.allreduce(Comm::world(), &sums[k], 1, DType::i64, ReduceOp::sum));
      sends.push_back(mpi.send(Comm::world(), next, tag, &out[k], sizeof out[k]));
    }
    Checks checks;
    auto ranksSum = static_cast<std::int64_t>(size * (size - 1) / 2);
    for (std::size_t k = 0; k < n; ++k) {
      reduces[k].get(30s);
      recvs[k].get(30s);
      sends[k].get(30s);
      checks.expect(sums[k] == ranksSum + static_cast<std::int64_t>(size * k),
                    "allreduce " + std::to_string(k) + " gave " + std::to_string(sums[k]));
      checks.expect(in[k] == static_cast<std::int64_t>(k * 1000 + prev),
                    "message " + std::to_string(k) + " was " + std::to_string(in[k]));
    }
    checks.expect(mpi.stats().pending == 0, "operations still pending after all completed");
    return checks.failures();
  }
};

/// Sends `message` to every probe of `probes` at once (a collective case) and
/// returns their replies, in the same order.
template <class R, class P, class Msg>
std::vector<R> onEveryProbe(const std::vector<ActorRef<P>>& probes, const Msg& message) {
  std::vector<Future<R>> futures;
  for (const auto& probe : probes) futures.push_back(probe.template call<R>(message));
  std::vector<R> replies;
  for (auto& future : futures) replies.push_back(future.get(60s));
  return replies;
}

}  // namespace crown::testing
