// wire::sizeForOverwrite (payload.h): built as C++23 for
// resize_and_overwrite (src/CMakeLists.txt).
#include <sys/mman.h>

#include <cstdint>

#include "crown/wire/payload.h"

namespace crown::wire {

// A large payload's buffer is new memory, and its first touch costs a page
// fault per 4 KiB page (5 us each on some VMs: 90 ms for 64 MiB). Asking for
// transparent huge pages before the first touch makes that 32 faults.
void sizeForOverwrite(Bytes& payload, std::size_t bytes) {
  constexpr std::uintptr_t kHugePage = 2 << 20;
  payload = takeRecycled(bytes);  // touched already: no faults at all
  payload.clear();
  bool fresh = payload.capacity() < bytes;
  payload.reserve(bytes);
  if (fresh && bytes >= 4 * kHugePage) {
    auto begin = reinterpret_cast<std::uintptr_t>(payload.data());
    std::uintptr_t first = (begin + kHugePage - 1) & ~(kHugePage - 1);
    std::uintptr_t last = (begin + bytes) & ~(kHugePage - 1);
    if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
  }
#if defined(__cpp_lib_string_resize_and_overwrite)
  // The caller overwrites every byte: skip resize()'s memset, a whole extra
  // pass over the buffer.
  payload.resize_and_overwrite(bytes, [](char*, std::size_t n) { return n; });
#else
  payload.resize(bytes);
#endif
}

}  // namespace crown::wire
