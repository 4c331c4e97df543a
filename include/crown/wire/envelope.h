// The envelope: who sends what to whom. Encoded by hand (fixed-width
// little-endian fields plus one length-prefixed type name) because it is on
// every message's path; decoding validates every length against the buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "crown/common/error.h"

namespace crown::wire {

/// An actor's address: the rank of its process and its id inside that process.
struct ActorId {
  Rank rank = 0;
  std::uint64_t local = 0;

  friend bool operator==(const ActorId&, const ActorId&) = default;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& rank& local;
  }
};

std::string toString(const ActorId& id);

enum class MessageKind : std::uint8_t {
  kOneWay = 0,   ///< no reply expected
  kRequest = 1,  ///< a reply or a failure goes back to sender with requestId
  kReply = 2,    ///< payload is the handler's result
  kFailure = 3,  ///< payload is a RemoteFailure
  kHeartbeat = 4,  ///< a link's sign of life; the transport consumes it
  /// A link's last word before it closes, consumed by the transport: `type`
  /// says which (kNoticeBadFrame, kNoticeDeparting), the payload says why.
  kNotice = 5,
  /// Port frames (actor/port.h): `dest` is the port's owner, `requestId` the
  /// port's id, `sender.local` the sending handle (FLO-1's sender, with
  /// kPortFlowBit), `seq` its count for flow control (0: not counted).
  kPortValue = 6,  ///< a value sent to a port
  kPortError = 7,  ///< an error in place of a value: payload is a RemoteFailure
  kPortDrop = 8,   ///< the holder dropped the port or died: payload is a RemoteFailure
  /// A holder on the sender's rank took (payload 1) or let go of (0) a port
  /// its owner does not watch that rank for: the owner watches it meanwhile.
  kPortWatch = 9,
};

/// The far side refused a frame from this side and closes the link: the
/// peer lives on (a protocol error is not a lost process).
inline constexpr std::string_view kNoticeBadFrame = "bad-frame";
/// The far side's process is dying (an exit or a fatal signal) and says how.
inline constexpr std::string_view kNoticeDeparting = "departing";

struct Envelope {
  MessageKind kind = MessageKind::kOneWay;
  ActorId sender;
  ActorId dest;
  std::uint64_t requestId = 0;
  std::string type;  ///< registered message type name
  /// ORD-1: the position of this message among those from sender to dest
  /// (1, 2, ...), so the destination can restore send order when a cast and
  /// a direct send take different paths. 0: not ordered (replies, agents).
  std::uint64_t seq = 0;
};

std::size_t encodedSize(const Envelope& envelope);
/// Writes exactly encodedSize(envelope) bytes.
void encodeEnvelope(const Envelope& envelope, std::byte* out);
/// Throws ProtocolError when the bytes are not exactly one valid envelope.
Envelope decodeEnvelope(const std::byte* in, std::size_t size);

}  // namespace crown::wire
