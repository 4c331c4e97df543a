// Payload serialization: Boost.Serialization binary archives, and the stable
// names messages are registered under. Any thread.
//
// A message is any default-constructible type with a Boost.Serialization
// `serialize`. Its name defaults to its demangled C++ type name, which every
// rank of one SPMD program agrees on; CROWN_MESSAGE(Type, "name") fixes it
// explicitly (do this for types shared between different programs).
#pragma once

#include <boost/archive/binary_iarchive.hpp>
#include <boost/archive/binary_oarchive.hpp>
#include <boost/serialization/map.hpp>
#include <boost/serialization/string.hpp>
#include <boost/serialization/utility.hpp>
#include <boost/serialization/vector.hpp>
#include <cstddef>
#include <streambuf>
#include <string>
#include <tuple>
#include <typeinfo>

#include "crown/common/error.h"

namespace crown::wire {

using Bytes = std::string;

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

namespace detail {
// Appends to a std::string without the copy an ostringstream makes.
class StringSink : public std::streambuf {
 public:
  explicit StringSink(std::string& out) : out_(out) {}

 protected:
  int_type overflow(int_type c) override;
  std::streamsize xsputn(const char* s, std::streamsize n) override;

 private:
  std::string& out_;
};

// Reads a byte range in place.
class MemorySource : public std::streambuf {
 public:
  MemorySource(const char* data, std::size_t size);
};

constexpr unsigned kArchiveFlags = boost::archive::no_header | boost::archive::no_codecvt;
}  // namespace detail

template <class T>
Bytes toBytes(const T& value) {
  Bytes out;
  detail::StringSink sink(out);
  {
    boost::archive::binary_oarchive archive(sink, detail::kArchiveFlags);
    archive << value;
  }
  return out;
}

/// Throws ProtocolError when the bytes do not hold a T.
template <class T>
T fromBytes(const char* data, std::size_t size) {
  detail::MemorySource source(data, size);
  T value{};
  try {
    boost::archive::binary_iarchive archive(source, detail::kArchiveFlags);
    archive >> value;
  } catch (const std::exception& e) {
    throw ProtocolError("cannot decode a " + messageName<T>() + " from " +
                        std::to_string(size) + " bytes: " + e.what());
  }
  return value;
}

template <class T>
T fromBytes(const Bytes& bytes) {
  return fromBytes<T>(bytes.data(), bytes.size());
}

}  // namespace crown::wire

/// Registers message type T under a fixed name. Use at namespace scope.
#define CROWN_MESSAGE(T, name)                           \
  template <>                                            \
  struct crown::wire::MessageName<T> {                   \
    static std::string value() { return name; }          \
  }

namespace crown::wire {

/// Several values in one archive, in order (constructor arguments of a spawn).
template <class... Ts>
Bytes packValues(const Ts&... values) {
  Bytes out;
  detail::StringSink sink(out);
  {
    boost::archive::binary_oarchive archive(sink, detail::kArchiveFlags);
    ((archive << values), ...);
  }
  return out;
}

/// Throws ProtocolError when the bytes do not hold exactly these types.
template <class... Ts>
std::tuple<Ts...> unpackValues(const Bytes& bytes) {
  detail::MemorySource source(bytes.data(), bytes.size());
  std::tuple<Ts...> values;
  try {
    boost::archive::binary_iarchive archive(source, detail::kArchiveFlags);
    std::apply([&archive](auto&... value) { ((archive >> value), ...); }, values);
  } catch (const std::exception& e) {
    throw ProtocolError(std::string("cannot decode arguments: ") + e.what());
  }
  return values;
}

}  // namespace crown::wire
