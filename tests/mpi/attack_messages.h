// The message an intruder tries to slip to an actor, shared by the auth test
// job and the attacker program.
#pragma once

#include <crown/wire/serialize.h>

namespace crown::testing {

struct Poke {
  int value = 0;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& value;
  }
};

}  // namespace crown::testing

CROWN_MESSAGE(crown::testing::Poke, "crown.testing.Poke");
