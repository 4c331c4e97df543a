// SEC-1 under a real job: a separate program connects to a rank's port and
// sends garbage, then a forged handshake; every attempt is rejected, nothing
// reaches an actor, and the job keeps serving and finishes normally.
#include <cstdlib>

#include "attack_messages.h"
#include "support/mpi_harness.h"
#include "test_actors.h"

namespace crown::testing {
namespace {

using namespace std::chrono_literals;

struct PokeCount {
  template <class Archive>
  void serialize(Archive&, unsigned) {}
};

class Target : public Actor {
 public:
  Target() {
    handle<Poke>([this](const Poke& poke) { pokes_ += poke.value; });
    handle<PokeCount>([this](const PokeCount&) { return pokes_; });
    handle<WhoAreYou>([](const WhoAreYou&) {
      std::vector<std::string> targets;  // "tcp:ip:port", then "unix:name" (transport.h)
      for (const auto& [backend, address] : Runtime::current().addresses()) {
        if (backend == "tcp") targets.insert(targets.begin(), "tcp:" + address);
        if (backend == "unix") targets.push_back("unix:" + address.substr(0, address.find('\n')));
      }
      return targets;
    });
  }

 private:
  int pokes_ = 0;
};

TEST(AuthTest, IntrudersAreRejectedAndNothingIsDelivered) {
  Controller& ctl = *controller();
  auto target = ctl.spawn<Target>(1, "target");
  auto endpoints = target.call<std::vector<std::string>>(WhoAreYou{}).get(10s);
  ASSERT_EQ(endpoints.size(), 2u);
  ASSERT_NE(endpoints[1], "unix:") << "rank 1 has no same-host socket";
  for (const auto& endpoint : endpoints) {  // over TCP, then over the same-host socket
    std::string command =
        std::string(CROWN_ATTACKER) + " " + endpoint + " 1 " + std::to_string(target.id().local);
    std::cout << "running " << command << std::endl;
    EXPECT_EQ(std::system(command.c_str()), 0);
  }

  target.send(Poke{1});                                  // the legitimate path still works
  EXPECT_EQ(target.call<int>(PokeCount{}).get(10s), 1);  // and only it delivered
}

}  // namespace
}  // namespace crown::testing

int main(int argc, char** argv) { return crown::testing::runTestsOnController(argc, argv); }
