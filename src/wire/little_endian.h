// Fixed-width little-endian loads and stores for the wire format. Byte by
// byte so the format is the same on any host; compilers fold these into
// plain moves on little-endian machines.
#pragma once

#include <cstddef>
#include <type_traits>

namespace crown::wire {

template <class T>
void storeLe(std::byte* out, T value) {
  static_assert(std::is_unsigned_v<T>);
  for (std::size_t i = 0; i < sizeof(T); ++i) out[i] = static_cast<std::byte>(value >> (8 * i));
}

template <class T>
T loadLe(const std::byte* in) {
  static_assert(std::is_unsigned_v<T>);
  T value = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i)
    value |= static_cast<T>(static_cast<T>(in[i]) << (8 * i));
  return value;
}

}  // namespace crown::wire
