// LocalTensor: strided copies both ways, element types, the wire form, and
// the error of a shard that does not fit in memory.
#include "crown/tensor/local_tensor.h"

#include <gtest/gtest.h>

#include <numeric>

#include "crown/common/error.h"

namespace crown::tensor {
namespace {

LocalTensor iota(std::vector<std::int64_t> shape) {
  LocalTensor t = LocalTensor::allocate(ScalarType::f32, std::move(shape));
  std::iota(t.data<float>(), t.data<float>() + t.numel(), 0.0f);
  return t;
}

TEST(LocalTensor, ATransposedViewCopiesOutInItsOwnOrderAndBack) {
  LocalTensor m = iota({2, 3});  // [[0 1 2] [3 4 5]]
  LocalTensor t = LocalTensor::wrap(ScalarType::f32, {3, 2}, {1, 3}, m.data(), m.owner());
  EXPECT_FALSE(t.contiguous());
  LocalTensor dense = t.contiguousCopy();
  ASSERT_TRUE(dense.contiguous());
  std::vector<float> got(dense.data<float>(), dense.data<float>() + 6);
  EXPECT_EQ(got, (std::vector<float>{0, 3, 1, 4, 2, 5}));

  LocalTensor tens = LocalTensor::allocate(ScalarType::f32, {3, 2});
  for (int i = 0; i < 6; ++i) tens.data<float>()[i] = 10.0f * static_cast<float>(i);
  t.assign(tens);  // writes through the view into m
  std::vector<float> back(m.data<float>(), m.data<float>() + 6);
  EXPECT_EQ(back, (std::vector<float>{0, 20, 40, 10, 30, 50}));
}

TEST(LocalTensor, DescribesItselfAndHoldsOneItem) {
  EXPECT_EQ(iota({4, 5}).describe(), "float32[4, 5]");
  EXPECT_EQ(LocalTensor::zeros(ScalarType::i64, {}).describe(), "int64[]");
  EXPECT_EQ(iota({1, 1}).item(), 0.0);
  EXPECT_THROW(iota({2}).item(), ConfigError);
}

TEST(LocalTensor, NamesRoundTripAndMpiRefusesHalfTypesSayingWhatToDo) {
  for (auto type : {ScalarType::boolean, ScalarType::u8, ScalarType::i8, ScalarType::i16,
                    ScalarType::i32, ScalarType::i64, ScalarType::f16, ScalarType::bf16,
                    ScalarType::f32, ScalarType::f64})
    EXPECT_EQ(scalarFromName(scalarName(type)), type);
  EXPECT_THROW(scalarFromName("float8"), ConfigError);
  EXPECT_EQ(mpiType(ScalarType::f64), DType::f64);
  try {
    mpiType(ScalarType::bf16);
    FAIL() << "bfloat16 has an MPI type";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("float32"), std::string::npos) << e.what();
  }
}

TEST(LocalTensor, TheWireFormRoundTripsAndRefusesShortBytes) {
  LocalTensor m = iota({3, 4});
  LocalTensor back = fromData(toData(m));
  EXPECT_EQ(back.shape(), m.shape());
  EXPECT_EQ(std::vector<float>(back.data<float>(), back.data<float>() + 12),
            std::vector<float>(m.data<float>(), m.data<float>() + 12));
  TensorData cut = toData(m);
  cut.bytes.resize(10);
  EXPECT_THROW(fromData(cut), ProtocolError);
}

TEST(LocalTensor, AShardThatDoesNotFitSaysHowBigItWas) {
  try {
    LocalTensor::allocate(ScalarType::f32, {1 << 22, 1 << 22});  // 64 TiB
    FAIL() << "64 TiB were allocated";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("out of memory"), std::string::npos) << what;
    EXPECT_NE(what.find("float32[4194304, 4194304]"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace crown::tensor
