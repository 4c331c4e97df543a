// Runs on 3 simulated hosts (network namespaces, 2 ranks each; see
// netns_test.sh). The world mesh must be {hosts=3, procs=2}; a cast reaches
// every rank; then the test script cuts host 2's link (no reset is sent) and
// the controller must see that host's ranks lost within a bounded time.
#include <crown/crown.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <thread>

struct Where {
  template <class Archive>
  void serialize(Archive&, unsigned) {}
};

class Host : public crown::Actor {
 public:
  Host() {
    handle<Where>([](const Where&) {
      auto& topology = crown::Runtime::current().topology();
      return topology.hostNames[topology.rank];
    });
  }
};

int main(int argc, char** argv) {
  using namespace std::chrono;
  std::string signals = argc > 1 ? argv[1] : "/tmp";
  return crown::run(argc, argv, [&](crown::Controller& ctl) {
    crown::ProcMesh world = ctl.world();
    std::cout << "world " << world.shape() << std::endl;
    CROWN_CHECK(world.size("hosts") == 3 && world.size("procs") == 2, "expected {hosts=3, procs=2}");
    auto hosts = world.spawn<Host>("host");
    auto names = hosts.call<std::string>(Where{}).get(seconds(30)).values();
    std::set<std::string> distinct(names.begin(), names.end());
    std::cout << "cast reached " << names.size() << " ranks on " << distinct.size() << " hosts"
              << std::endl;
    CROWN_CHECK(names.size() == 6 && distinct.size() == 3, "the cast missed ranks or hosts");

    // Ask the script to cut host 2's link, and wait until it has.
    std::filesystem::path cut = std::filesystem::path(signals) / "cut-now";
    std::filesystem::path done = std::filesystem::path(signals) / "cut-done";
    { std::ofstream(cut.string()) << "cut\n"; }
    while (!std::filesystem::exists(done)) std::this_thread::sleep_for(milliseconds(20));
    auto start = steady_clock::now();
    auto lastHost = world.at("hosts", 2);
    std::set<std::size_t> lost;
    while (lost.size() < 2 && steady_clock::now() - start < seconds(60)) {
      auto replies = hosts.call<std::string>(Where{}).get(seconds(60));
      lost.clear();
      for (const auto& failure : replies.failures()) lost.insert(failure.rank);
      if (lost.size() < 2) std::this_thread::sleep_for(milliseconds(100));
    }
    auto elapsed = duration_cast<milliseconds>(steady_clock::now() - start).count();
    auto lastRanks = lastHost.shape().ranks();
    std::set<std::size_t> expected(lastRanks.begin(), lastRanks.end());
    std::cout << "host 2's ranks lost after " << elapsed << " ms:";
    for (auto rank : lost) std::cout << " " << rank;
    std::cout << std::endl;
    CROWN_CHECK(lost == expected, "the lost ranks are not host 2's");
    std::cout << "netns-test: PASS" << std::endl;
  });
}
