// ping_pong: the smallest crown program. Run it under any SPMD launcher:
//   mpirun -n 4 ./ping_pong
// Rank 0 becomes the controller; it spawns an Echo actor on every rank,
// calls each one, and catches a remote exception.
#include <crown/crown.h>

#include <iostream>
#include <stdexcept>

struct Ping {
  int n = 0;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& n;
  }
};

struct Fail {
  std::string why;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& why;
  }
};

class Echo : public crown::Actor {
 public:
  explicit Echo(int offset) {
    handle<Ping>(
        [this, offset](const Ping& ping) { return ping.n + offset + static_cast<int>(rank()); });
    handle<Fail>([](const Fail& fail) -> int { throw std::invalid_argument(fail.why); });
  }
};

int main(int argc, char** argv) {
  return crown::run(argc, argv, [](crown::Controller& ctl) {
    auto echoes = ctl.spawnOnEveryRank<Echo>("echo", 1);
    for (auto& echo : echoes) {
      int reply = echo.call<int>(Ping{41}).get();
      std::cout << "rank " << echo.rank() << " answered " << reply << std::endl;
    }
    try {
      echoes.back().call<int>(Fail{"no such thing"}).get();
    } catch (const crown::RemoteError& e) {
      std::cout << "caught remote exception from rank " << e.rank() << ": " << e.remoteType()
                << ": " << e.remoteMessage() << std::endl;
    }
    std::cout << "ping_pong done on " << ctl.size() << " ranks" << std::endl;
  });
}
