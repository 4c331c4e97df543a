// The engine's handlers. A batch is dispatched command by command, on the
// actor's thread, to the streams' threads (each stream runs its commands in
// order, ORD-1, beside the others); fetch and sync wait behind the batches
// in the actor's mailbox, then for every stream to run what it was given.
#include "crown/tensor/engine.h"

#include <condition_variable>
#include <map>
#include <mutex>

#include "crown/common/env.h"
#include "crown/common/log.h"
#include "crown/tensor/kernel.h"
#include "tensor/engine_impl.h"
#include "tensor/native_kernels.h"

namespace crown::tensor {

using detail::kAwaitTimeout;
using detail::kGiveUpPoll;
using detail::Latch;
using detail::RefTable;

Engine::Impl::Impl(Proc& proc, mesh::Point point, std::uint64_t seed)
    : proc(proc),
      point(point),
      coords(point.coordinates()),
      // Mixed with the rank so every proc draws its own numbers.
      seed(seed ^ (0x9E3779B97F4A7C15ull * (static_cast<std::uint64_t>(point.rank) + 1))),
      queueBound(static_cast<std::size_t>(env::integer("CROWN_TENSOR_QUEUE", 4096, 1, 1 << 24))) {
  stream(0);
}

Engine::Impl::Stream& Engine::Impl::stream(StreamId id) {
  auto it = streams.find(id);
  if (it == streams.end()) {
    // On every engine at the same command: its communicators are made
    // collectively here (Collectives' constructor).
    it = streams.emplace(id, std::make_unique<Stream>(proc, point.shape, id, seed, queueBound))
             .first;
    for (const auto& other : awaited) it->second->thread.post([other] { other->wait(); });
  }
  return *it->second;
}

// Consecutive calls of a kernel with a guard go to their stream as one
// task, run under one guard (kernel.h: Python's GIL, taken once). Tasks
// share the batch and run its commands in place: a copy of every call (a
// vector of them grown to the batch's size, large enough that glibc's
// malloc consolidates its free lists for it) cost more than the call.
void Engine::Impl::dispatchBatch(std::vector<Command>&& commands) {
  // The last task done with it (or this function) empties it, on its own
  // thread, and keeps its room for the next batch's decode.
  Batch batch(new std::vector<Command>(std::move(commands)), [this](std::vector<Command>* done) {
    done->clear();
    {
      std::lock_guard lock(spareMutex);
      if (spareCommands.size() < kSpareBatches) spareCommands.push_back(std::move(*done));
    }
    delete done;
  });
  const std::vector<Command>& all = *batch;
  for (std::size_t i = 0; i < all.size();) {
    if (std::size_t fused = detail::Collectives::fusable(all, i); fused > 1) {
      std::vector<Collective> run;
      for (std::size_t end = i + fused; i < end; ++i)
        run.push_back(std::move(std::get<Collective>((*batch)[i])));
      Stream& s = stream(current);
      s.thread.post([this, &s, run = std::move(run)] { runFused(run, s); });
      continue;
    }
    const auto* call = std::get_if<Call>(&all[i]);
    KernelGuard guard = call ? findKernelGuard(call->kernel) : KernelGuard{};
    if (!guard) {
      dispatch(batch, i++);
      continue;
    }
    const std::size_t first = i;
    for (; i < all.size(); ++i) {
      auto* next = std::get_if<Call>(&all[i]);
      if (!next || next->kernel != call->kernel) break;
    }
    Stream& s = stream(current);
    s.thread.post([this, &s, guard = std::move(guard), batch, first, end = i] {
      auto held = guard();
      const auto& calls = *batch;
      Kernel kernel = findKernel(std::get<Call>(calls[first]).kernel);  // one lookup for the run
      for (std::size_t k = first; k < end; ++k) {
        ++ran;
        this->call(std::get<Call>(calls[k]), s, kernel ? &kernel : nullptr);
      }
    });
  }
}

CommandBatch Engine::Impl::decode(const wire::Bytes& bytes) {
  CommandBatch batch;
  {
    std::lock_guard lock(spareMutex);
    if (!spareCommands.empty()) {
      batch.commands = std::move(spareCommands.back());
      spareCommands.pop_back();
    }
  }
  wire::countCopied(bytes.size());
  try {
    wire::IArchive archive(bytes.data(), bytes.size());
    archive >> batch;  // clears the commands, keeps their room
  } catch (const std::exception& e) {
    throw ProtocolError("cannot decode a " + wire::messageName<CommandBatch>() + " from " +
                        std::to_string(bytes.size()) + " bytes: " + e.what());
  }
  return batch;
}

void Engine::Impl::dispatch(const Batch& batch, std::size_t index) {
  const Command& command = (*batch)[index];
  if (auto* s = std::get_if<SwitchStream>(&command)) {
    current = s->stream;
    stream(current);
  } else if (auto* b = std::get_if<Borrow>(&command)) {
    borrow(*b);
  } else if (auto* r = std::get_if<ReturnBorrow>(&command)) {
    giveBack(*r);
  } else if (auto* a = std::get_if<AwaitEngine>(&command)) {
    awaitEngine(*a);
  } else if (auto* d = std::get_if<Delete>(&command)) {
    afterEveryStream([this, batch, d] {
      for (RefId ref : d->refs) this->refs.erase(ref);
    });
  } else {
    Stream& s = stream(current);
    s.thread.post([this, &s, batch, index] { run((*batch)[index], s); });
  }
}

void Engine::Impl::borrow(const Borrow& b) {
  auto lent = std::make_shared<Latch>();
  stream(b.lender).thread.post([lent] { lent->set(); });  // the tensor as of here
  stream(current).thread.post([this, lent, b] {
    lent->wait();
    auto value = refs.find(b.source);
    refs.define(
        b.result,
        value ? *value
              : RefTable::Value(failure(
                    "borrow",
                    "the borrowed ref " + std::to_string(b.source) + " is not defined here", "")));
  });
  borrows[b.id] = BorrowState{b.lender, current, b.result, std::make_shared<Latch>()};
}

void Engine::Impl::giveBack(const ReturnBorrow& r) {
  auto it = borrows.find(r.id);
  if (it == borrows.end()) return;  // never lent here (a refused command): nothing to give back
  BorrowState b = it->second;
  borrows.erase(it);
  stream(b.borrower).thread.post([this, b] {
    refs.erase(b.result);
    b.returned->set();  // after every borrower command before the return
  });
  // The lender's later commands may write the tensor: not before the
  // borrower is done with it.
  stream(b.lender).thread.post([b] { b.returned->wait(); });
}

// AwaitEngine: the current stream waits for the other engine, and every
// other stream (those made later too) waits for the current one to be
// done waiting. Bounded: a batch of the other mesh that never comes (a
// lost hop of its cast) must not hold this mesh for good.
void Engine::Impl::awaitEngine(const AwaitEngine& a) {
  if (!a.where.contains(proc.rank())) return;
  std::erase_if(awaited, [](const auto& latch) { return latch->isSet(); });
  auto done = std::make_shared<Latch>();
  const ActorId other{proc.rank(), a.engine};
  stream(current).thread.post([this, other, a, done] {
    if (!Engine::awaitRun(other, a.batches, kAwaitTimeout, closing) && !closing) {
      log::get().warn(
          "tensor engine: the engine of the mesh that shares a view with this one "
          "was not given its batch {} within {} s; going on without it",
          a.batches, kAwaitTimeout.count());
    }
    done->set();
  });
  for (auto& [id, s] : streams) {
    if (id != current) s->thread.post([done] { done->wait(); });
  }
  awaited.push_back(done);
}

// Batch `number` is run once every stream has run its part. Streams run
// in order, so a batch run means every batch before it was run too
// (hence max).
void Engine::Impl::countRunOnEveryStream(std::uint64_t number) {
  onceEveryStreamRan([this, number] {
    {
      std::lock_guard lock(batchMutex);
      batchesRun = std::max(batchesRun, number);
    }
    batchArrived.notify_all();
  });
}

// Waits until this engine has run its first `count` batches, and no
// more: what it was given after them may await the caller (AwaitEngine
// the other way), which a drain would wait for.
// Bounded by the waiter's `giveUp` too, looked at every kGiveUpPoll: an
// engine destroyed (a proc stopping) while its stream awaits another
// whose batch will now never run must not hold its destructor for
// kAwaitTimeout. The caller is counted in `waiters` (awaitRun).
bool Engine::Impl::waitRun(std::uint64_t count, std::chrono::steady_clock::time_point deadline,
                           const std::atomic<bool>& giveUp) {
  std::unique_lock lock(batchMutex);
  for (;;) {
    if (batchesRun >= count) return true;
    auto now = std::chrono::steady_clock::now();
    if (closing || giveUp || now >= deadline) return false;
    batchArrived.wait_until(lock, std::min(deadline, now + kGiveUpPoll));
  }
}

// The engine goes: its own streams stop awaiting others, and the streams
// of other engines that await this one are let go before it is freed.
void Engine::Impl::close() {
  std::unique_lock lock(batchMutex);
  closing = true;
  batchArrived.notify_all();
  batchArrived.wait(lock, [&] { return waiters == 0; });
}

// Waits until this engine has been given `count` batches and has run them.
bool Engine::Impl::waitGiven(std::uint64_t count, std::chrono::steady_clock::time_point deadline) {
  {
    std::unique_lock lock(batchMutex);
    if (!batchArrived.wait_until(lock, deadline, [&] { return batches >= count; })) return false;
  }
  drainAll();
  return true;
}

// Runs `task` once every stream has run what it was given before: a
// delete must not overtake a use of the ref on another stream. Counted
// as a command.
void Engine::Impl::afterEveryStream(std::function<void()> task) {
  ++ran;
  onceEveryStreamRan(std::move(task));
}

// No stream waits: the last to get there runs `task`.
void Engine::Impl::onceEveryStreamRan(std::function<void()> task) {
  if (streams.size() == 1) return streams.begin()->second->thread.post(std::move(task));
  auto left = std::make_shared<std::atomic<std::size_t>>(streams.size());
  auto shared = std::make_shared<std::function<void()>>(std::move(task));
  for (auto& [id, s] : streams) {
    s->thread.post([left, shared] {
      if (--*left == 0) (*shared)();
    });
  }
}

void Engine::Impl::drainAll() {
  for (auto& [id, s] : streams) s->thread.drain();
}

namespace {
// Engines by their actor's address: unique in a process, simulated procs
// included (each has its own rank). Never destroyed: engines go with their
// Proc, which may be a static's that outlives any static here.
struct Engines {
  std::mutex mutex;
  std::condition_variable added;
  std::map<std::pair<Rank, std::uint64_t>, Engine*> byId;
};
Engines& engines() {
  static Engines* instance = new Engines;
  return *instance;
}
}  // namespace

Engine::Engine(std::uint64_t seed) {
  detail::registerNativeKernels();
  impl_ = std::make_unique<Impl>(Proc::current(), mesh::here(), seed);
  // Raw, so that the engine decodes a batch into a vector it kept (decode()).
  handleRaw(wire::messageName<CommandBatch>(), [this](wire::Bytes& bytes) {
    CommandBatch batch = impl_->decode(bytes);
    if (!registered_) {  // the id is set before the first handler runs, not in the constructor
      std::lock_guard lock(engines().mutex);
      engines().byId[{id().rank, id().local}] = this;
      registered_ = true;
      engines().added.notify_all();
    }
    impl_->dispatchBatch(std::move(batch.commands));
    std::uint64_t number = 0;
    {
      std::lock_guard lock(impl_->batchMutex);
      number = ++impl_->batches;
    }
    impl_->countRunOnEveryStream(number);
    impl_->batchArrived.notify_all();
    return crown::detail::HandlerResult{wire::messageName<crown::detail::Unit>(), {}};
  });
  handle<FetchShard>([this](const FetchShard& fetch) {
    impl_->drainAll();
    return impl_->fetch(fetch.ref);
  });
  handle<Sync>([this](const Sync&) {
    impl_->drainAll();
    return EngineStats{impl_->ran, impl_->refs.size()};
  });
}

Engine::~Engine() {
  {
    std::lock_guard lock(engines().mutex);  // from here on nobody finds it
    auto it = engines().byId.find({id().rank, id().local});
    if (it != engines().byId.end() && it->second == this) engines().byId.erase(it);
  }
  impl_->close();  // then its streams join, in ~Impl
}

Engine* Engine::find(const ActorId& id) {
  std::lock_guard lock(engines().mutex);
  auto it = engines().byId.find({id.rank, id.local});
  return it == engines().byId.end() ? nullptr : it->second;
}

void Engine::define(RefId ref, LocalTensor tensor) { impl_->refs.define(ref, std::move(tensor)); }

bool Engine::awaitRun(const ActorId& id, std::uint64_t batches, std::chrono::milliseconds timeout,
                      const std::atomic<bool>& giveUp) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  // It registers with its first batch, which may not have come yet.
  std::unique_lock lock(engines().mutex);
  for (;;) {
    auto it = engines().byId.find({id.rank, id.local});
    if (it != engines().byId.end()) {
      // Entered under the registry's lock, so its destructor (which takes
      // that lock first) waits for this wait to end before freeing it.
      Impl& other = *it->second->impl_;
      std::unique_lock batch(other.batchMutex);
      ++other.waiters;
      batch.unlock();
      lock.unlock();
      bool ran = other.waitRun(batches, deadline, giveUp);
      batch.lock();
      if (--other.waiters == 0) other.batchArrived.notify_all();
      return ran;
    }
    auto now = std::chrono::steady_clock::now();
    if (giveUp || now >= deadline) return false;
    engines().added.wait_until(lock, std::min(deadline, now + kGiveUpPoll));
  }
}

LocalTensor Engine::shard(RefId ref, std::uint64_t batches,
                          std::chrono::milliseconds timeout) const {
  if (!impl_->waitGiven(batches, std::chrono::steady_clock::now() + timeout)) {
    throw Error("the tensor engine has not been given the commands that make ref " +
                std::to_string(ref) + " within " + std::to_string(timeout.count()) + " ms");
  }
  auto value = impl_->refs.find(ref);
  if (!value) throw Error("ref " + std::to_string(ref) + " is not defined on this proc");
  if (auto* poison = std::get_if<RefTable::Poison>(&*value)) throw Error((*poison)->describe());
  return std::get<LocalTensor>(*value);
}

}  // namespace crown::tensor
