// crown's Boost.Serialization archives: the binary format of Boost's
// binary_oarchive (native byte order, no header), written straight into a
// std::string and read straight from memory. Boost's own binary archives
// build a std::locale for every archive, which on small messages costs more
// than the message itself; these build none. Any serialize() written for
// Boost archives works with them, but for two things crown never uses: an
// object of class type is written as its fields alone, with no class
// information (Boost's version and tracking flag, written the first time a
// class appears) and no object tracking (a set insertion for every object),
// so an object saved by value is not known again if a pointer to it is
// saved later (crown saves nothing through pointers), and serialize()
// always gets the class's compile-time version. One archive per message,
// one thread.
#pragma once

#include <boost/archive/basic_binary_iarchive.hpp>
#include <boost/archive/basic_binary_oarchive.hpp>
#include <boost/archive/detail/register_archive.hpp>
#include <boost/serialization/array_wrapper.hpp>
#include <boost/serialization/level.hpp>
#include <boost/serialization/serialization.hpp>
#include <boost/serialization/version.hpp>
#include <boost/serialization/wrapper.hpp>
#include <cstddef>
#include <cstring>
#include <string>
#include <type_traits>

namespace crown::wire {

namespace detail {
/// A class Boost would save with its class information or track: its
/// level is above primitive_type. Boost's own helpers keep their handling:
/// the primitive ones (a collection's size) and the wrappers (a name-value
/// pair around an element).
template <class T, class U = std::remove_const_t<T>>
inline constexpr bool kFieldsAlone =
    std::is_class_v<U> && !boost::serialization::is_wrapper<U>::type::value &&
    boost::serialization::implementation_level<U>::value > boost::serialization::primitive_type;
}  // namespace detail

class OArchive : public boost::archive::basic_binary_oarchive<OArchive> {
 public:
  explicit OArchive(std::string& out)
      : boost::archive::basic_binary_oarchive<OArchive>(boost::archive::no_header), out_(out) {}

  // Every object of class type: its fields alone (see the top of this file).
  template <class T>
  void save_override(const T& t) {
    if constexpr (detail::kFieldsAlone<T>) {
      boost::serialization::serialize_adl(*this, const_cast<T&>(t),
                                          boost::serialization::version<T>::value);
    } else {
      boost::archive::basic_binary_oarchive<OArchive>::save_override(t);
    }
  }

  // The primitive interface that basic_binary_oarchive expects.
  template <class T>
  void save(const T& t) {
    save_binary(&t, sizeof(T));
  }
  void save(const std::string& s) {
    std::size_t length = s.size();
    save(length);
    save_binary(s.data(), length);
  }
  void save(const std::wstring& s) {
    std::size_t length = s.size();
    save(length);
    save_binary(s.data(), length * sizeof(wchar_t));
  }
  void save(const char* s) { save(std::string(s)); }
  void save_binary(const void* address, std::size_t count) {
    out_.append(static_cast<const char*>(address), count);
  }
  struct use_array_optimization {
    template <class T>
    struct apply : std::is_arithmetic<T> {};
  };
  template <class ValueType>
  void save_array(const boost::serialization::array_wrapper<ValueType>& a, unsigned int) {
    save_binary(a.address(), a.count() * sizeof(ValueType));
  }

 private:
  std::string& out_;
};

/// Throws boost::archive::archive_exception when the bytes run out or are
/// not a value of the type read (a bool other than 0 or 1). A length prefix
/// or element count larger than what is left fails before anything is
/// allocated; so an element that encodes to no bytes at all (an empty
/// struct) cannot be read in a collection longer than the bytes after it.
class IArchive : public boost::archive::basic_binary_iarchive<IArchive> {
 public:
  IArchive(const char* data, std::size_t size)
      : boost::archive::basic_binary_iarchive<IArchive>(boost::archive::no_header),
        at_(data),
        end_(data + size) {}

  // Every object of class type: its fields alone, as OArchive writes them.
  template <class T>
  void load_override(T& t) {
    if constexpr (detail::kFieldsAlone<T>) {
      boost::serialization::serialize_adl(*this, t, boost::serialization::version<T>::value);
    } else {
      boost::archive::basic_binary_iarchive<IArchive>::load_override(t);
    }
  }

  template <class T>
  void load(T& t) {
    load_binary(&t, sizeof(T));
  }
  // Any other byte would be a bool whose every use is undefined behaviour.
  void load(bool& b) {
    unsigned char byte = 0;
    load_binary(&byte, 1);
    if (byte > 1) fail("a bool that is neither 0 nor 1");
    b = byte == 1;
  }
  void load(std::string& s) {
    std::size_t length = 0;
    load(length);
    require(length);
    s.assign(at_, length);
    at_ += length;
  }
  void load(std::wstring& s) {
    std::size_t length = 0;
    load(length);
    std::size_t bytes = require(length, sizeof(wchar_t));
    s.resize(length);
    load_binary(s.data(), bytes);
  }
  void load_binary(void* address, std::size_t count) {
    require(count);
    std::memcpy(address, at_, count);
    at_ += count;
  }
  struct use_array_optimization {
    template <class T>
    struct apply : std::is_arithmetic<T> {};
  };
  template <class ValueType>
  void load_array(boost::serialization::array_wrapper<ValueType>& a, unsigned int) {
    load_binary(a.address(), require(a.count(), sizeof(ValueType)));
  }

  std::size_t remaining() const { return static_cast<std::size_t>(end_ - at_); }

  // Class names of exported (polymorphic) types. Boost defines this in a
  // .ipp that also reads archive headers, which these archives do not have.
  using boost::archive::basic_binary_iarchive<IArchive>::load_override;
  void load_override(boost::archive::class_name_type& name) {
    std::string text;
    load_override(text);
    if (text.size() > BOOST_SERIALIZATION_MAX_KEY_SIZE - 1) {
      throw boost::archive::archive_exception(
          boost::archive::archive_exception::invalid_class_name);
    }
    std::memcpy(name, text.data(), text.size());
    name.t[text.size()] = '\0';
  }
  // Boost's collections reserve or resize to the count they read before
  // reading an element, so a count is checked here: each element takes at
  // least one byte.
  void load_override(boost::serialization::collection_size_type& count) {
    boost::archive::basic_binary_iarchive<IArchive>::load_override(count);
    if (count > remaining()) fail("a collection of more elements than bytes left");
  }

 private:
  [[noreturn]] static void fail(const char* what) {
    throw boost::archive::archive_exception(
        boost::archive::archive_exception::input_stream_error, what);
  }
  void require(std::size_t bytes) const {
    if (bytes > remaining()) fail("the bytes end before the value read");
  }
  // count * elementBytes, once it is known to fit in what is left (so the
  // product cannot overflow).
  std::size_t require(std::size_t count, std::size_t elementBytes) const {
    if (count > remaining() / elementBytes) fail("the bytes end before the value read");
    return count * elementBytes;
  }

  const char* at_;
  const char* end_;
};

}  // namespace crown::wire

BOOST_SERIALIZATION_REGISTER_ARCHIVE(crown::wire::OArchive)
BOOST_SERIALIZATION_REGISTER_ARCHIVE(crown::wire::IArchive)
