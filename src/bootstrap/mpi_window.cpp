// The MPI service's one-sided memory (mpi_service.h in include/crown/actor):
// the world's dynamic window, attach and detach, and chunked MPI_Rget /
// MPI_Rput as generic operations of the progress loop (THR-1: all of it runs
// on the service thread).
#include <sys/uio.h>  // process_vm_readv
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>

#include "bootstrap/mpi_check.h"
#include "bootstrap/mpi_service.h"
#include "crown/common/env.h"
#include "crown/common/log.h"
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // after mpi.h: Open MPI's extensions (MPIX_Query_cuda_support)
#endif

namespace crown::detail {
namespace {

// A transfer keeps at most this many chunks in flight: enough to keep the
// link busy, few enough that an operation queued behind a large transfer is
// posted within a chunk's time.
constexpr std::size_t kChunksInFlight = 4;

// Whether the process of a peer on this host still exists, asked the way
// Open MPI's shared-memory one-sided path reads it (CMA: process_vm_readv of
// one byte at `address`). Why: Open MPI 4.1's osc rdma over vader retries a
// read from a process that is gone forever, inside MPI_Rget, printing
// "Read -1, expected N, errno = 3" each time, so one chunk posted to a dead
// owner would hang the service thread and every MPI operation behind it.
// The check before each chunk leaves only the microseconds between it and
// the post. False only when the kernel says the process is gone (ESRCH);
// any other answer (EPERM under a strict ptrace scope, say) counts as alive.
bool sameHostPeerGone(int pid, std::uint64_t address) {
  char byte = 0;
  iovec local{&byte, 1};
  iovec remote{reinterpret_cast<void*>(address), 1};
  if (::process_vm_readv(pid, &local, 1, &remote, 1, 0) >= 0) return false;
  return errno == ESRCH;
}

std::size_t chunkBytes() {
  static const std::size_t bytes =
      static_cast<std::size_t>(env::integer("CROWN_RDMA_CHUNK_BYTES", 8 << 20, 4096, INT_MAX));
  return bytes;
}

}  // namespace

void MpiService::openWindow(bool wanted) {
  call([&] {
    MPI_Comm world = MPI_COMM_NULL;
    {
      std::lock_guard lock(mutex_);
      world = comms_.at(0).comm;
    }
    windowComm_ = world;
    // Every rank's pid, for sameHostPeerGone.
    int me = static_cast<int>(::getpid()), size = 0;
    CROWN_CHECK_MPI(MPI_Comm_size(world, &size));
    pids_.assign(static_cast<std::size_t>(size), 0);
    CROWN_CHECK_MPI(MPI_Allgather(&me, 1, MPI_INT, pids_.data(), 1, MPI_INT, world));
    int made = 0;
    std::string why;
    if (wanted) {
      int code = MPI_Win_create_dynamic(MPI_INFO_NULL, world, &window_);
      if (code == MPI_SUCCESS) code = MPI_Win_set_errhandler(window_, MPI_ERRORS_RETURN);
      // NOCHECK: no rank ever takes an exclusive lock, so none need be checked for.
      if (code == MPI_SUCCESS) code = MPI_Win_lock_all(MPI_MODE_NOCHECK, window_);
      if (code == MPI_SUCCESS) {
        made = 1;
      } else {
        try {
          CROWN_CHECK_MPI(code);
        } catch (const std::exception& e) {
          why = e.what();
        }
      }
    }
    // Every rank has a window, or none uses one: a reader cannot know
    // whether its owner's attach would work.
    int everywhere = made;
    CROWN_CHECK_MPI(MPI_Allreduce(&made, &everywhere, 1, MPI_INT, MPI_MIN, world));
    if (!everywhere && made) {
      MPI_Win_unlock_all(window_);
      MPI_Win_free(&window_);
    }
    if (!everywhere) window_ = MPI_WIN_NULL;
    hasWindow_ = everywhere != 0;
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
    // Built with CUDA support; whether the library loaded now has it is
    // asked at run time.
    cudaAware_ = MPIX_Query_cuda_support() == 1;
#endif
    if (wanted && !everywhere) {
      // One rank alone (a debugging run, `mpirun -n 1`) has no peer for
      // Open MPI's one-sided transports to reach, so its window always
      // fails: expected, not worth a warning on every start.
      log::get().log(size == 1 ? spdlog::level::info : spdlog::level::warn,
                     "RDMA: no MPI window ({}); RDMA buffers fall back to crown's own fabric",
                     why.empty() ? "another rank could not make one" : why);
    }
  });
}

void MpiService::closeWindow() {
  // On the service thread, in finalize, while every rank is there
  // (MPI_Win_free is collective).
  if (window_ == MPI_WIN_NULL) return;
  bool peersLost = false;
  {
    std::lock_guard lock(mutex_);
    peersLost = !lost_.empty();
  }
  if (peersLost) {
    // MPI_Win_free is collective and MPI_Win_unlock_all waits for every
    // transfer, those to a lost rank too: either would hang here. The window
    // goes with the process (an adopted MPI's owner finalises without it).
    log::get().info("MPI service: a rank was lost; the RDMA window is left to the process's end");
    attachedBases_.clear();
    attached_ = 0;
    hasWindow_ = false;
    return;
  }
  for (void* base : attachedBases_) MPI_Win_detach(window_, base);
  attachedBases_.clear();
  attached_ = 0;
  try {
    CROWN_CHECK_MPI(MPI_Win_unlock_all(window_));
    CROWN_CHECK_MPI(MPI_Win_free(&window_));
  } catch (const std::exception& e) {
    log::get().warn("MPI service: closing the RDMA window: {}", e.what());
  }
  window_ = MPI_WIN_NULL;
  hasWindow_ = false;
}

std::uint64_t MpiService::windowAttach(void* base, std::size_t bytes) {
  if (!hasWindow_) throw Error("windowAttach: this world has no MPI window");
  std::uint64_t address = 0;
  call([&] {
    CROWN_CHECK_MPI(MPI_Win_attach(window_, base, static_cast<MPI_Aint>(bytes)));
    MPI_Aint where = 0;
    CROWN_CHECK_MPI(MPI_Get_address(base, &where));
    address = static_cast<std::uint64_t>(where);
    attachedBases_.insert(base);
    ++attached_;
  });
  wake_.notify_all();  // the loop starts keeping MPI progressing (see loop())
  return address;
}

void MpiService::windowDetach(void* base) {
  if (!hasWindow_) return;
  call([&] {
    if (attachedBases_.erase(base) == 0) return;  // closed with the window already
    --attached_;
    CROWN_CHECK_MPI(MPI_Win_detach(window_, base));
  });
}

Future<void> MpiService::windowGet(Rank owner, std::uint64_t address, void* dst, std::size_t bytes,
                                   std::shared_ptr<const std::atomic<bool>> stop) {
  return transfer("MPI_Rget from rank " + std::to_string(owner), owner, address,
                  static_cast<char*>(dst), bytes, false, std::move(stop));
}

Future<void> MpiService::windowPut(Rank owner, std::uint64_t address, const void* src,
                                   std::size_t bytes,
                                   std::shared_ptr<const std::atomic<bool>> stop) {
  return transfer("MPI_Rput to rank " + std::to_string(owner), owner, address,
                  const_cast<char*>(static_cast<const char*>(src)), bytes, true, std::move(stop));
}

Future<void> MpiService::transfer(std::string what, Rank owner, std::uint64_t address, char* local,
                                  std::size_t bytes, bool put,
                                  std::shared_ptr<const std::atomic<bool>> stop) {
  if (!hasWindow_) {
    return Future<void>::failed(std::make_exception_ptr(Error(what + ": no MPI window")));
  }
  // The transfer's state, the service thread's alone once started.
  struct Transfer {
    std::size_t posted = 0;  // bytes posted so far
    std::vector<MPI_Request> requests;
  };
  // Counts the transfer as active for as long as the loop holds its poll
  // (until it finishes, fails or is abandoned with its peer).
  struct Active {
    MpiService& service;
    explicit Active(MpiService& s) : service(s) { ++service.transfersActive_; }
    ~Active() {  // on the service thread: the loop drops the poll there
      --service.transfersActive_;
      service.lastTransferEnd_ = Clock::now();
    }
  };
  // A peer on this host is read with CMA (see sameHostPeerGone).
  int ownerPid = 0;
  std::string ownerHost;
  {
    std::lock_guard lock(mutex_);
    Rank me = comms_.empty() ? 0 : comms_[0].rank;
    if (owner < hosts_.size() && me < hosts_.size() && hosts_[owner] == hosts_[me] &&
        owner < pids_.size()) {
      ownerPid = pids_[owner];
    }
    if (owner < hosts_.size()) ownerHost = hosts_[owner];
  }
  auto start = [this, what, owner, ownerPid, ownerHost, address, local, bytes, put,
                stop]() -> Poll {
    auto t = std::make_shared<Transfer>();
    auto active = std::make_shared<Active>(*this);
    MPI_Win win = window_;
    CROWN_CHECK(win != MPI_WIN_NULL, what + ": the MPI window is closed");
    // Keeps up to kChunksInFlight chunks posted; true when all have completed.
    return [=, chunk = chunkBytes()]() -> bool {
      (void)active;
      // Drop the requests that completed (MPI_Test frees them).
      for (auto it = t->requests.begin(); it != t->requests.end();) {
        int done = 0;
        MPI_Status status;
        int code = MPI_Test(&*it, &done, &status);
        if (code != MPI_SUCCESS) std::rethrow_exception(CROWN_MPI_ERROR(code, what.c_str()));
        it = done ? t->requests.erase(it) : it + 1;
      }
      bool stopped = stop && stop->load(std::memory_order_relaxed);
      while (!stopped && t->posted < bytes && t->requests.size() < kChunksInFlight) {
        if (ownerPid != 0 && sameHostPeerGone(ownerPid, address + t->posted)) {
          // Lost, though crown's link may not have said so yet: no MPI call
          // to it (DLV-1: the transfer fails, the service serves on).
          throw ProcessLost(owner, ownerHost, "its process is gone (seen before an RDMA chunk)");
        }
        std::size_t n = std::min(chunk, bytes - t->posted);
        MPI_Aint disp = static_cast<MPI_Aint>(address + t->posted);
        MPI_Request request = MPI_REQUEST_NULL;
        int count = static_cast<int>(n);
        int code = put ? MPI_Rput(local + t->posted, count, MPI_BYTE, static_cast<int>(owner), disp,
                                  count, MPI_BYTE, win, &request)
                       : MPI_Rget(local + t->posted, count, MPI_BYTE, static_cast<int>(owner), disp,
                                  count, MPI_BYTE, win, &request);
        if (code != MPI_SUCCESS) {
          // No MPI_Wait here (the owner may be gone, and the loop must not
          // block): what is in flight is left to MPI.
          for (auto& r : t->requests) MPI_Request_free(&r);
          std::rethrow_exception(CROWN_MPI_ERROR(code, what.c_str()));
        }
        t->requests.push_back(request);
        t->posted += n;
      }
      if (!t->requests.empty() || (!stopped && t->posted < bytes)) return false;
      // An MPI_Rput's request says only that `local` may be reused; the
      // flush says the bytes are at the target (short: every chunk has left).
      if (put) {
        int code = MPI_Win_flush(static_cast<int>(owner), win);
        if (code != MPI_SUCCESS) std::rethrow_exception(CROWN_MPI_ERROR(code, what.c_str()));
      }
      return true;
    };
  };
  return submit(std::move(what), std::move(start), {owner});
}

}  // namespace crown::detail
