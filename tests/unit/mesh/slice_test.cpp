#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <sstream>

#include "crown/common/error.h"
#include "crown/mesh/slice.h"
#include "crown/wire/serialize.h"

namespace crown::mesh {
namespace {

using Sizes = std::vector<std::size_t>;

// Expects a ConfigError whose message is exactly `message`.
template <class F>
void expectConfigError(F&& f, const std::string& message) {
  try {
    f();
    ADD_FAILURE() << "no ConfigError; expected: " << message;
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.what(), message);
  }
}

TEST(Slice, RowMajorHasDenseRanksInOrder) {
  Slice s = Slice::rowMajor({2, 3, 4});
  EXPECT_EQ(s.offset(), 0u);
  EXPECT_EQ(s.sizes(), (Sizes{2, 3, 4}));
  EXPECT_EQ(s.strides(), (Sizes{12, 4, 1}));
  EXPECT_EQ(s.dims(), 3u);
  EXPECT_EQ(s.size(), 24u);
  Sizes expected(24);
  for (std::size_t i = 0; i < 24; ++i) expected[i] = i;
  EXPECT_EQ(s.ranks(), expected);

  Slice shifted = Slice::rowMajor({2, 2}, 10);
  EXPECT_EQ(shifted.ranks(), (Sizes{10, 11, 12, 13}));
}

TEST(Slice, ZeroDimensionalSliceIsOneRank) {
  Slice s;
  EXPECT_EQ(s.dims(), 0u);
  EXPECT_EQ(s.size(), 1u);
  EXPECT_EQ(s.ranks(), (Sizes{0}));
  EXPECT_EQ(s.location({}), 0u);
  EXPECT_EQ(s.coordinates(0), Sizes{});
  EXPECT_FALSE(s.contains(1));
  EXPECT_EQ(Slice::rowMajor({3}).at(0, 2), Slice(2, {}, {}));
  EXPECT_EQ(Slice::rowMajor({}, 7).ranks(), (Sizes{7}));
}

TEST(Slice, LocationAndCoordinatesAreInverse) {
  Slice s(3, {2, 3}, {10, 2});  // 3 5 7 / 13 15 17
  EXPECT_EQ(s.ranks(), (Sizes{3, 5, 7, 13, 15, 17}));
  EXPECT_EQ(s.location({1, 2}), 17u);
  EXPECT_EQ(s.coordinates(15), (Sizes{1, 1}));
  EXPECT_TRUE(s.contains(7));
  EXPECT_FALSE(s.contains(4));   // between strides
  EXPECT_FALSE(s.contains(9));   // past the last index of the inner dimension
  EXPECT_FALSE(s.contains(2));   // below the offset
  EXPECT_FALSE(s.contains(23));  // past the outer dimension
}

TEST(Slice, ColumnMajorStridesAreAllowed) {
  Slice s(0, {2, 3}, {1, 2});
  EXPECT_EQ(s.ranks(), (Sizes{0, 2, 4, 1, 3, 5}));
  EXPECT_EQ(s.coordinates(3), (Sizes{1, 1}));
  for (std::size_t i = 0; i < s.size(); ++i) EXPECT_EQ(s.indexOf(s.rankAt(i)), i);
  EXPECT_EQ(s.rankAt(3), 1u);
  EXPECT_EQ(s.indexOf(1), 3u);
  EXPECT_FALSE(s.contains(6));
}

TEST(Slice, LocationErrorsSayWhatIsWrong) {
  Slice s = Slice::rowMajor({2, 3});
  expectConfigError([&] { s.location({1}); },
                    "slice {offset=0, sizes=[2, 3], strides=[3, 1]} has 2 dimensions; got 1 "
                    "coordinates [1]");
  expectConfigError([&] { s.location({1, 3}); }, "dimension 1 has size 3; index 3 is out of range");
}

TEST(Slice, CoordinatesOfARankNotInTheSliceThrow) {
  Slice s = Slice::rowMajor({2, 2}, 4).select(1, 0, 2, 1);
  expectConfigError([&] { s.coordinates(3); },
                    "rank 3 is not in slice {offset=4, sizes=[2, 2], strides=[2, 1]}");
  expectConfigError([&] { s.coordinates(8); },
                    "rank 8 is not in slice {offset=4, sizes=[2, 2], strides=[2, 1]}");
}

TEST(Slice, ConstructorRejectsInvalidSlices) {
  expectConfigError(
      [] {
        Slice(0, {2, 3}, {1});
      },
      "a slice needs one stride per dimension; got sizes [2, 3] and strides [1]");
  expectConfigError(
      [] {
        Slice(0, {2, 0}, {1, 1});
      },
      "dimension 1 of slice {offset=0, sizes=[2, 0], strides=[1, 1]} has size 0; "
      "every dimension needs at least one element");
  expectConfigError(
      [] {
        Slice(0, {2, 2}, {1, 1});
      },
      "slice {offset=0, sizes=[2, 2], strides=[1, 1]} is not nested: dimension 1 "
      "has stride 1, not above 1, the span of the dimensions with smaller strides, "
      "so ranks would repeat or interleave");
  // Injective, but interleaved (0 2 4 / 3 5 7): no greedy decoding, so refused.
  EXPECT_THROW(Slice(0, {2, 3}, {3, 2}), ConfigError);
  EXPECT_THROW(Slice(0, {2}, {0}), ConfigError);
  // A size-1 dimension's stride is never used: anything goes.
  EXPECT_EQ(Slice(0, {1, 4}, {0, 1}).ranks(), (Sizes{0, 1, 2, 3}));
  EXPECT_EQ(Slice(0, {4, 1}, {1, 1}).ranks(), (Sizes{0, 1, 2, 3}));
  // Ranks beyond std::size_t.
  constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();
  EXPECT_THROW(Slice(kMax, {2}, {1}), ConfigError);
  EXPECT_THROW(Slice(0, {3}, {kMax / 2 + 1}), ConfigError);
  EXPECT_THROW(Slice::rowMajor({kMax / 2 + 1, 3}), ConfigError);
  EXPECT_NO_THROW(Slice(kMax - 1, {2}, {1}));
}

TEST(Slice, SelectKeepsTheDimension) {
  Slice s = Slice::rowMajor({4, 4});
  Slice odd = s.select(1, 1, 4, 2);
  EXPECT_EQ(odd, Slice(1, {4, 2}, {4, 2}));
  EXPECT_EQ(odd.ranks(), (Sizes{1, 3, 5, 7, 9, 11, 13, 15}));
  EXPECT_EQ(s.select(0, 2).ranks(), (Sizes{8, 9, 10, 11, 12, 13, 14, 15}));  // to the end
  EXPECT_EQ(s.select(0, Range{1, 3}).sizes(), (Sizes{2, 4}));
  // Twice along the same dimension composes.
  EXPECT_EQ(s.select(1, 1, 4, 1).select(1, 0, 3, 2), s.select(1, 1, 4, 2));
}

TEST(Slice, SelectClampsTheEndToTheSize) {
  Slice s = Slice::rowMajor({5});
  EXPECT_EQ(s.select(0, 1, 100, 2).ranks(), (Sizes{1, 3}));
  EXPECT_EQ(s.select(0, 1, kEnd, 3).ranks(), (Sizes{1, 4}));
}

TEST(Slice, ASingleSelectedIndexKeepsTheStride) {
  Slice s = Slice::rowMajor({3, 4});
  EXPECT_EQ(s.select(1, 2, 3), s.select(1, 2, kEnd, 1000));
  EXPECT_EQ(s.select(1, 2, 3).strides(), (Sizes{4, 1}));
  EXPECT_EQ(s.select(1, 3, kEnd, std::numeric_limits<std::int64_t>::max()).ranks(),
            (Sizes{3, 7, 11}));
}

TEST(Slice, SelectErrorsSayWhatIsWrong) {
  Slice s = Slice::rowMajor({2, 4});
  expectConfigError([&] { s.select(1, 0, 4, 0); }, "dimension 1: step must be at least 1, got 0");
  expectConfigError([&] { s.select(1, 0, 4, -2); }, "dimension 1: step must be at least 1, got -2");
  expectConfigError([&] { s.select(1, 4); },
                    "dimension 1 has size 4; range begin 4 is out of range");
  expectConfigError([&] { s.select(1, -1); },
                    "dimension 1 has size 4; range begin -1 is out of range");
  expectConfigError([&] { s.select(1, 2, 2); }, "dimension 1: range [2, 2) is empty");
  expectConfigError([&] { s.select(1, 2, -5); }, "dimension 1: range [2, -5) is empty");
  expectConfigError([&] { s.select(2, 0); }, "dimension 2 does not exist in a 2-dimensional slice");
}

TEST(Slice, AtRemovesTheDimension) {
  Slice s = Slice::rowMajor({2, 3, 4});
  EXPECT_EQ(s.at(1, 2), Slice(8, {2, 4}, {12, 1}));
  EXPECT_EQ(s.at(0, 1).at(1, 3).ranks(), (Sizes{15, 19, 23}));
  expectConfigError([&] { s.at(2, 4); }, "dimension 2 has size 4; index 4 is out of range");
  expectConfigError([&] { s.at(0, -1); }, "dimension 0 has size 2; index -1 is out of range");
  expectConfigError([&] { s.at(3, 0); }, "dimension 3 does not exist in a 3-dimensional slice");
}

TEST(Slice, SplitIsRowMajorWithinTheDimension) {
  EXPECT_EQ(Slice::rowMajor({6}).split(0, {2, 3}), Slice::rowMajor({2, 3}));
  EXPECT_EQ(Slice::rowMajor({2, 6}).split(1, {3, 1, 2}), Slice::rowMajor({2, 3, 1, 2}));
  Slice strided(1, {4}, {2});  // 1 3 5 7
  Slice parts = strided.split(0, {2, 2});
  EXPECT_EQ(parts, Slice(1, {2, 2}, {4, 2}));
  EXPECT_EQ(parts.ranks(), strided.ranks());
  EXPECT_EQ(Slice::rowMajor({3}).split(0, {3}), Slice::rowMajor({3}));
  expectConfigError(
      [] {
        Slice::rowMajor({6}).split(0, {2, 2});
      },
      "split of dimension 0 (size 6) into 2 x 2 = 4 does not match");
  expectConfigError(
      [] {
        Slice::rowMajor({6}).split(0, {6, 0});
      },
      "split of dimension 0 (size 6): part 1 has size 0");
  expectConfigError([] { Slice::rowMajor({6}).split(0, {}); },
                    "split of dimension 0 (size 6) into no dimensions");
  EXPECT_THROW(Slice::rowMajor({6}).split(1, {6}), ConfigError);
}

TEST(Slice, FlattenNeedsEvenlySpacedRanks) {
  EXPECT_EQ(Slice::rowMajor({2, 3}, 4).flatten(), Slice(4, {6}, {1}));
  // Strided only in the innermost dimension: one stride describes it.
  EXPECT_EQ(Slice::rowMajor({4, 4}).at(0, 1).select(0, 0, 4, 2).flatten(), Slice(4, {2}, {2}));
  // Size-1 dimensions do not count, whatever their stride.
  EXPECT_EQ(Slice(3, {1, 2, 1}, {100, 5, 7}).flatten(), Slice(3, {2}, {5}));
  EXPECT_EQ(Slice(3, {1, 1}, {9, 9}).flatten(), Slice(3, {1}, {1}));
  EXPECT_EQ(Slice().flatten(), Slice(0, {1}, {1}));
  // A column-major order is not evenly spaced in row-major order.
  EXPECT_THROW(Slice(0, {2, 3}, {1, 2}).flatten(), ConfigError);
  // Every other row of a 4x4: 0-3 and 8-11.
  expectConfigError(
      [] {
        Slice::rowMajor({4, 4}).select(0, 0, 4, 2).flatten();
      },
      "cannot flatten slice {offset=0, sizes=[2, 4], strides=[8, 1]}: its ranks "
      "are not evenly spaced in row-major order");
}

TEST(Slice, PrintsItsFields) {
  EXPECT_EQ(Slice::rowMajor({2, 4}).toString(), "{offset=0, sizes=[2, 4], strides=[4, 1]}");
  std::ostringstream out;
  out << Slice();
  EXPECT_EQ(out.str(), "{offset=0, sizes=[], strides=[]}");
}

TEST(Slice, SerializationRoundTrips) {
  Slice s = Slice::rowMajor({3, 4, 5}, 7).select(2, 1, 5, 2).at(0, 2);
  EXPECT_EQ(wire::fromBytes<Slice>(wire::toBytes(s)), s);
  EXPECT_EQ(wire::fromBytes<Slice>(wire::toBytes(Slice())), Slice());
}

// The same archive layout as Slice, without its validation.
struct RawSlice {
  std::size_t offset = 0;
  Sizes sizes, strides;
  Sizes members;  // empty: positions are ranks
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& offset& sizes& strides& members;
  }
};

TEST(Slice, DecodingAnInvalidSliceIsAProtocolError) {
  Slice valid(2, {2, 3}, {3, 1});
  EXPECT_EQ(wire::toBytes(RawSlice{2, {2, 3}, {3, 1}, {}}), wire::toBytes(valid));
  EXPECT_EQ(wire::toBytes(RawSlice{0, {3}, {1}, {1, 4, 6}}),
            wire::toBytes(Slice::ofRanks({1, 4, 6})));
  EXPECT_THROW(wire::fromBytes<Slice>(wire::toBytes(RawSlice{0, {2, 2}, {1, 1}, {}})),
               ProtocolError);
  EXPECT_THROW(wire::fromBytes<Slice>(wire::toBytes(RawSlice{0, {2}, {1, 1}, {}})), ProtocolError);
  EXPECT_THROW(wire::fromBytes<Slice>(wire::toBytes(RawSlice{0, {0}, {1}, {}})), ProtocolError);
  // Chosen ranks that do not increase, or too few for the positions.
  EXPECT_THROW(wire::fromBytes<Slice>(wire::toBytes(RawSlice{0, {2}, {1}, {5, 5}})), ProtocolError);
  EXPECT_THROW(wire::fromBytes<Slice>(wire::toBytes(RawSlice{0, {3}, {1}, {1, 2}})), ProtocolError);
}

// ---- Properties against brute force ----------------------------------------

// What a derived slice should hold, kept without any stride arithmetic: for
// each remaining dimension, the indices of the original row-major dimension
// it still selects; indices fixed by at() go into the base.
struct Model {
  std::size_t base;
  Sizes original_strides;
  std::vector<std::size_t> original_dim;  // per current dimension
  std::vector<Sizes> indices;             // per current dimension

  Model(const Sizes& sizes, std::size_t offset) : base(offset) {
    original_strides = Slice::rowMajor(sizes).strides();
    for (std::size_t d = 0; d < sizes.size(); ++d) {
      original_dim.push_back(d);
      Sizes all(sizes[d]);
      for (std::size_t i = 0; i < sizes[d]; ++i) all[i] = i;
      indices.push_back(all);
    }
  }

  void at(std::size_t d, std::size_t i) {
    base += indices[d][i] * original_strides[original_dim[d]];
    original_dim.erase(original_dim.begin() + static_cast<std::ptrdiff_t>(d));
    indices.erase(indices.begin() + static_cast<std::ptrdiff_t>(d));
  }

  void select(std::size_t d, std::size_t begin, std::size_t end, std::size_t step) {
    Sizes kept;
    for (std::size_t i = begin; i < std::min(end, indices[d].size()); i += step) {
      kept.push_back(indices[d][i]);
    }
    indices[d] = kept;
  }

  // Every (coordinates, rank), coordinates in row-major order.
  std::vector<std::pair<Sizes, std::size_t>> enumerate() const {
    std::vector<std::pair<Sizes, std::size_t>> out;
    Sizes coords(indices.size(), 0);
    enumerateFrom(0, coords, out);
    return out;
  }

  void enumerateFrom(std::size_t d, Sizes& coords,
                     std::vector<std::pair<Sizes, std::size_t>>& out) const {
    if (d == indices.size()) {
      std::size_t rank = base;
      for (std::size_t k = 0; k < coords.size(); ++k) {
        rank += indices[k][coords[k]] * original_strides[original_dim[k]];
      }
      out.emplace_back(coords, rank);
      return;
    }
    for (coords[d] = 0; coords[d] < indices[d].size(); ++coords[d]) {
      enumerateFrom(d + 1, coords, out);
    }
  }
};

// offset + sum(coord_i * stride_i) over the slice's own fields, row-major.
Sizes bruteForceRanks(const Slice& s) {
  Sizes out;
  Sizes coords(s.dims(), 0);
  while (true) {
    std::size_t rank = s.offset();
    for (std::size_t d = 0; d < s.dims(); ++d) rank += coords[d] * s.strides()[d];
    out.push_back(rank);
    std::size_t d = s.dims();
    while (d > 0 && ++coords[d - 1] == s.sizes()[d - 1]) coords[--d] = 0;
    if (d == 0) return out;
  }
}

bool evenlySpaced(const Sizes& ranks) {
  for (std::size_t i = 2; i < ranks.size(); ++i) {
    if (ranks[i] - ranks[i - 1] != ranks[1] - ranks[0]) return false;
  }
  return ranks.size() < 2 || ranks[1] > ranks[0];
}

void checkAgainstModel(const Slice& s, const Model& model) {
  SCOPED_TRACE(s.toString());
  auto expected = model.enumerate();
  Sizes ranks;
  for (const auto& entry : expected) ranks.push_back(entry.second);
  ASSERT_EQ(s.ranks(), ranks);
  ASSERT_EQ(bruteForceRanks(s), ranks);
  ASSERT_EQ(s.size(), ranks.size());
  ASSERT_EQ(s.dims(), model.indices.size());
  for (const auto& [coords, rank] : expected) {
    ASSERT_EQ(s.location(coords), rank);
    ASSERT_EQ(s.coordinates(rank), coords);
  }
  for (std::size_t i = 0; i < ranks.size(); ++i) {  // row-major positions, both ways
    ASSERT_EQ(s.rankAt(i), ranks[i]) << "position " << i;
    ASSERT_EQ(s.indexOf(ranks[i]), i) << "rank " << ranks[i];
  }
  ASSERT_THROW(s.rankAt(ranks.size()), ConfigError);
  std::set<std::size_t> members(ranks.begin(), ranks.end());
  ASSERT_EQ(members.size(), ranks.size()) << "ranks repeat";
  int throws_checked = 0;  // a few per slice: exceptions are slow
  for (std::size_t r = 0; r <= *members.rbegin() + 3; ++r) {
    ASSERT_EQ(s.contains(r), members.count(r) == 1) << "rank " << r;
    if (!members.count(r) && throws_checked++ < 4) {
      ASSERT_THROW(s.coordinates(r), ConfigError) << "rank " << r;
      ASSERT_THROW(s.indexOf(r), ConfigError) << "rank " << r;
    }
  }
  ASSERT_EQ(wire::fromBytes<Slice>(wire::toBytes(s)), s);
  if (evenlySpaced(ranks)) {
    ASSERT_EQ(s.flatten().ranks(), ranks);
  } else {
    ASSERT_THROW(s.flatten(), ConfigError);
  }
}

std::int64_t pick(std::mt19937& rng, std::int64_t low, std::int64_t high) {
  return std::uniform_int_distribution<std::int64_t>(low, high)(rng);
}

TEST(SliceProperty, DerivedSlicesMatchBruteForce) {
  std::mt19937 rng(20240611);
  for (int round = 0; round < 500; ++round) {
    Sizes sizes(static_cast<std::size_t>(pick(rng, 1, 4)));
    for (auto& size : sizes) size = static_cast<std::size_t>(pick(rng, 1, 5));
    std::size_t offset = static_cast<std::size_t>(pick(rng, 0, 10));
    Slice s = Slice::rowMajor(sizes, offset);
    Model model(sizes, offset);
    checkAgainstModel(s, model);
    int steps = static_cast<int>(pick(rng, 1, 4));
    for (int k = 0; k < steps && s.dims() > 0; ++k) {
      std::size_t d =
          static_cast<std::size_t>(pick(rng, 0, static_cast<std::int64_t>(s.dims()) - 1));
      auto size = static_cast<std::int64_t>(s.sizes()[d]);
      if (pick(rng, 0, 2) == 0) {
        std::int64_t index = pick(rng, 0, size - 1);
        s = s.at(d, index);
        model.at(d, static_cast<std::size_t>(index));
      } else {
        std::int64_t begin = pick(rng, 0, size - 1);
        std::int64_t end = pick(rng, 0, 3) == 0 ? kEnd : pick(rng, begin + 1, size + 2);
        std::int64_t step = pick(rng, 1, 3);
        s = s.select(d, begin, end, step);
        model.select(d, static_cast<std::size_t>(begin),
                     static_cast<std::size_t>(std::min<std::int64_t>(end, size)),
                     static_cast<std::size_t>(step));
      }
      checkAgainstModel(s, model);
      if (HasFatalFailure()) return;
    }
  }
}

// Random factors of n whose product is n.
Sizes randomFactors(std::mt19937& rng, std::size_t n) {
  Sizes parts;
  while (n > 1 || parts.empty() || pick(rng, 0, 3) == 0) {
    Sizes divisors;
    for (std::size_t k = 1; k <= n; ++k) {
      if (n % k == 0) divisors.push_back(k);
    }
    std::size_t k = divisors[static_cast<std::size_t>(
        pick(rng, 0, static_cast<std::int64_t>(divisors.size()) - 1))];
    parts.push_back(k);
    n /= k;
    if (parts.size() > 4) {
      parts.back() *= n;
      break;
    }
  }
  return parts;
}

TEST(SliceProperty, SplitKeepsTheRanksAndFlattenUndoesIt) {
  std::mt19937 rng(7);
  for (int round = 0; round < 500; ++round) {
    Sizes sizes(static_cast<std::size_t>(pick(rng, 1, 4)));
    for (auto& size : sizes) size = static_cast<std::size_t>(pick(rng, 1, 6));
    std::size_t offset = static_cast<std::size_t>(pick(rng, 0, 10));
    Slice s = Slice::rowMajor(sizes, offset);
    std::size_t d = static_cast<std::size_t>(pick(rng, 0, static_cast<std::int64_t>(s.dims()) - 1));
    Sizes parts = randomFactors(rng, sizes[d]);
    Slice split = s.split(d, parts);
    SCOPED_TRACE(s.toString() + " split into " + split.toString());
    ASSERT_EQ(split.ranks(), s.ranks());
    ASSERT_EQ(split.dims(), s.dims() + parts.size() - 1);
    ASSERT_EQ(split.flatten(), s.flatten());
    ASSERT_EQ(split.flatten(), Slice(offset, {s.size()}, {1}));

    // On a strided slice, split keeps the ranks too.
    std::int64_t step = pick(rng, 1, 3);
    Slice strided = s.select(d, 0, kEnd, step);
    Slice strided_split = strided.split(d, randomFactors(rng, strided.sizes()[d]));
    ASSERT_EQ(strided_split.ranks(), strided.ranks());
  }
}

}  // namespace
}  // namespace crown::mesh

namespace crown::mesh {
namespace {

// A slice over chosen ranks (what survived a loss): every operation works on
// positions in the list, so ranks come out as the list says.
TEST(SliceOfRanks, PositionsStandForTheChosenRanks) {
  Slice alive = Slice::ofRanks({0, 1, 3, 4, 7, 9});
  EXPECT_EQ(alive.size(), 6u);
  EXPECT_EQ(alive.ranks(), (Sizes{0, 1, 3, 4, 7, 9}));
  EXPECT_EQ(alive.rankAt(4), 7u);
  EXPECT_EQ(alive.indexOf(9), 5u);
  EXPECT_EQ(alive.coordinates(3), (Sizes{2}));
  EXPECT_TRUE(alive.contains(4));
  EXPECT_FALSE(alive.contains(2));
  EXPECT_THROW(alive.indexOf(2), ConfigError);
  EXPECT_EQ(alive.select(0, 1, kEnd, 2).ranks(), (Sizes{1, 4, 9}));
  EXPECT_EQ(alive.at(0, 3).ranks(), (Sizes{4}));
  Slice grid = alive.split(0, {2, 3});
  EXPECT_EQ(grid.location({1, 0}), 4u);
  EXPECT_EQ(grid.at(1, 2).ranks(), (Sizes{3, 9}));
  EXPECT_EQ(grid.flatten(), alive);
  EXPECT_NE(alive, Slice::rowMajor({6}));  // the same positions, other ranks
  EXPECT_NE(alive.toString().find("of ranks [0, 1, 3, 4, 7, 9]"), std::string::npos);
}

TEST(SliceOfRanks, TravelsWithItsRanksAndRefusesABadList) {
  Slice alive = Slice::ofRanks({2, 5, 6});
  Slice back = wire::fromBytes<Slice>(wire::toBytes(alive.select(0, 1)));
  EXPECT_EQ(back.ranks(), (Sizes{5, 6}));
  EXPECT_EQ(back, alive.select(0, 1));
  EXPECT_THROW(Slice::ofRanks({}), ConfigError);
  EXPECT_THROW(Slice::ofRanks({3, 3}), ConfigError);
  EXPECT_THROW(Slice::ofRanks({4, 1}), ConfigError);
}

// A mesh whose lost ranks were respawned keeps its shape: each replaced
// position stands for the new rank, and the slice travels as it is.
TEST(SliceReplacing, ReplacedPositionsStandForTheNewRanks) {
  Slice grid = Slice::rowMajor({2, 3});
  Slice mended = grid.replacing({{1, 6}, {5, 7}});
  EXPECT_EQ(mended.sizes(), grid.sizes());
  EXPECT_EQ(mended.ranks(), (Sizes{0, 6, 2, 3, 4, 7}));
  EXPECT_EQ(mended.location({0, 1}), 6u);
  EXPECT_EQ(mended.coordinates(7), (Sizes{1, 2}));
  EXPECT_EQ(mended.indexOf(6), 1u);
  EXPECT_FALSE(mended.contains(1));
  EXPECT_EQ(mended.at(0, 1).ranks(), (Sizes{3, 4, 7}));
  Slice back = wire::fromBytes<Slice>(wire::toBytes(mended));
  EXPECT_EQ(back, mended);
  EXPECT_EQ(back.ranks(), mended.ranks());
  // A strided slice of survivors is replaced in place too.
  Slice odd = Slice::ofRanks({1, 3, 4, 8}).select(0, 1, kEnd, 2);  // ranks 3, 8
  EXPECT_EQ(odd.replacing({{8, 9}}).ranks(), (Sizes{3, 9}));
}

TEST(SliceReplacing, RefusesARankOutsideOrOneAlreadyThere) {
  Slice line = Slice::rowMajor({4});
  EXPECT_THROW(line.replacing({{5, 9}}), ConfigError);  // 5 is not in the slice
  EXPECT_THROW(line.replacing({{1, 2}}), ConfigError);  // 2 is there already
  EXPECT_THROW(line.select(0, 0, 2).replacing({{3, 9}}), ConfigError);
  EXPECT_EQ(line.replacing({}).ranks(), line.ranks());
}

}  // namespace
}  // namespace crown::mesh
