// The resend window of a cast hop: bounded per child by a count and bytes,
// the newest always kept, taken once when the child is lost.
#include "mesh/resend_window.h"

#include <gtest/gtest.h>

namespace crown::mesh::detail {
namespace {

ResendWindow::Sent broadcastOf(std::size_t bytes) {
  return {std::make_shared<const wire::Bytes>(bytes, 'x'),
          std::make_shared<const CastTree>(Slice(0, {4}, {1}), 2)};
}

std::vector<std::size_t> sizes(const std::vector<ResendWindow::Sent>& sent) {
  std::vector<std::size_t> out;
  for (const auto& one : sent) out.push_back(one.bytes->size());
  return out;
}

TEST(ResendWindow, KeepsTheLastFewPerChildAndForgetsThemWhenTaken) {
  ResendWindow window(3, 1 << 20);
  for (std::size_t size = 1; size <= 5; ++size) window.record(7, broadcastOf(size));
  window.record(8, broadcastOf(10));
  EXPECT_EQ(sizes(window.take(7)), (std::vector<std::size_t>{3, 4, 5}));
  EXPECT_TRUE(window.take(7).empty()) << "taken once";
  EXPECT_EQ(sizes(window.take(8)), (std::vector<std::size_t>{10}));
}

TEST(ResendWindow, TheByteBoundKeepsTheNewestAnyway) {
  ResendWindow window(100, 10);
  window.record(1, broadcastOf(4));
  window.record(1, broadcastOf(4));
  window.record(1, broadcastOf(4));  // 12 bytes: the oldest goes
  EXPECT_EQ(sizes(window.take(1)), (std::vector<std::size_t>{4, 4}));
  window.record(1, broadcastOf(4));
  window.record(1, broadcastOf(50));  // alone over the bound, and kept
  EXPECT_EQ(sizes(window.take(1)), (std::vector<std::size_t>{50}));
}

TEST(ResendWindow, ZeroKeepsNothing) {
  ResendWindow window(0, 1 << 20);
  window.record(1, broadcastOf(4));
  EXPECT_TRUE(window.take(1).empty());
}

}  // namespace
}  // namespace crown::mesh::detail
