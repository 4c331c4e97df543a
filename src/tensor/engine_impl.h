// Engine::Impl (crown/tensor/engine.h), declared for its two files:
// engine.cpp, the dispatcher on the engine actor's thread (batches to the
// streams, streams and borrows, awaiting another engine, batch counts) and
// the Engine calls; engine_run.cpp, what a stream's thread runs (calls,
// collectives, transfers, deferred errors) and the reads after a drain.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <vector>

#include "crown/mesh/point.h"
#include "crown/tensor/engine.h"
#include "tensor/collectives.h"
#include "tensor/ref_table.h"
#include "tensor/stream_thread.h"

namespace crown::tensor {
namespace detail {

// What one stream owns: its thread, its communicators, its generator, the
// scratch its calls reuse.
struct EngineStream {
  EngineStream(Proc& proc, const mesh::Shape& shape, StreamId id, std::uint64_t seed,
               std::size_t bound)
      : collectives(proc, shape, id),
        generator(seed ^ (0xD1B54A32D192ED03ull * (id + 1))),
        thread(bound) {}
  detail::Collectives collectives;
  std::mt19937_64 generator;
  // A call's inputs, its capacity kept from call to call (Engine::Impl::call):
  // no allocation per op for the vector a kernel takes.
  std::vector<LocalTensor> inputs;
  detail::StreamThread thread;  // last: goes first, while the members it uses live
};

constexpr std::chrono::seconds kAwaitTimeout{60};
constexpr std::chrono::milliseconds kGiveUpPoll{20};

struct BorrowState {
  StreamId lender = 0, borrower = 0;
  RefId result = 0;
  std::shared_ptr<Latch> returned;
};

}  // namespace detail

struct Engine::Impl {
  using Stream = detail::EngineStream;
  using RefTable = detail::RefTable;
  using Latch = detail::Latch;
  using BorrowState = detail::BorrowState;

  Impl(Proc& proc, mesh::Point point, std::uint64_t seed);

  // --- the dispatcher (the actor's thread) ---------------------------------------

  Stream& stream(StreamId id);

  // Consecutive calls of a kernel with a guard go to their stream as one
  // task, run under one guard (kernel.h: Python's GIL, taken once); small
  // allreduces in a row, as one (Collectives::fusable). The tasks run the
  // commands where they are, in the batch they share: none is copied.
  using Batch = std::shared_ptr<std::vector<Command>>;
  void dispatchBatch(std::vector<Command>&& commands);
  // A batch decoded into the vector of one already run (spareCommands):
  // the room of its few hundred commands, tens of KiB (a request, and a
  // free, large enough that glibc's malloc consolidates its free lists for
  // it), is allocated once, not once per batch. A few are kept: the next
  // batch is decoded while the last one runs.
  CommandBatch decode(const wire::Bytes& bytes);
  void dispatch(const Batch& batch, std::size_t index);
  void borrow(const Borrow& b);
  void giveBack(const ReturnBorrow& r);

  // AwaitEngine: the current stream waits for the other engine, and every
  // other stream (those made later too) waits for the current one to be
  // done waiting. Bounded: a batch of the other mesh that never comes (a
  // lost hop of its cast) must not hold this mesh for good.
  void awaitEngine(const AwaitEngine& a);

  // Batch `number` is run once every stream has run its part. Streams run
  // in order, so a batch run means every batch before it was run too
  // (hence max).
  void countRunOnEveryStream(std::uint64_t number);

  // Waits until this engine has run its first `count` batches, and no
  // more: what it was given after them may await the caller (AwaitEngine
  // the other way), which a drain would wait for.
  // Bounded by the waiter's `giveUp` too, looked at every kGiveUpPoll: an
  // engine destroyed (a proc stopping) while its stream awaits another
  // whose batch will now never run must not hold its destructor for
  // kAwaitTimeout. The caller is counted in `waiters` (awaitRun).
  bool waitRun(std::uint64_t count, std::chrono::steady_clock::time_point deadline,
               const std::atomic<bool>& giveUp);

  // The engine goes: its own streams stop awaiting others, and the streams
  // of other engines that await this one are let go before it is freed.
  void close();

  // Waits until this engine has been given `count` batches and has run them.
  bool waitGiven(std::uint64_t count, std::chrono::steady_clock::time_point deadline);

  // Runs `task` once every stream has run what it was given before: a
  // delete must not overtake a use of the ref on another stream. Counted
  // as a command.
  void afterEveryStream(std::function<void()> task);

  // No stream waits: the last to get there runs `task`.
  void onceEveryStreamRan(std::function<void()> task);
  void drainAll();

  // --- a stream's thread --------------------------------------------------------

  RefTable::Poison failure(const std::string& op, std::string message, const std::string& origin,
                           std::string traceback = {}) const;
  void poisonAll(const Refs& results, const RefTable::Poison& poison);
  void run(const Command& command, Stream& s);
  void runFused(const std::vector<Collective>& commands, Stream& s);
  void transfer(const Transfer& t);
  /// `kernel`: c.kernel's, when the caller looked it up (once for a run of calls).
  void call(const Call& c, Stream& s, const Kernel* kernel = nullptr);

  // --- reads, after drainAll() ----------------------------------------------------

  static LocalTensor onHost(const LocalTensor& tensor);
  FetchReply fetch(RefId ref) const;

  Proc& proc;
  mesh::Point point;
  std::map<std::string, std::size_t> coords;
  std::uint64_t seed;
  std::size_t queueBound;
  RefTable refs;
  std::atomic<std::uint64_t> ran{0};
  std::mutex batchMutex;
  std::condition_variable batchArrived;  // also: a waiter left (waiters)
  std::atomic<bool> closing{false};      // set once, by close()
  std::size_t waiters = 0;               // other engines' streams in awaitRun, under batchMutex
  std::uint64_t batches = 0;             // given so far, under batchMutex
  std::uint64_t batchesRun = 0;          // run by every stream, under batchMutex
  // The dispatcher's own.
  StreamId current = 0;
  std::map<std::uint64_t, BorrowState> borrows;
  std::mutex spareMutex;  // a batch is decoded on the actor's thread, done with on a stream's
  std::vector<std::vector<Command>> spareCommands;  // emptied vectors of batches run
  static constexpr std::size_t kSpareBatches = 4;
  std::vector<std::shared_ptr<Latch>> awaited;          // AwaitEngines not yet over
  std::map<StreamId, std::unique_ptr<Stream>> streams;  // last: their threads use the above
};

}  // namespace crown::tensor
