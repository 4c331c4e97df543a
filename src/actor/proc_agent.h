// The proc agent: the actor at local id 1 of every Proc, through which the
// controller spawns and stops actors, and members report messages from this
// rank they gave up waiting for (LostMessages, to `onLost`).
#pragma once

#include <functional>

#include "crown/actor/actor.h"

namespace crown {
class Proc;
struct LostMessages;
}

namespace crown::detail {

class ProcAgent : public Actor {
 public:
  ProcAgent(Proc& proc, std::function<void(const LostMessages&)> onLost);
};

}  // namespace crown::detail
