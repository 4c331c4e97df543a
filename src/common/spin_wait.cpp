#include "crown/common/spin_wait.h"

#include "crown/common/env.h"

namespace crown::detail {

std::chrono::microseconds spinBudget() {
  return std::chrono::microseconds(env::integer("CROWN_SPIN_US", 50, 0, 1000000));
}

}  // namespace crown::detail
