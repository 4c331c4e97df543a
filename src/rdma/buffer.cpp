// crown::rdma::Buffer (buffer.h): the handle's calls, forwarded to the rdma
// module of the calling proc.
#include "crown/rdma/buffer.h"

#include "rdma/rdma_module.h"

namespace crown::rdma {

Buffer Buffer::registerMemory(void* data, std::size_t bytes, bool readOnly,
                              std::shared_ptr<void> keep) {
  return registerMemory(Proc::current(), data, bytes, readOnly, std::move(keep));
}

Buffer Buffer::registerMemory(Proc& proc, void* data, std::size_t bytes, bool readOnly,
                              std::shared_ptr<void> keep) {
  return detail::RdmaModule::of(proc).registerMemory(data, bytes, readOnly, std::move(keep));
}

Future<void> Buffer::readInto(void* dst, std::size_t capacity,
                              std::chrono::milliseconds timeout) const {
  return readInto(Proc::current(), dst, capacity, timeout);
}

Future<void> Buffer::writeFrom(const void* src, std::size_t bytes,
                               std::chrono::milliseconds timeout) const {
  return writeFrom(Proc::current(), src, bytes, timeout);
}

Future<void> Buffer::drop() const { return drop(Proc::current()); }

Future<void> Buffer::dropBecause(const std::string& why) const {
  Proc& proc = Proc::current();
  if (owner_ == proc.rank()) return detail::RdmaModule::of(proc).dropLocal(id_, why);
  return drop(proc);
}

Future<void> Buffer::readInto(Proc& proc, void* dst, std::size_t capacity,
                              std::chrono::milliseconds timeout) const {
  return detail::RdmaModule::of(proc).transfer(*this, dst, capacity, false, timeout);
}

Future<void> Buffer::writeFrom(Proc& proc, const void* src, std::size_t bytes,
                               std::chrono::milliseconds timeout) const {
  // The module moves bytes out of `src` only: the cast is for its one signature.
  return detail::RdmaModule::of(proc).transfer(*this, const_cast<void*>(src), bytes, true, timeout);
}

Future<void> Buffer::drop(Proc& proc) const { return detail::RdmaModule::of(proc).drop(*this); }

std::string Buffer::describe() const {
  return "RDMA buffer " + std::to_string(id_) + " of rank " + std::to_string(owner_) + " (" +
         std::to_string(bytes_) + " bytes)";
}

}  // namespace crown::rdma
