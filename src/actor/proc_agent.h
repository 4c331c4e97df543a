// The proc agent: the actor at local id 1 of every Proc, through which the
// controller spawns and stops actors.
#pragma once

#include "crown/actor/actor.h"

namespace crown {
class Proc;
}

namespace crown::detail {

class ProcAgent : public Actor {
 public:
  explicit ProcAgent(Proc& proc);
};

}  // namespace crown::detail
