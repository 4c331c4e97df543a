// SHT-1: a controller whose function throws makes the job exit non-zero,
// with the message printed once.
#include <crown/crown.h>

int main(int argc, char** argv) {
  return crown::run(argc, argv, [](crown::Controller&) {
    throw std::runtime_error("the training loop diverged");
  });
}
