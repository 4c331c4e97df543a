#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <new>

#include "crown/wire/envelope.h"
#include "crown/wire/serialize.h"

namespace {

struct Sample {
  int count = 0;
  std::string text;
  std::vector<double> values;
  std::map<std::string, int> table;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& count& text& values& table;
  }
  friend bool operator==(const Sample&, const Sample&) = default;
};

struct Named {
  template <class Archive>
  void serialize(Archive&, unsigned) {}
};

// Records the largest allocation asked of it, and refuses any over 1 MiB
// (so a decoder that believes a huge count fails without taking the memory).
template <class T>
struct RecordingAllocator {
  using value_type = T;
  static inline std::size_t largest = 0;
  RecordingAllocator() = default;
  template <class U>
  RecordingAllocator(const RecordingAllocator<U>&) {}  // NOLINT: rebinding, as allocators do
  T* allocate(std::size_t n) {
    largest = std::max(largest, n * sizeof(T));
    if (n * sizeof(T) > (1 << 20)) throw std::bad_alloc();
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, std::size_t n) { std::allocator<T>().deallocate(p, n); }
  friend bool operator==(const RecordingAllocator&, const RecordingAllocator&) { return true; }
};

}  // namespace

CROWN_MESSAGE(Named, "tests.Named");

namespace crown::wire {
namespace {

TEST(Serialize, MessageRoundTrips) {
  Sample in{42, "hello", {1.5, -2.25}, {{"a", 1}, {"b", 2}}};
  EXPECT_EQ(fromBytes<Sample>(toBytes(in)), in);
}

// crown's archives write a class as its fields alone: no class information
// before it (Boost writes a version and a tracking flag the first time a
// class appears), whether it stands alone, nested, or in a collection.
TEST(Serialize, AClassIsWrittenAsItsFieldsAlone) {
  ActorId id{7, 9};
  EXPECT_EQ(toBytes(id).size(), sizeof(id.rank) + sizeof(id.local));
  std::pair<int, ActorId> nested{3, id};
  EXPECT_EQ(toBytes(nested).size(), sizeof(int) + sizeof(id.rank) + sizeof(id.local));
  std::vector<ActorId> many{id, ActorId{1, 2}};
  // The element count and the collection's item version (Boost's), then
  // each element's fields.
  Bytes bytes = toBytes(many);
  EXPECT_EQ(bytes.size(), sizeof(std::uint64_t) + sizeof(std::uint32_t) +
                              2 * (sizeof(id.rank) + sizeof(id.local)));
  EXPECT_EQ(fromBytes<std::vector<ActorId>>(bytes), many);

  std::pair<Sample, std::vector<Sample>> deep{{1, "a", {0.5}, {{"k", 2}}},
                                              {{2, "", {}, {}}, {3, "bc", {1, 2}, {{"x", 0}}}}};
  EXPECT_EQ((fromBytes<std::pair<Sample, std::vector<Sample>>>(toBytes(deep))), deep);
}

TEST(Serialize, ActorIdRoundTrips) {
  ActorId in{7, 1234567890123ULL};
  EXPECT_EQ(fromBytes<ActorId>(toBytes(in)), in);
}

TEST(Serialize, TruncatedPayloadIsAProtocolError) {
  Bytes bytes = toBytes(Sample{1, "a long enough string", {1, 2, 3}, {}});
  bytes.resize(bytes.size() / 2);
  EXPECT_THROW(fromBytes<Sample>(bytes), ProtocolError);
}

TEST(Serialize, ALengthBeyondThePayloadFailsBeforeAllocating) {
  Bytes bytes = toBytes(std::string("short"));
  std::size_t huge = std::size_t{1} << 60;  // would be an exabyte if believed
  std::memcpy(bytes.data(), &huge, sizeof huge);
  EXPECT_THROW(fromBytes<std::string>(bytes), ProtocolError);
  std::vector<double> values(1000, 0.5);
  Bytes vector = toBytes(values);
  vector.resize(vector.size() - 1);
  EXPECT_THROW(fromBytes<std::vector<double>>(vector), ProtocolError);
}

// Found by fuzz_archive: Boost's vectors reserve (or resize to) the count
// they read before reading one element.
template <class Element>
void expectCountRefusedBeforeAllocating(std::vector<Element> sample) {
  using Recorded = std::vector<Element, RecordingAllocator<Element>>;
  Bytes bytes = toBytes(Recorded(sample.begin(), sample.end()));
  // The count follows Boost's class preamble: its first 8-byte copy.
  std::uint64_t count = sample.size();
  std::size_t at = bytes.find(Bytes(reinterpret_cast<const char*>(&count), sizeof count));
  ASSERT_NE(at, Bytes::npos);
  count = std::uint64_t{1} << 32;  // 32 GiB of elements or more, if believed
  std::memcpy(bytes.data() + at, &count, sizeof count);
  RecordingAllocator<Element>::largest = 0;
  EXPECT_THROW(fromBytes<Recorded>(bytes), ProtocolError);
  EXPECT_LE(RecordingAllocator<Element>::largest, bytes.size() * sizeof(Element));
}

TEST(Serialize, AnElementCountBeyondThePayloadFailsBeforeAllocating) {
  expectCountRefusedBeforeAllocating<std::uint64_t>({1, 2, 3});
  expectCountRefusedBeforeAllocating<std::string>({"a", "b"});
}

// Found by fuzz_archive (UBSan: "load of value 231, which is not a valid
// value for type 'bool'").
TEST(Serialize, ABoolOtherThanZeroOrOneIsAProtocolError) {
  EXPECT_TRUE(fromBytes<bool>(toBytes(true)));
  EXPECT_FALSE(fromBytes<bool>(toBytes(false)));
  EXPECT_THROW(fromBytes<bool>(Bytes("\xe7", 1)), ProtocolError);
  EXPECT_THROW(fromBytes<bool>(Bytes("\x02", 1)), ProtocolError);
}

TEST(Serialize, AWideStringLengthWhoseByteCountOverflowsIsAProtocolError) {
  Bytes bytes = toBytes(std::wstring(L"wide"));
  std::uint64_t length = (std::uint64_t{1} << 62) + 1;  // times 4 wraps to 4 bytes
  std::memcpy(bytes.data(), &length, sizeof length);
  EXPECT_THROW(fromBytes<std::wstring>(bytes), ProtocolError);
}

TEST(Serialize, LargeArraysRoundTripBitExactly) {
  std::vector<double> values(1 << 16);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i) / 3.0;
  Bytes bytes = toBytes(values);
  EXPECT_LT(bytes.size(),
            values.size() * sizeof(double) + 64);  // one block, not element by element
  EXPECT_EQ(fromBytes<std::vector<double>>(bytes), values);
}

TEST(Serialize, PackedValuesRoundTrip) {
  Bytes bytes = packValues(3, std::string("x"), 2.5);
  auto [a, b, c] = unpackValues<int, std::string, double>(bytes);
  EXPECT_EQ(a, 3);
  EXPECT_EQ(b, "x");
  EXPECT_EQ(c, 2.5);
}

TEST(MessageName, DefaultsToTheDemangledTypeAndCanBeFixed) {
  EXPECT_EQ(messageName<Sample>(), "(anonymous namespace)::Sample");
  EXPECT_EQ(messageName<Named>(), "tests.Named");
  EXPECT_EQ(messageName<int>(), "int");
}

}  // namespace
}  // namespace crown::wire
