// CastEntries: the columnar entries of a cast result. What goes in comes
// out, entry by entry, after appending and after the wire; columns that do
// not describe entries are refused as they are read.
#include <gtest/gtest.h>

#include "crown/mesh/cast.h"

namespace crown::mesh {
namespace {

CastEntry entry(std::uint64_t rank, bool ok, std::string type, std::string payload) {
  return CastEntry{rank, ok, std::move(type), std::move(payload)};
}

void expectEntries(const CastEntries& entries, const std::vector<CastEntry>& expected) {
  ASSERT_EQ(entries.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    CastEntry got = entries[i];
    EXPECT_EQ(got.rank, expected[i].rank) << i;
    EXPECT_EQ(got.ok, expected[i].ok) << i;
    EXPECT_EQ(got.type, expected[i].type) << i;
    EXPECT_EQ(got.payload, expected[i].payload) << i;
  }
}

TEST(CastEntries, AppendedSubtreesKeepEveryEntryAndItsType) {
  std::vector<CastEntry> hop{entry(4, true, "int", "a"), entry(5, false, "", "why")};
  std::vector<CastEntry> child{entry(9, true, "double", ""), entry(8, true, "int", "bcd"),
                               entry(7, false, "", "lost")};
  CastEntries mine, theirs;
  for (const auto& e : hop) mine.push_back(e);
  for (const auto& e : child) theirs.push_back(e);
  mine.append(std::move(theirs));
  EXPECT_TRUE(theirs.empty());
  std::vector<CastEntry> all = hop;
  all.insert(all.end(), child.begin(), child.end());
  expectEntries(mine, all);
  EXPECT_EQ(std::string(mine.payload(3)), "bcd");

  std::vector<std::uint64_t> ranks;
  for (const CastEntry& e : mine) ranks.push_back(e.rank);
  EXPECT_EQ(ranks, (std::vector<std::uint64_t>{4, 5, 9, 8, 7}));
}

TEST(CastEntries, AResultCrossesTheWireAsItWent) {
  CastResult result;
  result.entries.push_back(entry(1, true, "int", std::string("\0\1\2", 3)));
  result.entries.push_back(entry(2, false, "", "failure"));
  result.hasValue = true;
  result.valueType = "int";
  result.value = "v";
  auto back = wire::fromBytes<CastResult>(wire::toBytes(result));
  expectEntries(back.entries, {result.entries[0], result.entries[1]});
  EXPECT_TRUE(back.hasValue);
  EXPECT_EQ(back.value, "v");

  CastEntries none = wire::fromBytes<CastEntries>(wire::toBytes(CastEntries()));
  EXPECT_TRUE(none.empty());
}

TEST(CastEntries, TheirEncodedSizeIsNeverUnderestimated) {
  // encodedBytes() is what a hop reserves before encoding its result: an
  // estimate under the truth would make the buffer grow after all.
  CastEntries entries;
  EXPECT_GE(entries.encodedBytes(), wire::toBytes(entries).size());
  for (std::uint64_t rank = 0; rank < 300; ++rank) {
    bool ok = rank % 7 != 0;
    entries.push_back(entry(rank, ok, ok ? "crown::some::fairly::long::ReplyType" : "",
                            std::string(rank % 50, 'x')));
    std::size_t encoded = wire::toBytes(entries).size();
    ASSERT_GE(entries.encodedBytes(), encoded) << rank;
    ASSERT_LE(entries.encodedBytes(), encoded + 256) << rank;  // and not wildly over
  }
  CastEntries more;
  more.reserve(10, 100);
  more.append(std::move(entries));
  EXPECT_EQ(more.size(), 300u);
  EXPECT_EQ(more.rank(299), 299u);
}

// The columns as a sender could write them, to forge bad ones.
struct RawColumns {
  std::vector<std::uint64_t> ranks;
  std::vector<std::uint8_t> ok;
  std::vector<std::uint32_t> typeOf;
  std::vector<std::string> types;
  std::vector<std::uint64_t> ends;
  std::string payloads;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& ranks& ok& typeOf& types& ends& payloads;
  }
};

void expectRefused(const RawColumns& columns, const std::string& why) {
  try {
    wire::fromBytes<CastEntries>(wire::toBytes(columns));
    ADD_FAILURE() << "accepted columns with " << why;
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  }
}

TEST(CastEntries, ColumnsThatDoNotDescribeEntriesAreRefused) {
  RawColumns good{{1, 2}, {1, 0}, {0, 1}, {"int", ""}, {2, 5}, "abcde"};
  EXPECT_EQ(wire::fromBytes<CastEntries>(wire::toBytes(good)).size(), 2u);

  RawColumns shortColumn = good;
  shortColumn.ok.pop_back();
  expectRefused(shortColumn, "differ in length");
  RawColumns badType = good;
  badType.typeOf[1] = 2;
  expectRefused(badType, "unknown type");
  RawColumns badFlag = good;
  badFlag.ok[0] = 7;
  expectRefused(badFlag, "neither 0 nor 1");
  RawColumns pastEnd = good;
  pastEnd.ends[1] = 6;
  expectRefused(pastEnd, "outside");
  RawColumns backwards = good;
  backwards.ends = {3, 2};
  expectRefused(backwards, "outside");
}

}  // namespace
}  // namespace crown::mesh
