#include "crown/wire/serialize.h"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>

namespace crown::wire {

std::string demangle(const char* mangled) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(abi::__cxa_demangle(mangled, nullptr, nullptr, &status),
                                              std::free);
  return status == 0 && name ? std::string(name.get()) : std::string(mangled);
}

namespace detail {

StringSink::int_type StringSink::overflow(int_type c) {
  if (!traits_type::eq_int_type(c, traits_type::eof())) out_.push_back(traits_type::to_char_type(c));
  return traits_type::not_eof(c);
}

std::streamsize StringSink::xsputn(const char* s, std::streamsize n) {
  out_.append(s, static_cast<std::size_t>(n));
  return n;
}

MemorySource::MemorySource(const char* data, std::size_t size) {
  auto* begin = const_cast<char*>(data);  // get area is only read
  setg(begin, begin, begin + size);
}

}  // namespace detail
}  // namespace crown::wire
