// MeshStream<R>: the replies of a streaming cast, handed out as they arrive
// (ActorMesh::stream). Filled by pool threads, read by one consumer.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>

#include "crown/common/abortable.h"
#include "crown/common/blocking.h"
#include "crown/mesh/value_mesh.h"

namespace crown {

template <class R>
class MeshStream {
 public:
  using Value = detail::Stored<R>;

  /// One member's reply (or error).
  struct Item {
    std::size_t rank = 0;
    std::map<std::string, std::size_t> point;  ///< coordinates in the mesh cast to
    std::optional<Value> value;
    std::exception_ptr error;
    /// The value; rethrows the member's error.
    R get() const {
      if (error) std::rethrow_exception(error);
      if constexpr (!std::is_void_v<R>) return *value;
    }
  };

  /// The state a cast fills; made by ActorMesh::stream.
  struct State {
    mesh::Shape shape;
    std::mutex mutex;
    std::condition_variable cv;
    std::deque<mesh::CastEntry> arrived;
    std::size_t handedOut = 0;

    void push(mesh::CastEntry&& entry) {
      {
        std::lock_guard lock(mutex);
        arrived.push_back(std::move(entry));
      }
      cv.notify_all();
    }
  };

  explicit MeshStream(std::shared_ptr<State> state) : state_(std::move(state)) {}

  /// Members cast to (the number of items the stream yields).
  std::size_t size() const { return state_->shape.size(); }

  /// The next reply, waiting for it; nullopt once every member's has been returned.
  std::optional<Item> next() { return take(std::nullopt); }
  /// As next(), but throws crown::Timeout when nothing arrives within timeout.
  std::optional<Item> next(std::chrono::milliseconds timeout) {
    return take(std::chrono::steady_clock::now() + timeout);
  }

 private:
  std::optional<Item> take(std::optional<std::chrono::steady_clock::time_point> deadline) {
    mesh::CastEntry entry;
    {
      detail::BlockingScope blocking;  // a pool thread waiting lets its pool compensate
      // Before the lock (common/abortable.h): the controller program's wait fails at an abort.
      detail::AbortableWait abortable(state_->mutex, state_->cv);
      std::unique_lock lock(state_->mutex);
      if (state_->handedOut == size()) return std::nullopt;
      auto ready = [&] { return !state_->arrived.empty() || abortable.aborted(); };
      if (!deadline) {
        state_->cv.wait(lock, ready);
      } else if (!state_->cv.wait_until(lock, *deadline, ready)) {
        throw Timeout("no stream reply within the timeout (" +
                      std::to_string(state_->handedOut) + " of " + std::to_string(size()) +
                      " so far)");
      }
      if (state_->arrived.empty()) abortable.rethrow();
      entry = std::move(state_->arrived.front());
      state_->arrived.pop_front();
      ++state_->handedOut;
    }
    Item item;
    item.rank = entry.rank;
    item.point = state_->shape.coordinates(entry.rank);
    mesh::detail::decodeEntry<R>(entry, item.value, item.error, "stream");
    return item;
  }

  std::shared_ptr<State> state_;
};

}  // namespace crown
