// An actor program built with find_package(Crown): casts to every rank.
#include <crown/crown.h>

#include <iostream>

struct Square {
  int n = 0;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& n;
  }
};

class Squarer : public crown::Actor {
 public:
  Squarer() {
    handle<Square>([this](const Square& s) { return s.n * s.n + static_cast<int>(rank()); });
  }
};

int main(int argc, char** argv) {
  return crown::run(argc, argv, [](crown::Controller& ctl) {
    auto squarers = ctl.worldFlat().spawn<Squarer>("squarer");
    int sum = squarers.reduce<int>(Square{3}, crown::mesh::Sum{}).get();
    std::cout << "installed crown: sum " << sum << " on " << ctl.size() << " ranks" << std::endl;
  });
}
