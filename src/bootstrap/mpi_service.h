// The MPI service thread (THR-1): the one thread that calls MPI, from
// MPI_Init_thread to MPI_Finalize. Others submit closures and wait.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

namespace crown::detail {

class MpiService {
 public:
  MpiService();
  ~MpiService();

  /// Runs `fn` on the service thread and waits; rethrows what it throws.
  void call(std::function<void()> fn);

 private:
  void loop();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::packaged_task<void()>> tasks_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace crown::detail
