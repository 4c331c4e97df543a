// Messages and actors shared by the multi-rank tests.
#pragma once

#include <crown/crown.h>
#include <unistd.h>

#include <stdexcept>
#include <thread>

namespace crown::testing {

struct WhoAreYou {
  template <class Archive>
  void serialize(Archive&, unsigned) {}
};
struct Identity {
  Rank rank = 0;
  int pid = 0;
  std::string host;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& rank& pid& host;
  }
};
struct Record {
  int sender = 0;
  int value = 0;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& sender& value;
  }
};
struct History {
  template <class Archive>
  void serialize(Archive&, unsigned) {}
};
struct Raise {
  std::string what;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& what;
  }
};
struct Nap {
  int ms = 0;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& ms;
  }
};
struct AskPeer {
  ActorRef<> peer;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& peer;
  }
};

struct Blast {
  ActorRef<> target;
  int count = 0;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& target& count;
  }
};

/// Answers who it is, records (sender, value) pairs in arrival order, raises on request.
class Worker : public Actor {
 public:
  explicit Worker(std::string tag) : tag_(std::move(tag)) {
    handle<WhoAreYou>([this](const WhoAreYou&) {
      auto& runtime = Runtime::current();
      return Identity{rank(), static_cast<int>(::getpid()), runtime.topology().hostNames[rank()]};
    });
    handle<Record>(
        [this](const Record& record) { history_.emplace_back(record.sender, record.value); });
    handle<History>([this](const History&) { return history_; });
    handle<Raise>([](const Raise& raise) -> int { throw std::logic_error(raise.what); });
    handle<Nap>([this](const Nap& nap) {
      std::this_thread::sleep_for(std::chrono::milliseconds(nap.ms));
      return rank();
    });
    handle<Blast>([this](const Blast& blast) {
      for (int i = 0; i < blast.count; ++i) blast.target.send(Record{static_cast<int>(rank()), i});
      // ORD-1: this request reaches the target after every record above, so
      // when it returns they have all been handled there.
      blast.target.call<std::vector<std::pair<int, int>>>(History{}).get();
    });
    handle<AskPeer>(
        [](const AskPeer& ask) { return ask.peer.call<Identity>(WhoAreYou{}).get().rank; });
  }

 private:
  std::string tag_;
  std::vector<std::pair<int, int>> history_;
};

}  // namespace crown::testing
