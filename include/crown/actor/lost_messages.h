// LostMessages: what a member reports to a sender's rank when it gave up
// waiting for some of that sender's messages (an ORD-1 gap given up after
// CROWN_ORDER_GAP_TIMEOUT_MS, DLV-1): in practice one-way broadcasts lost
// with a cast hop that died, beyond what the hop's parent could resend
// (CROWN_CAST_RESEND_WINDOW). The sender's rank logs it at error level and
// hands it to Proc::setLostMessagesHook's hook (the seam of supervision).
// A plain value; any thread.
#pragma once

#include <cstdint>
#include <string>

#include "crown/wire/envelope.h"
#include "crown/wire/serialize.h"

namespace crown {

struct LostMessages {
  wire::ActorId sender;      ///< whose messages were lost
  wire::ActorId dest;        ///< the actor that never got them (on the reporting rank)
  std::string destName;      ///< its name
  std::uint64_t count = 0;   ///< how many sequence numbers were given up
  std::uint64_t first = 0;   ///< the first and last of them (count <= last - first + 1)
  std::uint64_t last = 0;

  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& sender& dest& destName& count& first& last;
  }
};

/// "3 messages (numbers 4..6) from actor 0:0 to 'worker' (actor 5:17) were lost ...".
std::string toString(const LostMessages& lost);

}  // namespace crown

CROWN_MESSAGE(crown::LostMessages, "crown::LostMessages");
