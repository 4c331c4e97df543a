// Device buffers staged through pinned host memory (rdma_module.h,
// crown/rdma/device_memory.h), where MPI cannot move device memory itself.
//
// The owner exposes a pinned mirror of the device buffer in the window. A
// remote transfer of it takes the owner's staging lock first (Stage): shared
// for a read, whose bytes the owner then copies from the device into the
// mirror; exclusive for a write. The reader moves the bytes over the window,
// then gives the lock back (Unstage), after the owner has copied a write's
// bytes from the mirror to the device. So a read sees the device memory as
// it was at one moment, never half a write, and two writes never mix.
//
// The agent never blocks: a Stage that must wait is queued on its region,
// in arrival order (a waiting write is not starved by later reads), and
// device copies run on the pool. A hold ends with its lease, so a reader
// that is lost (peerLost) or a proc that stops frees the lock.
#include "crown/common/log.h"
#include "rdma/deadline.h"
#include "rdma/messages.h"
#include "rdma/rdma_module.h"

namespace crown::rdma::detail {
using UserState = crown::detail::FutureState<void>;

bool RdmaModule::tryStage(Region& region, Lease& lease, bool write) {
  if (region.stageWriter || !region.stageWaiting.empty()) return false;
  if (write) {
    if (region.stageReaders > 0) return false;
    region.stageWriter = true;
    lease.stagedWrite = true;
  } else {
    ++region.stageReaders;
    ++lease.stagedReads;
  }
  return true;
}

void RdmaModule::unlockStage(Region& region, Lease& lease, bool write, bool all,
                             std::vector<StageRequest>& start) {
  if (all) {
    region.stageReaders -= lease.stagedReads;
    lease.stagedReads = 0;
    if (lease.stagedWrite) region.stageWriter = false;
    lease.stagedWrite = false;
  } else if (write && lease.stagedWrite) {
    region.stageWriter = false;
    lease.stagedWrite = false;
  } else if (!write && lease.stagedReads > 0) {
    --region.stageReaders;
    --lease.stagedReads;
  }
  // The queue's head goes first: reads start together, a write alone.
  while (!region.stageWaiting.empty()) {
    StageRequest& next = region.stageWaiting.front();
    auto holder = leases_.find(next.lease);
    if (holder == leases_.end()) {  // its lease ended while it waited
      start.push_back(std::move(next));
      start.back().lease = 0;
      region.stageWaiting.pop_front();
      continue;
    }
    if (region.stageWriter || (next.write && region.stageReaders > 0)) break;
    if (next.write) {
      region.stageWriter = true;
      holder->second.stagedWrite = true;
    } else {
      ++region.stageReaders;
      ++holder->second.stagedReads;
    }
    start.push_back(std::move(next));
    region.stageWaiting.pop_front();
  }
}

std::vector<RdmaModule::StageRequest> RdmaModule::unlockStageOf(std::uint64_t lease, bool write) {
  std::vector<StageRequest> next;
  std::lock_guard lock(mutex_);
  if (auto held = leases_.find(lease); held != leases_.end()) {
    unlockStage(regions_.at(held->second.region), held->second, write, false, next);
  }
  return next;
}

void RdmaModule::stage(const wire::Envelope& request, const Stage& stage) {
  std::vector<StageRequest> start;
  {
    std::lock_guard lock(mutex_);
    auto [lease, region] = leasedRegion(stage.lease);
    if (!region.staging) throw ProtocolError("RDMA: a Stage of a buffer that has no mirror");
    if (stage.bytes > region.bytes - lease.offset)
      throw BufferError("RDMA: a Stage past the end of the buffer");
    StageRequest wanted{request, stage.lease, stage.bytes, stage.write};
    if (!tryStage(region, lease, stage.write)) {
      region.stageWaiting.push_back(std::move(wanted));
      return;
    }
    start.push_back(std::move(wanted));
  }
  startStages(std::move(start));
}

void RdmaModule::startStages(std::vector<StageRequest> start) {
  for (StageRequest& s : start) {
    if (s.lease == 0) {
      proc_->replyFailure(
          s.request,
          std::make_exception_ptr(BufferError("RDMA: the lease ended while its Stage waited")));
      continue;
    }
    if (s.write) {  // the mirror is the writer's until it Unstages
      replyWith(*proc_, s.request, crown::detail::Unit{});
      continue;
    }
    // A read: the device's bytes into the mirror first, on the pool (a
    // copy of many MiB must not hold the thread that reads the links).
    pool_->post([this, s] {
      try {
        char *mirror = nullptr, *device = nullptr;
        {
          std::lock_guard lock(mutex_);  // a lost reader's lease ends with it
          auto [lease, region] = leasedRegion(s.lease);
          // The lease's part of the region (stage() checked its bytes).
          mirror = region.staging + lease.offset;
          device = region.base + lease.offset;
        }
        // Under the read hold: no write can change the mirror meanwhile.
        device_->copy(mirror, device, s.bytes);
        replyWith(*proc_, s.request, crown::detail::Unit{});
      } catch (...) {
        // The reader hears (and Unstages nothing): the hold goes back here.
        std::vector<StageRequest> next = unlockStageOf(s.lease, false);
        proc_->replyFailure(s.request, std::current_exception());
        startStages(std::move(next));
      }
    });
  }
}

void RdmaModule::unstage(const wire::Envelope& request, const Unstage& unstage) {
  auto finish = [this, request, unstage](std::exception_ptr failure) {
    std::vector<StageRequest> next = unlockStageOf(unstage.lease, unstage.write);
    if (failure) {
      proc_->replyFailure(request, failure);
    } else {
      replyWith(*proc_, request, crown::detail::Unit{});
    }
    startStages(std::move(next));
  };
  if (!unstage.write || !unstage.moved) return finish(nullptr);
  // A write: the mirror's bytes to the device before the lock goes.
  pool_->post([this, unstage, finish] {
    std::exception_ptr failure;
    try {
      char *mirror = nullptr, *device = nullptr;
      {
        std::lock_guard lock(mutex_);
        auto [lease, region] = leasedRegion(unstage.lease);
        if (!lease.stagedWrite) throw ProtocolError("RDMA: an Unstage with no Stage");
        if (unstage.bytes > region.bytes - lease.offset)
          throw BufferError("RDMA: an Unstage past the end");
        mirror = region.staging + lease.offset;
        device = region.base + lease.offset;
      }
      device_->copy(device, mirror, unstage.bytes);
    } catch (...) {
      failure = std::current_exception();
    }
    finish(failure);
  });
}

void RdmaModule::stagedMove(MpiService& mpi, const Buffer& buffer, Route route, char* local,
                            std::size_t bytes, bool write, std::shared_ptr<UserState> user,
                            std::shared_ptr<Deadline> deadline, std::function<void()> release) {
  ActorId agent{buffer.owner(), agent_};
  MpiService* window = &mpi;
  std::uint64_t lease = route.lease;
  proc_->request<void>(agent, Stage{lease, bytes, write})
      .then([this, window, buffer, lease, route, local, bytes, write, user, deadline, release,
             agent](Future<void> staged) {
        if (auto failure = errorOf(staged)) {  // nothing held: nothing to Unstage
          release();
          return deadline->finish(*user, failure);
        }
        // Sends from here on go from the pool: this may be the MPI service
        // thread, which must never wait on a send.
        auto unstageThen = [this, agent, lease, bytes, write](bool moved, auto then) {
          pool_->post([this, agent, lease, bytes, write, moved, then] {
            proc_->request<void>(agent, Unstage{lease, bytes, write, moved}).then(then);
          });
        };
        if (!deadline->begin()) {  // the deadline passed while the lock was awaited
          return unstageThen(false, [release](Future<void>) { release(); });
        }
        windowMove(*window, buffer.owner(), route, local, bytes, write, deadline->stop)
            .then([this, buffer, lease, local, bytes, write, user, deadline, release,
                   unstageThen](Future<void> moved) {
              std::exception_ptr outcome = errorOf(moved);
              // A write cut short leaves the mirror part old: nothing of it
              // goes to the device (the mirror may be older than the device).
              bool whole = !outcome && !deadline->stop->load();
              unstageThen(whole, [this, buffer, lease, local, bytes, write, user, deadline, release,
                                  outcome](Future<void> unstaged) {
                std::exception_ptr failure = outcome ? outcome : errorOf(unstaged);
                settle(buffer, lease, local, bytes, write, user, deadline, release, failure);
              });
            });
      });
}

}  // namespace crown::rdma::detail
