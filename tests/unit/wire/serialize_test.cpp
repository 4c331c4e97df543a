#include <gtest/gtest.h>

#include <cstring>

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

}  // namespace

CROWN_MESSAGE(Named, "tests.Named");

namespace crown::wire {
namespace {

TEST(Serialize, MessageRoundTrips) {
  Sample in{42, "hello", {1.5, -2.25}, {{"a", 1}, {"b", 2}}};
  EXPECT_EQ(fromBytes<Sample>(toBytes(in)), in);
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
