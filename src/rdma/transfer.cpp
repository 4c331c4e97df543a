// The reader side of the rdma module (rdma_module.h): a transfer asks the
// owner for a lease, moves the bytes, then releases the lease. The bytes
// move over the MPI window (MPI_Rget/MPI_Rput on the service thread, THR-1),
// by memcpy when the owner is this proc, or in chunks over crown's own
// fabric where one-sided MPI is not available or fails (the fallback).
//
// Memory on a device (crown/rdma/device_memory.h) is copied with the
// device's copy wherever crown copies it itself; MPI gets it straight only
// when it is CUDA-aware, else through pinned memory (staging.cpp).
//
// Threads: the grant's continuation runs on the pool thread that read the
// reply; the window's on the MPI service thread, which must never wait, so
// the Release (a send, which may wait on flow control) is posted to the pool.
#include <cstring>

#include "crown/common/env.h"
#include "crown/common/log.h"
#include "crown/common/trace.h"
#include "rdma/cma.h"
#include "rdma/deadline.h"
#include "rdma/messages.h"
#include "rdma/rdma_module.h"

namespace crown::rdma::detail {
namespace {

using UserState = crown::detail::FutureState<void>;

// A single copy (cma.h) up to this size runs on the thread that asked;
// larger ones on the pool. It moves in pieces of kCopyChunkBytes, between
// which a transfer whose deadline passed stops.
constexpr std::size_t kInlineCopyBytes = 4 << 20;
constexpr std::size_t kCopyChunkBytes = 8 << 20;

std::size_t fallbackChunk() {
  static const std::size_t bytes = static_cast<std::size_t>(
      env::integer("CROWN_RDMA_FALLBACK_CHUNK_BYTES", 1 << 20, 1024, 64 << 20));
  return bytes;
}

std::string sizeText(std::size_t bytes) { return std::to_string(bytes) + " bytes"; }

// A one-sided transfer ends on the MPI thread, not where it began: an
// asynchronous span of its own, numbered by the transfers of this process.
void traceTransfer(Rank here, const Buffer& buffer, std::size_t bytes, bool write,
                   std::int64_t started) {
  static std::atomic<std::uint64_t> transfers{0};
  trace::record(trace::Event{'A', "rdma", write ? "write_from" : "read_into", started,
                             trace::now() - started,
                             trace::flowId(0x7264, transfers.fetch_add(1), here), 0,
                             sizeText(bytes) + ", " + buffer.describe()});
}

}  // namespace

Future<void> RdmaModule::transfer(const Buffer& buffer, void* local, std::size_t bytes, bool write,
                                  std::chrono::milliseconds timeout) {
  // Checked here, before anything moves (the owner checks again).
  if (!buffer.valid()) throw ConfigError("an empty RDMA buffer handle");
  if (local == nullptr) throw ConfigError("RDMA transfer to or from a null address");
  if (!write && bytes < buffer.size()) {
    throw ConfigError("read_into: the destination holds " + sizeText(bytes) + ", fewer than the " +
                      sizeText(buffer.size()) + " of " + buffer.describe());
  }
  if (write && bytes > buffer.size()) {
    throw ConfigError("write_from: the source holds " + sizeText(bytes) + ", more than the " +
                      sizeText(buffer.size()) + " of " + buffer.describe());
  }
  if (write && buffer.readOnly())
    throw ConfigError("write_from: " + buffer.describe() + " is read-only");
  std::size_t n = write ? bytes : buffer.size();
  if (n == 0) return Future<void>::ready({});
  if (timeout.count() <= 0) throw ConfigError("an RDMA transfer needs a positive timeout");

  auto user = std::make_shared<UserState>();
  auto deadline = std::make_shared<Deadline>();
  std::string what = std::string(write ? "write_from " : "read_into ") + buffer.describe();
  deadline->error = std::make_exception_ptr(
      Timeout(what + ": not done within " + std::to_string(timeout.count()) + " ms"));
  auto token = deadlines_->add(timeout, [user, deadline] {
    if (user->ready()) return;
    deadline->stop->store(true);  // no new chunk; the buffer stays usable
    int acquiring = Deadline::kAcquiring;
    if (deadline->phase.compare_exchange_strong(acquiring, Deadline::kExpired)) {
      user->setError(deadline->error);  // nothing moves yet: fail now
    }
  });
  user->onReady([deadlines = deadlines_, token] { deadlines->cancel(token); });
  char* mine = static_cast<char*>(local);
  // The steady state: a lease held from an earlier transfer of this buffer,
  // no message at all.
  if (Route route = reuse(buffer, n, write); route.lease != 0) {
    moveBytes(buffer, route, mine, n, write, user, deadline);
    return Future<void>(user);
  }
  Acquire acquire{buffer.id(), n, write, proc_->rank(), buffer.address()};
  auto grant = proc_->request<Grant>(ActorId{buffer.owner(), agent_}, acquire);
  grant.then([this, buffer, mine, n, write, user, deadline](Future<Grant> reply) {
    Grant granted;
    try {
      granted = reply.get();
    } catch (...) {
      return user->setError(std::current_exception());  // the owner lost or stopped (DLV-1)
    }
    if (granted.lease == 0)
      return user->setError(std::make_exception_ptr(BufferError(granted.error)));
    moveBytes(buffer, hold(buffer, granted), mine, n, write, user, deadline);
  });
  return Future<void>(user);
}

RdmaModule::Route RdmaModule::reuse(const Buffer& buffer, std::size_t bytes, bool write) {
  std::lock_guard lock(heldMutex_);
  // Keyed by the handle's address too: a handle that names another address
  // asks the owner, who checks it, for a lease of its own.
  auto it = cached_.find({buffer.owner(), buffer.id(), buffer.address()});
  if (it == cached_.end()) return {};
  Held& held = held_.at({buffer.owner(), it->second});
  if (held.revoked || bytes > held.bytes || (write && !held.writable)) return {};
  ++held.inFlight;
  ++inFlight_;
  return routeOf(buffer.owner(), it->second, held);
}

RdmaModule::Route RdmaModule::routeOf(Rank owner, std::uint64_t lease, const Held& held) const {
  return Route{lease, held.staged, cmaRefused_.contains(owner) ? 0 : held.pid, held.address,
               held.memory};
}

RdmaModule::Route RdmaModule::hold(const Buffer& buffer, const Grant& grant) {
  // A single copy reaches the owner's memory by pid only in the same pid
  // namespace of the same machine (a host name alone could be another
  // container's).
  bool here =
      singleCopy_ && grant.pid > 0 && !grant.machine.empty() && grant.machine == machineId();
  std::lock_guard lock(heldMutex_);
  Held held{.region = buffer.id(),
            .handleAddress = buffer.address(),
            .bytes = grant.bytes,
            .writable = grant.writable,
            .inFlight = 1,
            .staged = grant.staged,
            .pid = here ? grant.pid : 0,
            .address = grant.address,
            .memory = grant.memory};
  // Two first transfers may race for a lease: the first one kept is reused,
  // the other ends with its transfer.
  held.cached =
      cached_.emplace(CacheKey{buffer.owner(), buffer.id(), buffer.address()}, grant.lease).second;
  held_.emplace(LeaseKey{buffer.owner(), grant.lease}, held);
  ++inFlight_;
  return routeOf(buffer.owner(), grant.lease, held);
}

void RdmaModule::endTransfer(Rank owner, std::uint64_t lease) {
  bool give = false;
  {
    std::lock_guard lock(heldMutex_);
    --inFlight_;
    auto it = held_.find({owner, lease});
    if (it == held_.end()) return;  // void already (the owner was lost)
    Held& held = it->second;
    if (--held.inFlight == 0 && (held.revoked || !held.cached)) {
      if (held.cached) cached_.erase({owner, held.region, held.handleAddress});
      held_.erase(it);
      give = true;
    }
  }
  if (give) sendRelease(owner, lease);
}

void RdmaModule::revoked(Rank owner, std::uint64_t lease) {
  bool give = false;
  {
    std::lock_guard lock(heldMutex_);
    auto it = held_.find({owner, lease});
    if (it == held_.end()) return;  // released already
    Held& held = it->second;
    held.revoked = true;  // later transfers ask the owner again, who refuses
    if (held.cached) {
      cached_.erase({owner, held.region, held.handleAddress});
      held.cached = false;
    }
    if (held.inFlight == 0) {
      held_.erase(it);
      give = true;
    }
  }
  if (give) sendRelease(owner, lease);
}

void RdmaModule::sendRelease(Rank owner, std::uint64_t lease) {
  // Posted: this may run on the MPI service thread (a transfer's
  // continuation), which must never wait on a send.
  pool_->post([this, owner, lease] {
    try {
      proc_->send(ActorId{owner, agent_}, Release{lease});
    } catch (const std::exception& e) {
      // The owner is gone or stopping: its leases went with it.
      log::get().debug("RDMA: releasing lease {} of rank {}: {}", lease, owner, e.what());
    }
  });
}

void RdmaModule::moveBytes(const Buffer& buffer, Route route, char* local, std::size_t bytes,
                           bool write, std::shared_ptr<UserState> user,
                           std::shared_ptr<Deadline> deadline) {
  Rank owner = buffer.owner();
  std::uint64_t lease = route.lease;
  auto release = [this, owner, lease] { endTransfer(owner, lease); };
  // The window spans this rank's MPI world only: procs started by another
  // spawn_procs call (or the controller that started them) are outside it.
  MpiService* mpi = owner == proc_->rank() ? nullptr : windowService();
  if (mpi && !mpi->worldPosition(owner)) mpi = nullptr;
  // A staged buffer's lock is awaited before the deadline's moving phase
  // begins: a transfer still waiting for it when the deadline passes fails.
  if (mpi && route.staged)
    return stagedMove(*mpi, buffer, route, local, bytes, write, user, deadline, release);
  if (!deadline->begin()) return release();  // timed out while the grant was on its way
  if (owner == proc_->rank()) {
    // Our own memory: no MPI, a copy under the lease.
    trace::Span span;
    if (trace::on()) [[unlikely]] {
      span.begin("rdma", write ? "write_from (local)" : "read_into (local)", sizeText(bytes));
    }
    try {
      char* memory = leased(lease, 0, bytes);
      if (write) {
        copyMemory(memory, local, bytes);
      } else {
        copyMemory(local, memory, bytes);
      }
    } catch (...) {
      release();
      return user->setError(std::current_exception());
    }
    release();
    return user->setValue({});
  }
  if (!mpi) {
    if (!warnedFallback_.exchange(true)) {
      log::get().warn(
          "RDMA: one-sided MPI is not in use here (CROWN_RDMA_WINDOW=0, no MPI window, or "
          "an owner outside this rank's MPI world); RDMA buffers move in chunks over crown's own fabric, which is "
          "much slower");
    }
    return fallback(buffer, lease, local, bytes, write, user, deadline, release);
  }
  std::int64_t started = trace::on() ? trace::now() : 0;
  // Where the grant says, never buffer.address(): the handle is only data.
  windowMove(*mpi, owner, route, local, bytes, write, deadline->stop)
      .then([this, buffer, lease, local, bytes, write, user, deadline, release,
             started](Future<void> done) {
        if (started != 0) traceTransfer(proc_->rank(), buffer, bytes, write, started);
        settle(buffer, lease, local, bytes, write, user, deadline, release, errorOf(done));
      });
}

Future<void> RdmaModule::windowMove(MpiService& mpi, Rank owner, const Route& route, char* local,
                                    std::size_t bytes, bool write,
                                    std::shared_ptr<std::atomic<bool>> stop) {
  bool direct = route.pid == 0 && mpi.cudaAware();  // MPI moves device memory itself
  if (direct || !device_ || !device_->isDevice(local)) {
    return hostMove(mpi, owner, route, local, bytes, write, stop);
  }
  // Local device memory that neither MPI nor a single copy can reach:
  // through a pinned bounce buffer, freed once the move has let go of it.
  auto bounce =
      std::shared_ptr<char>(static_cast<char*>(device_->allocateStaging(bytes)),
                            [device = device_, bytes](char* p) { device->freeStaging(p, bytes); });
  if (write) {
    device_->copy(bounce.get(), local, bytes);
    // The continuation holds the bounce buffer until the move is done with it.
    return hostMove(mpi, owner, route, bounce.get(), bytes, write, stop)
        .then([bounce](Future<void> put) { put.get(); });
  }
  auto landed = std::make_shared<UserState>();
  hostMove(mpi, owner, route, bounce.get(), bytes, write, stop)
      .then([this, bounce, local, bytes, landed](Future<void> got) {
        // Off the MPI service thread: a copy of many MiB must not hold it.
        pool_->post([this, bounce, local, bytes, landed, got]() mutable {
          try {
            got.get();
            device_->copy(local, bounce.get(), bytes);
          } catch (...) {
            return landed->setError(std::current_exception());
          }
          landed->setValue({});
        });
      });
  return Future<void>(landed);
}

Future<void> RdmaModule::hostMove(MpiService& mpi, Rank owner, const Route& route, char* local,
                                  std::size_t bytes, bool write,
                                  std::shared_ptr<std::atomic<bool>> stop) {
  std::uint64_t address = route.address;  // the owner's window displacement (its grant)
  auto overMpi = [&mpi, owner, address, local, bytes, write, stop] {
    return write ? mpi.windowPut(owner, address, local, bytes, stop)
                 : mpi.windowGet(owner, address, local, bytes, stop);
  };
  if (route.pid == 0) return overMpi();
  auto copy = [this, owner, pid = route.pid, memory = route.memory, local, bytes, write, stop,
               overMpi]() -> Future<void> {
    CmaResult result;
    try {
      result = cmaMove(pid, memory, local, bytes, write, kCopyChunkBytes, *stop);
    } catch (const CmaPeerGone&) {
      return Future<void>::failed(std::make_exception_ptr(
          ProcessLost(owner, "", "its process is gone (seen by a single-copy RDMA transfer)")));
    }
    switch (result.outcome) {
      case CmaOutcome::kMoved:
        ++singleCopyTransfers_;
        return Future<void>::ready({});
      case CmaOutcome::kRefused:  // this pair of processes, for good
        refuseCma(owner, result.error);
        return overMpi();
      case CmaOutcome::kFailed:  // this copy alone (ENOMEM, ...): MPI moves it
        log::get().debug("RDMA: a single copy from rank {} failed ({}); MPI moves it", owner,
                         std::strerror(result.error));
        return overMpi();
      case CmaOutcome::kNoMemory:
        // An address with no memory behind it, at either end: this
        // transfer's error alone. Single copies stay on for the job.
        return Future<void>::failed(std::make_exception_ptr(BufferError(
            std::string("RDMA: a single copy ") + (write ? "to" : "from") + " rank " +
            std::to_string(owner) +
            " met no memory (EFAULT): the owner's registered memory was "
            "unmapped before its drop, or the local memory is not this process's; nothing more "
            "moved")));
    }
    return overMpi();
  };
  // Small copies on this thread: a hop to another would cost more than the
  // copy. Larger ones on the pool, so that the caller's future is a future.
  if (bytes <= kInlineCopyBytes) return copy();
  auto done = std::make_shared<UserState>();
  pool_->post(
      [copy, done] { copy().then([done](Future<void> moved) { completeAs(*done, moved); }); });
  return Future<void>(done);
}

void RdmaModule::refuseCma(Rank owner, int error) {
  bool first = false;
  {
    std::lock_guard lock(heldMutex_);
    first = cmaRefused_.insert(owner).second;
  }
  if (first) {
    log::get().warn(
        "RDMA: the kernel refuses process_vm_readv/writev to rank {} ({}: ptrace rules?); "
        "its buffers move over MPI instead",
        owner, std::strerror(error));
  }
}

void RdmaModule::settle(const Buffer& buffer, std::uint64_t lease, char* local, std::size_t bytes,
                        bool write, std::shared_ptr<UserState> user,
                        std::shared_ptr<Deadline> deadline, std::function<void()> release,
                        std::exception_ptr outcome) {
  // The lease goes first (the owner may detach once the last one ends),
  // then the caller hears: its memory is free from here on.
  if (outcome) {
    try {
      std::rethrow_exception(outcome);
    } catch (const ProcessLost&) {
      // SupervisionError in Python. The lease died with its owner: the end
      // only counts the transfer out (peerLost forgets the lease).
    } catch (const BootstrapError& e) {
      // MPI refused the one-sided transfer: this one goes over the fabric.
      log::get().warn("RDMA: {} failed ({}); moving it over crown's own fabric instead",
                      buffer.describe(), e.what());
      return pool_->post([this, buffer, lease, local, bytes, write, user, deadline, release] {
        fallback(buffer, lease, local, bytes, write, user, deadline, release);
      });
    } catch (...) {
    }
  }
  release();
  deadline->finish(*user, outcome);
}

void RdmaModule::fallback(const Buffer& buffer, std::uint64_t lease, char* local, std::size_t bytes,
                          bool write, std::shared_ptr<UserState> user,
                          std::shared_ptr<Deadline> deadline, std::function<void()> release) {
  ++fallbackTransfers_;
  // One chunk at a time, each a request to the owner's agent under the
  // lease; the next is sent from the previous one's continuation. `run`
  // holds the step weakly and each continuation strongly, so the step lives
  // exactly as long as a chunk is on its way (no cycle).
  struct Step {
    std::function<void(std::size_t)> run;
  };
  auto step = std::make_shared<Step>();
  ActorId agent{buffer.owner(), agent_};
  std::weak_ptr<Step> weak = step;
  step->run = [this, weak, agent, lease, local, bytes, write, user, deadline,
               release](std::size_t offset) {
    auto self = weak.lock();
    if (!self) return;
    if (offset >= bytes || deadline->stop->load()) {
      release();
      return deadline->finish(*user, nullptr);
    }
    std::size_t n = std::min(fallbackChunk(), bytes - offset);
    auto next = [self, offset, n, user, deadline, release](auto& reply, auto&& fill) {
      try {
        fill(reply);
      } catch (...) {
        release();
        return deadline->finish(*user, std::current_exception());
      }
      self->run(offset + n);
    };
    if (write) {
      WriteChunk chunk{lease, offset, std::string(n, '\0')};
      try {
        copyMemory(chunk.data.data(), local + offset, n);  // local may be device memory
      } catch (...) {
        release();
        return deadline->finish(*user, std::current_exception());
      }
      proc_->request<void>(agent, chunk).then([next](Future<void> reply) {
        next(reply, [](Future<void>& f) { f.get(); });
      });
    } else {
      proc_->request<std::string>(agent, ReadChunk{lease, offset, n})
          .then([next, local, offset, n](Future<std::string> reply) {
            next(reply, [&](Future<std::string>& f) {
              std::string data = f.get();
              if (data.size() != n) throw ProtocolError("RDMA: a short chunk from the owner");
              copyMemory(local + offset, data.data(), n);
            });
          });
    }
  };
  // The chunks' continuations hold `step` until the last one ends.
  step->run(0);
}

Future<void> RdmaModule::drop(const Buffer& buffer) {
  if (!buffer.valid()) return Future<void>::ready({});
  if (buffer.owner() == proc_->rank()) return dropLocal(buffer.id(), "dropped");
  return proc_->request<void>(ActorId{buffer.owner(), agent_}, DropRegion{buffer.id()});
}

}  // namespace crown::rdma::detail
