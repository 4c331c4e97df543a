#include "crown/mesh/cast_entries.h"

#include <algorithm>

#include "crown/common/error.h"

namespace crown::mesh {

std::uint32_t CastEntries::typeIndex(const std::string& type) {
  // The table stays tiny: a cast's members reply with one type, failures with none.
  auto it = std::find(types_.begin(), types_.end(), type);
  if (it != types_.end()) return static_cast<std::uint32_t>(it - types_.begin());
  types_.push_back(type);
  return static_cast<std::uint32_t>(types_.size() - 1);
}

void CastEntries::push_back(const CastEntry& entry) {
  ranks_.push_back(entry.rank);
  ok_.push_back(entry.ok ? 1 : 0);
  typeOf_.push_back(typeIndex(entry.type));
  payloads_.append(entry.payload);
  ends_.push_back(payloads_.size());
}

void CastEntries::append(CastEntries&& other) {
  if (other.empty()) return;
  if (empty()) {
    *this = std::move(other);
    other = CastEntries();
    return;
  }
  std::vector<std::uint32_t> remap;
  remap.reserve(other.types_.size());
  for (const std::string& type : other.types_) remap.push_back(typeIndex(type));
  ranks_.insert(ranks_.end(), other.ranks_.begin(), other.ranks_.end());
  ok_.insert(ok_.end(), other.ok_.begin(), other.ok_.end());
  for (std::uint32_t index : other.typeOf_) typeOf_.push_back(remap[index]);
  std::uint64_t shift = payloads_.size();
  for (std::uint64_t end : other.ends_) ends_.push_back(end + shift);
  payloads_.append(other.payloads_);
  other = CastEntries();
}

void CastEntries::reserve(std::size_t entries, std::size_t payloadBytes) {
  ranks_.reserve(entries);
  ok_.reserve(entries);
  typeOf_.reserve(entries);
  ends_.reserve(entries);
  payloads_.reserve(payloadBytes);
}

std::size_t CastEntries::encodedBytes() const {
  constexpr std::size_t kPerColumn = 16;  // a length, and room for the archive's framing
  std::size_t bytes = 6 * kPerColumn + payloads_.size();
  bytes += size() * (sizeof(std::uint64_t) + sizeof(std::uint8_t) + sizeof(std::uint32_t) +
                     sizeof(std::uint64_t));
  for (const std::string& type : types_) bytes += kPerColumn + type.size();
  return bytes;
}

std::string_view CastEntries::payload(std::size_t i) const {
  std::uint64_t begin = i == 0 ? 0 : ends_[i - 1];
  return std::string_view(payloads_).substr(begin, ends_[i] - begin);
}

CastEntry CastEntries::operator[](std::size_t i) const {
  return CastEntry{rank(i), ok(i), type(i), wire::Bytes(payload(i))};
}

void CastEntries::check() const {
  std::size_t n = ranks_.size();
  if (ok_.size() != n || typeOf_.size() != n || ends_.size() != n) {
    throw ProtocolError("cast entries whose columns differ in length");
  }
  std::uint64_t last = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (ok_[i] > 1) throw ProtocolError("a cast entry whose ok flag is neither 0 nor 1");
    if (typeOf_[i] >= types_.size()) throw ProtocolError("a cast entry of an unknown type");
    if (ends_[i] < last || ends_[i] > payloads_.size()) {
      throw ProtocolError("a cast entry whose payload lies outside the entries' bytes");
    }
    last = ends_[i];
  }
}

}  // namespace crown::mesh
