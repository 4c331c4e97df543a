#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <sstream>

#include "crown/common/error.h"
#include "crown/mesh/shape.h"
#include "crown/wire/serialize.h"

namespace crown::mesh {
namespace {

using Sizes = std::vector<std::size_t>;
using Coords = std::map<std::string, std::size_t>;
using Labels = std::vector<std::string>;

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

const Shape kHostsProcs{{"hosts", 2}, {"procs", 4}};

TEST(Shape, ConstructsRowMajorFromLabelsAndSizes) {
  const Shape& s = kHostsProcs;
  EXPECT_EQ(s.labels(), (Labels{"hosts", "procs"}));
  EXPECT_EQ(s.slice(), Slice::rowMajor({2, 4}));
  EXPECT_EQ(s.dims(), 2u);
  EXPECT_EQ(s.size(), 8u);
  EXPECT_EQ(s.size("hosts"), 2u);
  EXPECT_EQ(s.size("procs"), 4u);
  EXPECT_EQ(s.sizes(), (std::vector<Dim>{{"hosts", 2}, {"procs", 4}}));
  EXPECT_EQ(s.dim("procs"), 1u);
  EXPECT_TRUE(s.hasDim("hosts"));
  EXPECT_FALSE(s.hasDim("gpus"));
  EXPECT_EQ(s.ranks(), (Sizes{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(s.toString(), "{hosts=2, procs=4}");
  EXPECT_EQ(Shape(std::vector<Dim>{{"hosts", 2}, {"procs", 4}}), s);
  EXPECT_EQ(Shape({"hosts", "procs"}, Slice::rowMajor({2, 4})), s);
  std::ostringstream out;
  out << s;
  EXPECT_EQ(out.str(), "{hosts=2, procs=4}");
}

TEST(Shape, EmptyShapeIsOneRank) {
  Shape s;
  EXPECT_EQ(s.dims(), 0u);
  EXPECT_EQ(s.size(), 1u);
  EXPECT_EQ(s.ranks(), (Sizes{0}));
  EXPECT_EQ(s.rank({}), 0u);
  EXPECT_EQ(s.coordinates(0), Coords{});
  EXPECT_EQ(s.toString(), "{}");
  EXPECT_EQ((Shape{{"procs", 3}}.at("procs", 2)), Shape({}, Slice(2, {}, {})));
}

TEST(Shape, ConstructorRejectsBadLabelsAndSizes) {
  expectConfigError(
      [] {
        Shape{{"procs", 2}, {"procs", 4}};
      },
      "dimension 'procs' appears twice in shape labels [procs, procs]");
  expectConfigError(
      [] {
        Shape{{"hosts", 2}, {"", 4}};
      },
      "dimension 1 of shape labels [hosts, ] has an empty label");
  expectConfigError(
      [] {
        Shape{{"hosts", 2}, {"procs", 0}};
      },
      "dimension 'procs' has size 0; every dimension needs at least one element");
  expectConfigError(
      [] {
        Shape({"hosts"}, Slice::rowMajor({2, 4}));
      },
      "a shape needs one label per dimension; got labels [hosts] for the "
      "2-dimensional slice {offset=0, sizes=[2, 4], strides=[4, 1]}");
}

TEST(Shape, AnUnknownLabelIsNamed) {
  const std::string message = "no dimension 'gpu' in shape {hosts=2, procs=4}";
  expectConfigError([] { kHostsProcs.size("gpu"); }, message);
  expectConfigError([] { kHostsProcs.dim("gpu"); }, message);
  expectConfigError([] { kHostsProcs.at("gpu", 0); }, message);
  expectConfigError([] { kHostsProcs.range("gpu", 0); }, message);
  expectConfigError([] { kHostsProcs.rank({{"hosts", 0}, {"procs", 0}, {"gpu", 0}}); }, message);
  expectConfigError([] { kHostsProcs.select({{"hosts", 0}, {"gpu", 0}}); }, message);
  expectConfigError([] { kHostsProcs.rename("gpu", "x"); }, message);
  expectConfigError([] { kHostsProcs.split("gpu", {{"a", 1}}); }, message);
}

TEST(Shape, RankAndCoordinatesAreInverse) {
  EXPECT_EQ(kHostsProcs.rank({{"hosts", 1}, {"procs", 2}}), 6u);
  EXPECT_EQ(kHostsProcs.coordinates(6), (Coords{{"hosts", 1}, {"procs", 2}}));
  Shape odd = kHostsProcs.range("procs", 1, kEnd, 2);  // 1 3 / 5 7
  EXPECT_EQ(odd.rank({{"hosts", 1}, {"procs", 1}}), 7u);
  EXPECT_EQ(odd.coordinates(5), (Coords{{"hosts", 1}, {"procs", 0}}));
  EXPECT_TRUE(odd.contains(3));
  EXPECT_FALSE(odd.contains(4));
}

TEST(Shape, RankAndCoordinatesErrorsSayWhatIsWrong) {
  expectConfigError(
      [] {
        kHostsProcs.rank({{"hosts", 1}});
      },
      "coordinates for shape {hosts=2, procs=4} miss dimension 'procs'");
  expectConfigError(
      [] {
        kHostsProcs.rank({{"hosts", 1}, {"procs", 7}});
      },
      "dimension 'procs' has size 4; index 7 is out of range");
  expectConfigError([] { kHostsProcs.coordinates(9); },
                    "rank 9 is not in shape {hosts=2, procs=4} (slice {offset=0, sizes=[2, 4], "
                    "strides=[4, 1]})");
  expectConfigError([] { kHostsProcs.range("procs", 1, kEnd, 2).coordinates(2); },
                    "rank 2 is not in shape {hosts=2, procs=2} (slice {offset=1, sizes=[2, 2], "
                    "strides=[4, 2]})");
}

TEST(Shape, AtRemovesTheDimension) {
  Shape s = kHostsProcs.at("procs", 1);
  EXPECT_EQ(s.labels(), (Labels{"hosts"}));
  EXPECT_EQ(s.ranks(), (Sizes{1, 5}));
  EXPECT_EQ(kHostsProcs.at("hosts", 1).at("procs", 3).ranks(), (Sizes{7}));
  Shape gpus{{"hosts", 2}, {"gpus", 4}};
  expectConfigError([&] { gpus.at("gpus", 7); },
                    "dimension 'gpus' has size 4; index 7 is out of range");
  expectConfigError([&] { gpus.at("gpus", -1); },
                    "dimension 'gpus' has size 4; index -1 is out of range");
}

TEST(Shape, RangeKeepsTheDimension) {
  Shape s = kHostsProcs.range("procs", 1, 4, 2);
  EXPECT_EQ(s.toString(), "{hosts=2, procs=2}");
  EXPECT_EQ(s.ranks(), (Sizes{1, 3, 5, 7}));
  EXPECT_EQ(kHostsProcs.range("procs", 2).ranks(), (Sizes{2, 3, 6, 7}));  // to the end
  EXPECT_EQ(kHostsProcs.range("procs", 2, 100).ranks(), (Sizes{2, 3, 6, 7}));
  EXPECT_EQ(kHostsProcs.range("hosts", Range{1, 2}).ranks(), (Sizes{4, 5, 6, 7}));
  expectConfigError([] { kHostsProcs.range("procs", 0, 4, 0); },
                    "dimension 'procs': step must be at least 1, got 0");
  expectConfigError([] { kHostsProcs.range("procs", 0, 4, -1); },
                    "dimension 'procs': step must be at least 1, got -1");
  expectConfigError([] { kHostsProcs.range("procs", 4); },
                    "dimension 'procs' has size 4; range begin 4 is out of range");
  expectConfigError([] { kHostsProcs.range("procs", -2); },
                    "dimension 'procs' has size 4; range begin -2 is out of range");
  expectConfigError([] { kHostsProcs.range("procs", 2, 1); },
                    "dimension 'procs': range [2, 1) is empty");
}

TEST(Shape, SelectAppliesIndicesAndRangesByLabel) {
  Shape s = kHostsProcs.select({{"hosts", 1}, {"procs", Range{0, kEnd, 2}}});
  EXPECT_EQ(s.labels(), (Labels{"procs"}));
  EXPECT_EQ(s.ranks(), (Sizes{4, 6}));
  EXPECT_EQ(kHostsProcs.select({}), kHostsProcs);
  // Removing "hosts" first does not move "procs".
  EXPECT_EQ(kHostsProcs.select({{"hosts", 0}, {"procs", 3}}).ranks(), (Sizes{3}));
}

TEST(Shape, FlattenKeepsTheRanksInOrder) {
  EXPECT_EQ(kHostsProcs.flatten("all"), (Shape{{"all", 8}}));
  EXPECT_EQ(kHostsProcs.at("hosts", 1).flatten("all").ranks(), (Sizes{4, 5, 6, 7}));
  // Every other proc of each host: 0 2 4 6, evenly spaced.
  Shape even = kHostsProcs.range("procs", 0, kEnd, 2).flatten("all");
  EXPECT_EQ(even.slice(), Slice(0, {4}, {2}));
  EXPECT_EQ(Shape().flatten("all"), (Shape{{"all", 1}}));
  expectConfigError([] { kHostsProcs.range("procs", 0, 3).flatten("all"); },
                    "cannot flatten shape {hosts=2, procs=3} into 'all': its ranks are not evenly "
                    "spaced in row-major order (slice {offset=0, sizes=[2, 3], strides=[4, 1]})");
  expectConfigError([] { kHostsProcs.flatten(""); },
                    "cannot flatten shape {hosts=2, procs=4} into an empty label");
}

TEST(Shape, RenameChangesOneLabel) {
  Shape s = kHostsProcs.rename("procs", "gpus");
  EXPECT_EQ(s.labels(), (Labels{"hosts", "gpus"}));
  EXPECT_EQ(s.slice(), kHostsProcs.slice());
  EXPECT_EQ(kHostsProcs.rename("procs", "procs"), kHostsProcs);
  expectConfigError([] { kHostsProcs.rename("hosts", "procs"); },
                    "cannot rename 'hosts' to 'procs': shape {hosts=2, procs=4} already has "
                    "dimension 'procs'");
  expectConfigError([] { kHostsProcs.rename("hosts", ""); },
                    "cannot rename 'hosts' of shape {hosts=2, procs=4} to an empty label");
}

TEST(Shape, SplitMakesSeveralDimensionsOfOne) {
  Shape s = kHostsProcs.split("procs", {{"a", 2}, {"b", 2}});
  EXPECT_EQ(s, (Shape{{"hosts", 2}, {"a", 2}, {"b", 2}}));
  EXPECT_EQ(kHostsProcs.split("procs", {{"procs", 2}, {"b", 2}}).labels(),
            (Labels{"hosts", "procs", "b"}));
  EXPECT_EQ(kHostsProcs.split("procs", {{"gpus", 4}}), kHostsProcs.rename("procs", "gpus"));
  Shape odd = kHostsProcs.range("procs", 1, kEnd, 2).split("hosts", {{"x", 1}, {"y", 2}});
  EXPECT_EQ(odd.ranks(), (Sizes{1, 3, 5, 7}));
  expectConfigError(
      [] {
        kHostsProcs.split("procs", {{"a", 2}, {"b", 3}});
      },
      "split of 'procs' (size 4) into a=2 x b=3 = 6 does not match");
  expectConfigError(
      [] {
        kHostsProcs.split("procs", {{"a", 0}, {"b", 3}});
      },
      "split of 'procs' (size 4): part 'a' has size 0");
  expectConfigError([] { kHostsProcs.split("procs", {}); },
                    "split of 'procs' (size 4) into no dimensions");
  expectConfigError(
      [] {
        kHostsProcs.split("procs", {{"hosts", 2}, {"b", 2}});
      },
      "dimension 'hosts' appears twice in shape labels [hosts, hosts, b]");
  expectConfigError(
      [] {
        kHostsProcs.split("procs", {{"a", 2}, {"a", 2}});
      },
      "dimension 'a' appears twice in shape labels [hosts, a, a]");
}

TEST(Shape, EqualityComparesLabelsAndSlice) {
  EXPECT_EQ(kHostsProcs, (Shape{{"hosts", 2}, {"procs", 4}}));
  EXPECT_NE(kHostsProcs, (Shape{{"hosts", 2}, {"gpus", 4}}));
  EXPECT_NE(kHostsProcs, (Shape{{"hosts", 4}, {"procs", 2}}));
  EXPECT_NE(kHostsProcs.at("hosts", 0), kHostsProcs.at("hosts", 1));
}

TEST(Shape, SerializationRoundTrips) {
  Shape s = kHostsProcs.range("procs", 1, kEnd, 2).split("hosts", {{"x", 1}, {"y", 2}});
  EXPECT_EQ(wire::fromBytes<Shape>(wire::toBytes(s)), s);
  EXPECT_EQ(wire::fromBytes<Shape>(wire::toBytes(Shape())), Shape());
}

// The same archive layout as Shape, without its validation.
struct RawShape {
  Labels labels;
  Slice slice;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& labels& slice;
  }
};

TEST(Shape, DecodingAnInvalidShapeIsAProtocolError) {
  EXPECT_EQ(wire::toBytes(RawShape{{"hosts", "procs"}, Slice::rowMajor({2, 4})}),
            wire::toBytes(kHostsProcs));
  EXPECT_THROW(wire::fromBytes<Shape>(wire::toBytes(RawShape{{"a", "a"}, Slice::rowMajor({2, 4})})),
               ProtocolError);
  EXPECT_THROW(wire::fromBytes<Shape>(wire::toBytes(RawShape{{"a"}, Slice::rowMajor({2, 4})})),
               ProtocolError);
}

// ---- Properties against brute force ----------------------------------------

// What a derived shape should hold, kept without any stride arithmetic: for
// each remaining label, the indices of the original row-major dimension it
// still selects; indices fixed by at() go into the base.
struct Model {
  std::size_t base = 0;
  Labels labels;
  Sizes strides;               // original row-major stride, per current dimension
  std::vector<Sizes> indices;  // per current dimension

  explicit Model(const std::vector<Dim>& dims) {
    Sizes sizes;
    for (const auto& [label, size] : dims) {
      labels.push_back(label);
      sizes.push_back(size);
      Sizes all(size);
      for (std::size_t i = 0; i < size; ++i) all[i] = i;
      indices.push_back(all);
    }
    strides = Slice::rowMajor(sizes).strides();
  }

  std::size_t find(const std::string& label) const {
    return static_cast<std::size_t>(std::find(labels.begin(), labels.end(), label) -
                                    labels.begin());
  }

  void at(const std::string& label, std::size_t i) {
    std::size_t d = find(label);
    base += indices[d][i] * strides[d];
    labels.erase(labels.begin() + static_cast<std::ptrdiff_t>(d));
    strides.erase(strides.begin() + static_cast<std::ptrdiff_t>(d));
    indices.erase(indices.begin() + static_cast<std::ptrdiff_t>(d));
  }

  void range(const std::string& label, std::size_t begin, std::size_t end, std::size_t step) {
    std::size_t d = find(label);
    Sizes kept;
    for (std::size_t i = begin; i < std::min(end, indices[d].size()); i += step) {
      kept.push_back(indices[d][i]);
    }
    indices[d] = kept;
  }

  // Every (coordinates, rank), in row-major order.
  std::vector<std::pair<Coords, std::size_t>> enumerate() const {
    std::vector<std::pair<Coords, std::size_t>> out;
    Sizes position(indices.size(), 0);
    while (true) {
      Coords coords;
      std::size_t rank = base;
      for (std::size_t d = 0; d < indices.size(); ++d) {
        coords[labels[d]] = position[d];
        rank += indices[d][position[d]] * strides[d];
      }
      out.emplace_back(coords, rank);
      std::size_t d = indices.size();
      while (d > 0 && ++position[d - 1] == indices[d - 1].size()) position[--d] = 0;
      if (d == 0) return out;
    }
  }
};

void checkAgainstModel(const Shape& s, const Model& model) {
  SCOPED_TRACE(s.toString() + " " + s.slice().toString());
  ASSERT_EQ(s.labels(), model.labels);
  auto expected = model.enumerate();
  Sizes ranks;
  for (const auto& entry : expected) ranks.push_back(entry.second);
  ASSERT_EQ(s.ranks(), ranks);
  ASSERT_EQ(s.size(), ranks.size());
  for (const auto& [coords, rank] : expected) {
    ASSERT_EQ(s.rank(coords), rank);
    ASSERT_EQ(s.coordinates(rank), coords);
  }
  std::set<std::size_t> members(ranks.begin(), ranks.end());
  for (std::size_t r = 0; r <= *members.rbegin() + 3; ++r) {
    ASSERT_EQ(s.contains(r), members.count(r) == 1) << "rank " << r;
  }
  ASSERT_EQ(wire::fromBytes<Shape>(wire::toBytes(s)), s);
}

std::int64_t pick(std::mt19937& rng, std::int64_t low, std::int64_t high) {
  return std::uniform_int_distribution<std::int64_t>(low, high)(rng);
}

std::vector<Dim> randomDims(std::mt19937& rng, std::size_t max_size) {
  static const Labels kLabels{"hosts", "procs", "gpus", "cores"};
  std::vector<Dim> dims(static_cast<std::size_t>(pick(rng, 1, 4)));
  for (std::size_t d = 0; d < dims.size(); ++d) {
    dims[d] = {kLabels[d],
               static_cast<std::size_t>(pick(rng, 1, static_cast<std::int64_t>(max_size)))};
  }
  std::shuffle(dims.begin(), dims.end(), rng);
  return dims;
}

TEST(ShapeProperty, SlicedShapesMatchBruteForce) {
  std::mt19937 rng(1234);
  for (int round = 0; round < 500; ++round) {
    std::vector<Dim> dims = randomDims(rng, 5);
    Shape s(dims);
    Model model(dims);
    checkAgainstModel(s, model);
    int steps = static_cast<int>(pick(rng, 1, 4));
    for (int k = 0; k < steps && s.dims() > 0; ++k) {
      const std::string label = s.labels()[static_cast<std::size_t>(
          pick(rng, 0, static_cast<std::int64_t>(s.dims()) - 1))];
      auto size = static_cast<std::int64_t>(s.size(label));
      bool by_map = pick(rng, 0, 1) == 0;  // select() with one entry, or at()/range()
      if (pick(rng, 0, 2) == 0) {
        std::int64_t index = pick(rng, 0, size - 1);
        s = by_map ? s.select({{label, index}}) : s.at(label, index);
        model.at(label, static_cast<std::size_t>(index));
      } else {
        Range r{pick(rng, 0, size - 1), 0, pick(rng, 1, 3)};
        r.end = pick(rng, 0, 3) == 0 ? kEnd : pick(rng, r.begin + 1, size + 2);
        s = by_map ? s.select({{label, r}}) : s.range(label, r.begin, r.end, r.step);
        model.range(label, static_cast<std::size_t>(r.begin),
                    static_cast<std::size_t>(std::min<std::int64_t>(r.end, size)),
                    static_cast<std::size_t>(r.step));
      }
      checkAgainstModel(s, model);
      if (HasFatalFailure()) return;
    }
  }
}

TEST(ShapeProperty, SplitThenFlattenRoundTrips) {
  std::mt19937 rng(99);
  for (int round = 0; round < 500; ++round) {
    Shape s(randomDims(rng, 6));
    const std::string label =
        s.labels()[static_cast<std::size_t>(pick(rng, 0, static_cast<std::int64_t>(s.dims()) - 1))];
    // Random factors of the size, under fresh labels.
    std::size_t n = s.size(label);
    std::vector<Dim> parts;
    while (n > 1 || parts.empty()) {
      Sizes divisors;
      for (std::size_t k = 1; k <= n; ++k) {
        if (n % k == 0) divisors.push_back(k);
      }
      std::size_t k = divisors[static_cast<std::size_t>(
          pick(rng, 0, static_cast<std::int64_t>(divisors.size()) - 1))];
      parts.emplace_back("part" + std::to_string(parts.size()), k);
      n /= k;
    }
    Shape split = s.split(label, parts);
    SCOPED_TRACE(s.toString() + " split into " + split.toString());
    ASSERT_EQ(split.ranks(), s.ranks());
    ASSERT_EQ(split.flatten("all"), s.flatten("all"));
    ASSERT_EQ(split.flatten("all"), (Shape{{"all", s.size()}}));
    // One dimension: split then flatten under its label gives it back.
    Shape line{{label, s.size(label)}};
    ASSERT_EQ(line.split(label, parts).flatten(label), line);
    ASSERT_EQ(wire::fromBytes<Shape>(wire::toBytes(split)), split);
  }
}

}  // namespace
}  // namespace crown::mesh
