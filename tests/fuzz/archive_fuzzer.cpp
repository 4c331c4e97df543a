// fuzz_archive: crown's Boost.Serialization archives (wire/archive.h) as
// wire::fromBytes uses them on every C++ message from a peer. Any bytes
// must decode or fail with ProtocolError: no crash, no UB, no allocation
// beyond what the bytes can hold. What decodes must encode to bytes that
// decode and encode to the same bytes again.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>

#include "crown/wire/serialize.h"
#include "fuzz/archive_types.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/inputs.h"

namespace {

template <class T>
void decode(const std::string& bytes) {
  T value;
  try {
    value = crown::wire::fromBytes<T>(bytes);
  } catch (const crown::ProtocolError&) {
    return;
  }
  crown::wire::Bytes once = crown::wire::toBytes(value);
  crown::wire::Bytes twice = crown::wire::toBytes(crown::wire::fromBytes<T>(once));
  CROWN_FUZZ_CHECK(once == twice);
}

template <std::size_t... I>
void decodeAs(std::size_t type, const std::string& bytes, std::index_sequence<I...>) {
  ((type == I ? decode<std::tuple_element_t<I, crown::fuzz::ArchiveTypes>>(bytes) : void()), ...);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider input(data, size);
  crown::fuzz::ArchiveSettings settings;
  input.ConsumeData(&settings, sizeof settings);
  constexpr std::size_t kTypes = std::tuple_size_v<crown::fuzz::ArchiveTypes>;
  decodeAs(settings.type % kTypes, input.ConsumeRemainingBytesAsString(),
           std::make_index_sequence<kTypes>());
  return 0;
}
