// The controller: what rank 0 is crowned with. crown::run() bootstraps every
// rank; on rank 0 it calls the user's function with the Controller while the
// other ranks serve their actors; when the function returns, every rank
// exits 0, and when it throws, the job exits non-zero (SHT-1).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "crown/actor/spawn.h"
#include "crown/bootstrap/runtime.h"
#include "crown/mesh/proc_mesh.h"
#include "crown/mesh/world_shape.h"

namespace crown {

class Controller {
 public:
  explicit Controller(Runtime& runtime) : runtime_(runtime) {}

  Rank size() const { return runtime_.topology().size; }
  const Topology& topology() const { return runtime_.topology(); }
  Runtime& runtime() { return runtime_; }

  /// Every rank of the launch as {"hosts": H, "procs": P}. Throws
  /// ConfigError when the hosts hold different numbers of ranks (or hold
  /// them unevenly): then use worldFlat().
  ProcMesh world() const {
    return ProcMesh(mesh::hostsProcsShape(topology().hostIndexOf, topology().hostNames));
  }
  /// Every rank of the launch as {"ranks": N}; always possible.
  ProcMesh worldFlat() const { return ProcMesh(mesh::Shape{{"ranks", size()}}); }

  /// Spawns A(args...) on `rank` and waits until it is constructed. A
  /// constructor that throws makes this throw crown::RemoteError.
  template <class A, class... Args>
  ActorRef<A> spawn(Rank rank, const std::string& name, Args&&... args) {
    return spawnOn<A>(rank, name, std::forward<Args>(args)...).get();
  }

  /// Spawns A(args...) on every rank at once, indexed by rank. Throws
  /// crown::Error naming every rank whose spawn failed, and why.
  template <class A, class... Args>
  std::vector<ActorRef<A>> spawnOnEveryRank(const std::string& name, const Args&... args) {
    std::vector<Future<ActorRef<A>>> futures;
    for (Rank rank = 0; rank < size(); ++rank) futures.push_back(spawnOn<A>(rank, name, args...));
    std::vector<ActorRef<A>> refs;
    std::string failures;
    for (Rank rank = 0; rank < size(); ++rank) {
      try {
        refs.push_back(futures[rank].get());
      } catch (const std::exception& e) {
        failures += "\n  rank " + std::to_string(rank) + ": " + e.what();
      }
    }
    if (!failures.empty()) throw Error("spawn of '" + name + "' failed on:" + failures);
    return refs;
  }

 private:
  Runtime& runtime_;
};

/// Bootstraps, runs `main` on rank 0 as the controller, serves on the other
/// ranks, and returns the process's exit code: return it from main().
int run(int argc, char** argv, const std::function<void(Controller&)>& main);

/// The two halves of run() after Runtime::init, for front ends that drive
/// the controller themselves (Python): a worker serves until the controller
/// says Shutdown (or is lost) and returns its exit code; the controller tells
/// every live worker to exit with `code` and finishes.
int serveUntilShutdown(Runtime& runtime);
void finishController(Runtime& runtime, int code);

}  // namespace crown
