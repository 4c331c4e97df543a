// The 64-byte message every bench sends, the size the anchors send too:
// make_array writes the raw bytes (no count); the first eight carry a
// sequence number where the receiver checks order.
#pragma once

#include <array>
#include <boost/serialization/array_wrapper.hpp>
#include <cstdint>
#include <cstring>

namespace crown::bench {

constexpr std::size_t kPayloadBytes = 64;

struct Payload64 {
  std::array<char, kPayloadBytes> data{};

  explicit Payload64(std::uint64_t seq = 0) { std::memcpy(data.data(), &seq, sizeof seq); }
  std::uint64_t seq() const {
    std::uint64_t seq = 0;
    std::memcpy(&seq, data.data(), sizeof seq);
    return seq;
  }
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& boost::serialization::make_array(data.data(), data.size());
  }
};

}  // namespace crown::bench
