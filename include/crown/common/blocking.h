// Hooks a thread pool installs on its threads so that it learns when one of
// them is about to block (and can compensate). Future waits call them.
#pragma once

namespace crown::detail {

struct BlockingHooks {
  void (*enter)(void* context);
  void (*leave)(void* context);
  void* context;
};

/// This thread's hooks (nullptr: none).
void setBlockingHooks(const BlockingHooks* hooks);
const BlockingHooks* blockingHooks();

/// Marks a blocking wait on this thread for its pool, if it has one.
class BlockingScope {
 public:
  BlockingScope() : hooks_(blockingHooks()) {
    if (hooks_) hooks_->enter(hooks_->context);
  }
  ~BlockingScope() {
    if (hooks_) hooks_->leave(hooks_->context);
  }
  BlockingScope(const BlockingScope&) = delete;
  BlockingScope& operator=(const BlockingScope&) = delete;

 private:
  const BlockingHooks* hooks_;
};

}  // namespace crown::detail
