// The service thread, its queues and the progress loop (THR-1). The typed
// operations and the communicators are in mpi_ops.cpp.
#include "bootstrap/mpi_service.h"

#include <algorithm>

#include "bootstrap/mpi_check.h"
#include "crown/common/blocking.h"
#include "crown/common/log.h"

namespace crown::detail {
namespace {

using namespace std::chrono_literals;

// Back-off while operations are in flight and none moves: a few passes
// that only yield (a reply often lands within microseconds), then sleeps
// that double from kMinPause to kMaxPause. A submission or a call() wakes the
// loop at once, so the pauses only delay noticing MPI's own progress.
constexpr int kSpinPasses = 16;
constexpr auto kMinPause = 10us;
constexpr auto kMaxPause = 80us;
// How long a cancelled point-to-point request is polled before it is
// handed to MPI_Request_free (Open MPI may never complete a cancelled send).
constexpr auto kCancelGrace = 1s;
// How long the loop stays awake after a one-sided transfer ended.
constexpr auto kTransferLinger = 500us;
// How long the loop only yields while a collective is in flight and
// nothing has moved: a nonblocking collective advances a round only when
// MPI is called, and a pause per round added 0.3-0.4 ms to a 1 MiB
// allreduce over 4 ranks (bench/tensor_allreduce.py). Bounded, so that a
// member waiting for a slow one stops taking turns on a shared core.
constexpr auto kCollectiveSpin = 2ms;

}  // namespace

MpiService::MpiService() : thread_([this] { loop(); }) { threadId_ = thread_.get_id(); }

MpiService::~MpiService() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  // DLV-1: nothing is left waiting. No MPI here: it is finalised, or the
  // process is leaving without it.
  failEverything("the MPI service stopped");
}

void MpiService::call(std::function<void()> fn) {
  if (std::string why = unusable(); !why.empty()) throw Error(why);
  // From the service thread (a future's continuation), queueing would deadlock.
  if (std::this_thread::get_id() == threadId_) return fn();
  // A task queued while MPI was usable and served after markUnusable fails
  // there, unrun.
  std::packaged_task<void()> task([this, fn = std::move(fn)] {
    if (broken_) throw Error(unusable());
    fn();
  });
  auto done = task.get_future();
  {
    std::lock_guard lock(mutex_);
    tasks_.push_back(std::move(task));
  }
  wake_.notify_all();
  detail::BlockingScope blocking;  // a pool thread waiting on MPI lets its pool compensate
  done.get();
}

Future<void> MpiService::submit(std::string what, Start start, std::vector<Rank> peers) {
  auto state = std::make_shared<FutureState<void>>();
  auto op = std::make_unique<Op>();
  op->kind = Kind::generic;
  op->what = std::move(what);
  op->peers = std::move(peers);
  op->start = std::move(start);
  op->succeed = [state](const MPI_Status&) { state->setValue(Unit{}); };
  admit(std::move(op), [state](std::exception_ptr error) { state->setError(std::move(error)); });
  return Future<void>(state);
}

void MpiService::admit(std::unique_ptr<Op> op, std::function<void(std::exception_ptr)> fail) {
  std::exception_ptr refused;
  {
    std::lock_guard lock(mutex_);
    if (!unusable_.empty()) {
      refused = std::make_exception_ptr(Error(op->what + ": " + unusable_));
    } else if (finalized_ || stopping_) {
      refused = std::make_exception_ptr(Error(op->what + ": MPI is finalised"));
    } else {
      for (Rank peer : op->peers) {
        if (auto it = lost_.find(peer); it != lost_.end()) {
          refused = lostError(peer, it->second);
          break;
        }
      }
    }
    if (!refused) {
      op->id = nextId_++;
      pending_.emplace(op->id, Pending{op->peers, fail});
      incoming_.push_back(std::move(op));
    }
  }
  if (refused) {
    ++failed_;
    return fail(refused);
  }
  wake_.notify_all();
}

std::exception_ptr MpiService::lostError(Rank peer, const std::string& reason) const {
  std::string host = peer < hosts_.size() ? hosts_[peer] : "";
  return std::make_exception_ptr(ProcessLost(peer, host, reason));
}

void MpiService::abandonPeer(Rank peer, std::string reason) {
  std::vector<std::function<void(std::exception_ptr)>> fails;
  std::exception_ptr error;
  {
    std::lock_guard lock(mutex_);
    if (!lost_.emplace(peer, reason).second) return;  // abandoned already
    error = lostError(peer, reason);
    for (auto it = pending_.begin(); it != pending_.end();) {
      const auto& peers = it->second.peers;
      if (std::find(peers.begin(), peers.end(), peer) != peers.end()) {
        fails.push_back(std::move(it->second.fail));
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
    abandons_.push_back(peer);  // the service thread cancels what it posted
  }
  wake_.notify_all();
  log::get().info("MPI service: rank {} abandoned ({}): {} pending operation(s) failed", peer,
                  reason, fails.size());
  // DLV-1: the futures fail here and now, even while the service thread is
  // busy; it only cleans up behind them.
  failed_ += fails.size();
  for (auto& fail : fails) fail(error);
}

void MpiService::markUnusable(const std::string& why) {
  CROWN_CHECK(std::this_thread::get_id() == threadId_,
              "MpiService::markUnusable: only on the MPI service thread");
  {
    std::lock_guard lock(mutex_);
    if (!unusable_.empty()) return;
    unusable_ = why;
  }
  broken_ = true;
  log::get().error("MPI service: {}", why);
  // DLV-1: what waits fails now. The requests are left to MPI, unpolled:
  // nothing here may call it again (THR-1 with MPI_THREAD_SERIALIZED, while
  // another thread may still be inside it).
  failEverything(why);
  typed_.clear();
  requests_.clear();
  generic_.clear();
  draining_ = 0;
}

std::string MpiService::unusable() const {
  std::lock_guard lock(mutex_);
  return unusable_;
}

MpiService::Stats MpiService::stats() const {
  Stats stats;
  stats.splits = splits_;
  stats.completed = completed_;
  stats.failed = failed_;
  stats.draining = draining_;
  std::lock_guard lock(mutex_);
  stats.pending = pending_.size();
  return stats;
}

void MpiService::complete(std::uint64_t id, const std::function<void()>& fill) {
  {
    std::lock_guard lock(mutex_);
    if (pending_.erase(id) == 0) return;  // failed already (abandoned): first outcome wins
  }
  ++completed_;
  fill();
}

void MpiService::fail(std::uint64_t id, std::exception_ptr error) {
  std::function<void(std::exception_ptr)> fail;
  {
    std::lock_guard lock(mutex_);
    auto it = pending_.find(id);
    if (it == pending_.end()) return;
    fail = std::move(it->second.fail);
    pending_.erase(it);
  }
  ++failed_;
  fail(std::move(error));
}

void MpiService::failEverything(const std::string& why) {
  std::unordered_map<std::uint64_t, Pending> pending;
  {
    std::lock_guard lock(mutex_);
    pending.swap(pending_);
  }
  failed_ += pending.size();
  for (auto& [id, entry] : pending) entry.fail(std::make_exception_ptr(Error(why)));
}

void MpiService::loop() {
  int idle = 0;  // passes in a row in which nothing moved
  for (;;) {
    std::deque<std::packaged_task<void()>> tasks;
    std::deque<std::unique_ptr<Op>> incoming;
    std::deque<Rank> abandons;
    {
      std::unique_lock lock(mutex_);
      auto work = [this] {
        return stopping_ || !tasks_.empty() || !incoming_.empty() || !abandons_.empty();
      };
      // While memory is attached to the RMA window, peers may be reading or
      // writing it: over TCP (osc pt2pt) that progresses here only while this
      // thread is inside MPI, so the loop keeps polling (with its back-off).
      bool exposed = attached_ > 0 && !broken_;
      if (typed_.empty() && generic_.empty() && !exposed) {
        wake_.wait(lock, work);  // nothing in flight: sleep, burn no core
      } else if (idle > kSpinPasses && transfersActive_ == 0 &&
                 Clock::now() - lastTransferEnd_ > kTransferLinger &&
                 !(collectivesInFlight() && Clock::now() - lastMoved_ < kCollectiveSpin)) {
        // (While a one-sided transfer is in flight, and for kTransferLinger
        // after one ended, the loop only yields: a pause would add up to
        // kMaxPause to each transfer's start or end, which for a 1 MiB read
        // is a third of its time, and transfers come in runs.)
        auto pause = std::min<std::chrono::microseconds>(
            kMaxPause, kMinPause * (1 << std::min(idle - kSpinPasses, 4)));
        wake_.wait_for(lock, pause, work);
      }
      if (stopping_ && tasks_.empty()) return;
      tasks.swap(tasks_);
      incoming.swap(incoming_);
      abandons.swap(abandons_);
    }
    for (auto& task : tasks) task();  // call() is served while operations are in flight
    if (broken_) continue;  // markUnusable: MPI is never called again (their futures failed)
    for (Rank peer : abandons) applyAbandon(peer);
    for (auto& op : incoming) startOp(std::move(op));
    bool moved = progress();
    if (attached_ > 0 && window_ != MPI_WIN_NULL) {
      int flag = 0;  // any MPI call progresses the target side of one-sided MPI
      MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, windowComm_, &flag, MPI_STATUS_IGNORE);
    }
    if (moved || !tasks.empty() || !incoming.empty() || !abandons.empty()) {
      idle = 0;
      lastMoved_ = Clock::now();
    } else if (++idle <= kSpinPasses) {
      std::this_thread::yield();
    }
  }
}

bool MpiService::collectivesInFlight() const {
  return std::any_of(typed_.begin(), typed_.end(),
                     [](const auto& op) { return op->kind == Kind::collective; });
}

void MpiService::startOp(std::unique_ptr<Op> op) {
  {
    std::lock_guard lock(mutex_);
    if (!pending_.contains(op->id)) return;  // failed before it started: post nothing
  }
  std::uint64_t id = op->id;
  try {
    if (op->kind == Kind::generic) {
      op->poll = op->start();
      op->start = nullptr;
      CROWN_CHECK(op->poll != nullptr, op->what + ": its start returned no poll function");
      generic_.push_back(std::move(op));
    } else {
      MPI_Request request = MPI_REQUEST_NULL;
      op->post(request);
      op->post = nullptr;
      typed_.push_back(std::move(op));
      requests_.push_back(request);
    }
  } catch (...) {
    fail(id, std::current_exception());  // never throw across the loop
  }
}

bool MpiService::progress() {
  bool moved = false;
  std::vector<bool> done(typed_.size(), false);
  if (!requests_.empty()) {
    int count = static_cast<int>(requests_.size());
    std::vector<int> indices(count);
    // MPI writes MPI_ERROR only where it reports one (MPI_ERR_IN_STATUS):
    // start clean, so an untouched field reads as success.
    MPI_Status clean{};
    clean.MPI_ERROR = MPI_SUCCESS;
    std::vector<MPI_Status> statuses(count, clean);
    int finished = 0;
    int code = MPI_Testsome(count, requests_.data(), &finished, indices.data(), statuses.data());
    if (code != MPI_SUCCESS && code != MPI_ERR_IN_STATUS) {
      // The call itself failed, and says nothing of which request: fail them all.
      auto error = CROWN_MPI_ERROR(code, "MPI_Testsome");
      for (auto& op : typed_) fail(op->id, error);
      typed_.clear();
      requests_.clear();
      draining_ = 0;
      return true;
    }
    if (finished == MPI_UNDEFINED) finished = 0;
    for (int k = 0; k < finished; ++k) {
      int i = indices[k];
      Op& op = *typed_[i];
      done[i] = true;
      if (op.cancelledAt) {
        --draining_;  // MPI let go of an abandoned request; its future failed already
      } else if (statuses[k].MPI_ERROR != MPI_SUCCESS) {
        fail(op.id, CROWN_MPI_ERROR(statuses[k].MPI_ERROR, op.what.c_str()));
      } else {
        const MPI_Status& status = statuses[k];
        complete(op.id, [&] { op.succeed(status); });
      }
    }
    moved = finished > 0;
  }
  auto now = Clock::now();
  for (std::size_t i = 0; i < typed_.size(); ++i) {
    auto& cancelled = typed_[i]->cancelledAt;
    if (done[i] || !cancelled || now - *cancelled < kCancelGrace) continue;
    // MPI allows freeing an active point-to-point request: it finishes (or
    // not) on its own, and the loop stops polling it.
    try {
      CROWN_CHECK_MPI(MPI_Request_free(&requests_[i]));
    } catch (const std::exception& e) {
      log::get().warn("MPI service: {}", e.what());
    }
    --draining_;
    done[i] = true;
  }
  // Drop what finished, keeping typed_[i] and requests_[i] together.
  std::size_t kept = 0;
  for (std::size_t i = 0; i < typed_.size(); ++i) {
    if (done[i]) continue;
    typed_[kept] = std::move(typed_[i]);
    requests_[kept] = requests_[i];
    ++kept;
  }
  typed_.resize(kept);
  requests_.resize(kept);

  for (auto it = generic_.begin(); it != generic_.end();) {
    Op& op = **it;
    bool finished = false;
    try {
      finished = op.poll();
      if (finished) complete(op.id, [&] { op.succeed(MPI_Status{}); });
    } catch (...) {
      fail(op.id, std::current_exception());
      finished = true;
    }
    if (finished) {
      moved = true;
      it = generic_.erase(it);
    } else {
      ++it;
    }
  }
  return moved;
}

void MpiService::applyAbandon(Rank peer) {
  auto involves = [peer](const Op& op) {
    return std::find(op.peers.begin(), op.peers.end(), peer) != op.peers.end();
  };
  // Their futures failed in abandonPeer; here MPI is told, where it can be.
  std::size_t kept = 0;
  for (std::size_t i = 0; i < typed_.size(); ++i) {
    Op& op = *typed_[i];
    bool keep = true;
    if (involves(op) && op.kind == Kind::pointToPoint && !op.cancelledAt) {
      try {
        CROWN_CHECK_MPI(MPI_Cancel(&requests_[i]));
      } catch (const std::exception& e) {
        log::get().warn("MPI service: {}", e.what());
      }
      op.cancelledAt = Clock::now();  // polled until MPI lets go of it, then dropped
      ++draining_;
    } else if (involves(op) && op.kind == Kind::collective) {
      // A collective cannot be cancelled (MPI_Cancel and MPI_Request_free
      // are erroneous on one): stop polling it and leave it to MPI.
      keep = false;
    }
    if (!keep) continue;
    typed_[kept] = std::move(typed_[i]);
    requests_[kept] = requests_[i];
    ++kept;
  }
  typed_.resize(kept);
  requests_.resize(kept);
  std::erase_if(generic_, [&](const std::unique_ptr<Op>& op) { return involves(*op); });
}

void MpiService::finalize(std::function<void()> step) {
  call([&] {  // throws at once where MPI is unusable (markUnusable): nothing to finalise
    {
      std::lock_guard lock(mutex_);
      finalized_ = true;  // from here, submissions fail at once
    }
    failEverything("MPI is being finalised");
    typed_.clear();  // their futures failed; MPI_Finalize takes the requests with it
    requests_.clear();
    generic_.clear();
    draining_ = 0;
    closeWindow();  // collective, like MPI_Finalize: every rank is here
    std::deque<CommInfo> comms;
    {
      std::lock_guard lock(mutex_);
      comms.swap(comms_);
      along_.clear();
      groups_.clear();
    }
    // comms[0] is the world, which belongs to Runtime.
    for (std::size_t i = 1; i < comms.size(); ++i) CROWN_CHECK_MPI(MPI_Comm_free(&comms[i].comm));
    step();
  });
}

}  // namespace crown::detail
