// Runs GoogleTest inside the controller of a real multi-rank crown job:
// every rank starts the program under mpirun, rank 0 runs the tests with the
// Controller, the other ranks serve. Prints "crown-test: PASS" only when
// every test passed, so a runner can check it even where mpirun's own exit
// code cannot be trusted (--enable-recovery).
#pragma once

#include <gtest/gtest.h>

#include <crown/crown.h>

#include <iostream>

namespace crown::testing {

inline Controller*& controller() {
  static Controller* current = nullptr;
  return current;
}

inline int runTestsOnController(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  return crown::run(argc, argv, [](Controller& ctl) {
    controller() = &ctl;
    if (RUN_ALL_TESTS() != 0) throw Error("tests failed on the controller");
    std::cout << "crown-test: PASS" << std::endl;
  });
}

}  // namespace crown::testing
