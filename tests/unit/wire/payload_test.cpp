#include <gtest/gtest.h>

#include "crown/wire/payload.h"

namespace crown::wire {
namespace {

Bytes bufferOf(std::size_t bytes) {
  Bytes buffer;
  buffer.reserve(bytes);
  return buffer;
}

// A recycled buffer of at least `bytes`, if one was kept (an empty Bytes
// has the small-string capacity, never this much).
bool tookOne(std::size_t bytes) { return takeRecycled(bytes).capacity() >= bytes; }

// Drains the pool of buffers of about `bytes`, so that tests start from empty.
void drain(std::size_t bytes) {
  while (tookOne(bytes)) {
  }
}

TEST(Recycling, AReceivedBufferIsHandedBackForTheNextPayloadOfItsSize) {
  drain(kRecycledBytes);
  recycle(bufferOf(kRecycledBytes));
  EXPECT_TRUE(tookOne(kRecycledBytes));
  EXPECT_FALSE(tookOne(kRecycledBytes));  // only one was kept
}

TEST(Recycling, SmallBuffersAreNotKept) {
  recycle(bufferOf(kRecycledBytes / 2));
  EXPECT_FALSE(tookOne(kRecycledBytes / 2));
}

// One huge message must not pin its size in memory for the rest of the run.
TEST(Recycling, ABufferOverTheTotalBoundIsFreed) {
  drain(kRecycledTotalBytes + 1);
  recycle(bufferOf(kRecycledTotalBytes + 1));
  EXPECT_FALSE(tookOne(kRecycledTotalBytes + 1));
}

TEST(Recycling, TheOldestGoWhenTheKeptBuffersPassTheTotalBound) {
  constexpr std::size_t kThird = kRecycledTotalBytes / 3 + 1;  // three of these pass the bound
  drain(kThird);
  for (int i = 0; i < 3; ++i) recycle(bufferOf(kThird));
  int kept = 0;
  while (tookOne(kThird)) ++kept;
  EXPECT_EQ(kept, 2);
}

}  // namespace
}  // namespace crown::wire
