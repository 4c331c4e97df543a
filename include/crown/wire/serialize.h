// Payload serialization: Boost.Serialization through crown's binary archives
// (wire/archive.h), and the stable names messages are registered under.
// Any thread.
//
// A message is any default-constructible type with a Boost.Serialization
// `serialize`. Its name defaults to its demangled C++ type name, which every
// rank of one SPMD program agrees on; CROWN_MESSAGE(Type, "name") fixes it
// explicitly (do this for types shared between different programs).
#pragma once

#include <boost/serialization/map.hpp>
#include <boost/serialization/string.hpp>
#include <boost/serialization/utility.hpp>
#include <boost/serialization/vector.hpp>
#include <cstddef>
#include <string>
#include <tuple>
#include <typeinfo>

#include "crown/common/error.h"
#include "crown/wire/archive.h"
#include "crown/wire/payload.h"  // Bytes

namespace crown::wire {

std::string demangle(const char* mangled);

template <class T>
struct MessageName {
  static std::string value() { return demangle(typeid(T).name()); }
};

/// The stable name of message type T.
template <class T>
const std::string& messageName() {
  static const std::string name = MessageName<T>::value();
  return name;
}

/// What toBytes reserves before encoding: most messages (a request, a
/// cast's entry for one member) fit, so their buffer is allocated once
/// instead of growing through 30, 60, 120... bytes.
inline constexpr std::size_t kEncodeReserveBytes = 256;

/// reserveBytes: room for the encoding made before it starts; a caller who
/// knows a large message's size passes it, so its buffer does not grow by
/// doubling.
template <class T>
Bytes toBytes(const T& value, std::size_t reserveBytes = kEncodeReserveBytes) {
  Bytes out;
  out.reserve(reserveBytes);
  OArchive archive(out);
  archive << value;
  countCopied(out.size());
  return out;
}

/// Throws ProtocolError when the bytes do not hold a T.
template <class T>
T fromBytes(const char* data, std::size_t size) {
  T value{};
  countCopied(size);
  try {
    IArchive archive(data, size);
    archive >> value;
  } catch (const std::exception& e) {
    throw ProtocolError("cannot decode a " + messageName<T>() + " from " + std::to_string(size) +
                        " bytes: " + e.what());
  }
  return value;
}

template <class T>
T fromBytes(const Bytes& bytes) {
  return fromBytes<T>(bytes.data(), bytes.size());
}

}  // namespace crown::wire

/// Registers message type T under a fixed name. Use at namespace scope.
#define CROWN_MESSAGE(T, name)                  \
  template <>                                   \
  struct crown::wire::MessageName<T> {          \
    static std::string value() { return name; } \
  }

namespace crown::wire {

/// Several values in one archive, in order (constructor arguments of a spawn).
template <class... Ts>
Bytes packValues(const Ts&... values) {
  Bytes out;
  OArchive archive(out);
  ((archive << values), ...);
  return out;
}

/// Throws ProtocolError when the bytes do not hold exactly these types.
template <class... Ts>
std::tuple<Ts...> unpackValues(const Bytes& bytes) {
  std::tuple<Ts...> values;
  try {
    IArchive archive(bytes.data(), bytes.size());
    std::apply([&archive](auto&... value) { ((archive >> value), ...); }, values);
  } catch (const std::exception& e) {
    throw ProtocolError(std::string("cannot decode arguments: ") + e.what());
  }
  return values;
}

}  // namespace crown::wire
