// The tensor engine on simulated procs (SIM-1): native kernels against
// references computed here, per-rank random shards, deferred errors (a
// failed command poisons what depends on it and nothing else), deletes,
// and the command batch on the wire. Collectives need MPI: here they fail,
// clearly and without hanging; tests/mpi/tensor_test.cpp runs them.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "crown/mesh/sim.h"
#include "crown/tensor/kernel.h"
#include "crown/tensor/tensor_mesh.h"

namespace crown::tensor {
namespace {

using namespace std::chrono_literals;

std::vector<double> values(const LocalTensor& t) {
  std::vector<double> out;
  LocalTensor dense = t.contiguousCopy();
  for (std::int64_t i = 0; i < dense.numel(); ++i) {
    switch (dense.dtype()) {
      case ScalarType::f32: out.push_back(dense.data<float>()[i]); break;
      case ScalarType::f64: out.push_back(dense.data<double>()[i]); break;
      case ScalarType::i64: out.push_back(static_cast<double>(dense.data<std::int64_t>()[i])); break;
      default: ADD_FAILURE() << "unexpected " << dense.describe();
    }
  }
  return out;
}

std::string failureOf(const Future<LocalTensor>& fetched) {
  try {
    fetched.get(10s);
  } catch (const RemoteError& e) {
    return e.what();
  }
  return "(no failure)";
}

// Writes reals[0] into its input in place, after a pause: a read through
// another mesh's view that did not wait for it sees the value before.
const bool kSlowWriteRegistered = [] {
  registerKernel("test.slow_write", [](KernelContext& context, const std::vector<LocalTensor>& in) {
    std::this_thread::sleep_for(200ms);
    *in.at(0).data<double>() = context.call.reals.at(0);
    return std::vector<LocalTensor>{in.at(0)};
  });
  return true;
}();

class EngineTest : public ::testing::Test {
 protected:
  mesh::SimulatedWorld sim{4, {{"dp", 2}, {"tp", 2}}};
  TensorMesh tm{sim.world(), 7};
};

TEST_F(EngineTest, FactoriesAndElementwiseKernelsGiveTheExpectedValues) {
  auto a = tm.arange(0, 6, 1, ScalarType::f64);
  auto b = tm.full({6}, 2.5, ScalarType::f64);
  EXPECT_EQ(values((a + b).fetch().get(10s)), (std::vector<double>{2.5, 3.5, 4.5, 5.5, 6.5, 7.5}));
  EXPECT_EQ(values((a - b).fetch().get(10s)), (std::vector<double>{-2.5, -1.5, -.5, .5, 1.5, 2.5}));
  EXPECT_EQ(values((a * b).fetch().get(10s)), (std::vector<double>{0, 2.5, 5, 7.5, 10, 12.5}));
  EXPECT_EQ(values((a / b).fetch().get(10s)), (std::vector<double>{0, .4, .8, 1.2, 1.6, 2}));
  EXPECT_EQ(values(tm.ones({2, 2}).fetch().get(10s)), (std::vector<double>{1, 1, 1, 1}));
  EXPECT_EQ(values(tm.zeros({3}, ScalarType::i64).fetch().get(10s)), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(a.sum().fetch().get(10s).item(), 15.0);
  EXPECT_EQ(a.mean().fetch().get(10s).item(), 2.5);
  EXPECT_EQ(tm.arange(0, 10, 3).fetch().get(10s).numel(), 4);  // 0 3 6 9
}

TEST_F(EngineTest, MatmulMatchesANaiveProductOnEveryRank) {
  auto x = tm.rand({5, 7});
  auto y = tm.rand({7, 3});
  auto z = tm.matmul(x, y);
  for (std::size_t dp = 0; dp < 2; ++dp) {
    auto xs = x.fetch({{"dp", dp}, {"tp", 1}}).get(10s);
    auto ys = y.fetch({{"dp", dp}, {"tp", 1}}).get(10s);
    auto zs = z.fetch({{"dp", dp}, {"tp", 1}}).get(10s);
    ASSERT_EQ(zs.shape(), (std::vector<std::int64_t>{5, 3}));
    for (int i = 0; i < 5; ++i) {
      for (int j = 0; j < 3; ++j) {
        double want = 0;
        for (int k = 0; k < 7; ++k) want += xs.data<float>()[i * 7 + k] * ys.data<float>()[k * 3 + j];
        EXPECT_NEAR(zs.data<float>()[i * 3 + j], want, 1e-5);
      }
    }
  }
}

TEST_F(EngineTest, EveryRankDrawsItsOwnShardAndTheSeedRepeatsThem) {
  auto r = tm.rand({64});
  auto first = values(r.fetch({{"dp", 0}, {"tp", 0}}).get(10s));
  auto other = values(r.fetch({{"dp", 1}, {"tp", 0}}).get(10s));
  EXPECT_NE(first, other);
  for (double v : first) EXPECT_TRUE(v >= 0 && v < 1) << v;
  TensorMesh again(sim.world(), 7);
  EXPECT_EQ(values(again.rand({64}).fetch({{"dp", 0}, {"tp", 0}}).get(10s)), first);
}

TEST_F(EngineTest, AFailedCommandPoisonsItsDependentsAndNothingElse) {
  auto a = tm.ones({2, 3});
  // Declared shapes the controller cannot check: the engine's matmul refuses.
  auto bad = tm.call("matmul", {a, a}, {{{2, 3}, ScalarType::f32}})[0];
  auto later = bad + a;
  auto fine = a + a;
  std::string root = failureOf(bad.fetch({{"dp", 1}, {"tp", 0}}));
  EXPECT_NE(root.find("matmul failed on rank 2"), std::string::npos) << root;
  EXPECT_NE(root.find("float32[2, 3] and float32[2, 3]"), std::string::npos) << root;
  // The dependent carries the same root cause, without running.
  EXPECT_EQ(failureOf(later.fetch({{"dp", 1}, {"tp", 0}})), root);
  EXPECT_EQ(values(fine.fetch().get(10s)), (std::vector<double>(6, 2.0)));
}

TEST_F(EngineTest, AnUnknownKernelNamesTheKnownOnes) {
  auto missing = tm.call("no-such-kernel", {}, {{{1}, ScalarType::f32}})[0];
  std::string why = failureOf(missing.fetch());
  EXPECT_NE(why.find("no kernel is registered"), std::string::npos) << why;
  EXPECT_NE(why.find("matmul"), std::string::npos) << why;
}

TEST_F(EngineTest, AKernelErrorCarriesItsOpAndTraceback) {
  registerKernel("test.fails", [](KernelContext&, const std::vector<LocalTensor>&)
                                   -> std::vector<LocalTensor> {
    throw KernelError("aten::boom", "it went boom", "Traceback: line 1");
  });
  auto failed = tm.call("test.fails", {}, {{{1}, ScalarType::f32}})[0];
  FetchReply reply = tm.client().fetchReply(failed.ref(), 3).get(10s);
  ASSERT_FALSE(reply.ok);
  EXPECT_EQ(reply.failure.op, "aten::boom");
  EXPECT_EQ(reply.failure.rank, 3u);
  EXPECT_EQ(reply.failure.message, "it went boom");
  EXPECT_EQ(reply.failure.traceback, "Traceback: line 1");
}

TEST_F(EngineTest, CollectivesWithoutMpiFailAtOnceAndTheEngineServesOn) {
  auto a = tm.ones({4});
  auto sum = a.reduce("dp");
  auto again = sum.reduce({"dp", "tp"});
  std::string why = failureOf(sum.fetch());
  EXPECT_NE(why.find("allreduce failed on rank 0"), std::string::npos) << why;
  EXPECT_NE(why.find("no MPI"), std::string::npos) << why;
  EXPECT_NE(failureOf(again.fetch()).find("no MPI"), std::string::npos);
  EXPECT_EQ(values((a + a).fetch().get(10s)), (std::vector<double>(4, 2.0)));
  EXPECT_THROW(a.reduce("no-such-dim"), ConfigError);  // refused on the controller
}

TEST_F(EngineTest, AGpuShardWithoutGpuSupportFailsItsFetchSayingSo) {
  registerKernel("test.marks_gpu", [](KernelContext&, const std::vector<LocalTensor>& in) {
    const LocalTensor& t = in.at(0);
    return std::vector<LocalTensor>{LocalTensor::wrap(t.dtype(), t.shape(), t.strides(), t.data(),
                                                      t.owner(), Device{DeviceKind::cuda, 0})};
  });
  auto onGpu = tm.call("test.marks_gpu", {tm.ones({2})}, {{{2}, ScalarType::f32}})[0];
  std::string why = failureOf(onGpu.fetch());
  EXPECT_NE(why.find("cannot copy it to the host"), std::string::npos) << why;
}

TEST_F(EngineTest, ARunOfCallsOfAGuardedKernelTakesItsGuardOnce) {
  static std::atomic<int> guards{0}, calls{0};
  registerKernel("test.guarded", [](KernelContext&, const std::vector<LocalTensor>&) {
    ++calls;
    return std::vector<LocalTensor>{LocalTensor::zeros(ScalarType::f32, {1})};
  });
  registerKernelGuard("test.guarded", [] {
    ++guards;
    return std::shared_ptr<void>();
  });
  std::vector<DTensor> keep;
  for (int i = 0; i < 10; ++i)
    keep.push_back(tm.call("test.guarded", {}, {{{1}, ScalarType::f32}})[0]);
  auto other = tm.ones({1});  // another kernel ends the run
  keep.push_back(tm.call("test.guarded", {}, {{{1}, ScalarType::f32}})[0]);
  tm.sync();
  EXPECT_EQ(calls, 4 * 11);
  EXPECT_EQ(guards, 4 * 2);  // per proc: one for the run of ten, one for the last call
}

TEST_F(EngineTest, ADroppedTensorIsDeletedOnEveryRank) {
  RefId ref;
  {
    auto a = tm.ones({8});
    ref = a.ref();
    ASSERT_EQ(tm.client().fetchReply(ref, 1).get(10s).ok, true);
  }
  tm.sync();
  for (Rank r = 0; r < 4; ++r) {
    FetchReply reply = tm.client().fetchReply(ref, r).get(10s);
    EXPECT_FALSE(reply.ok);
    EXPECT_NE(reply.failure.message.find("not defined here"), std::string::npos);
  }
}

TEST_F(EngineTest, ToMeshOfTheSameProcsHandsEachShardOverInMemory) {
  TensorMesh flat(ProcMesh(sim.world().shape().flatten("ranks")));
  auto x = tm.rand({5}, ScalarType::f64);
  auto moved = x.toMesh(flat);  // each proc keeps its own shard: no MPI
  for (std::size_t r = 0; r < 4; ++r) {
    EXPECT_EQ(values(moved.fetch({{"ranks", r}}).get(10s)),
              values(x.fetch({{"dp", r / 2}, {"tp", r % 2}}).get(10s)))
        << r;
  }
  auto broken = tm.call("no.such.kernel", {}, {{{2}, ScalarType::f64}})[0].toMesh(flat);
  try {
    broken.fetch({{"ranks", 2}}).get(10s);
    ADD_FAILURE() << "a move of a failed tensor gave data";
  } catch (const RemoteError& e) {
    EXPECT_NE(std::string(e.what()).find("no.such.kernel"), std::string::npos) << e.what();
  }
}

TEST_F(EngineTest, AViewOnAnotherMeshIsReadAndWrittenInProgramOrder) {
  TensorMesh row(ProcMesh(sim.world().shape().at("dp", 1)));  // ranks 2 and 3, as {tp: 2}
  TensorClient& grid = tm.client();
  TensorClient& slice = row.client();
  auto write = [](TensorClient& client, RefId ref, double value) {
    client.record(Call{"test.slow_write", {ref}, {ref}, ScalarType::f64, {}, {value}, {}, {}});
  };
  RefId x = grid.newRef();
  grid.record(Call{"fill", {}, {x}, ScalarType::f64, {1}, {1.0}, {}, {}});
  RefId view = slice.newRef();
  grid.moveTo(slice, x, view, /*view=*/true);
  write(grid, x, 9);
  EXPECT_EQ(slice.fetch(view, 3).get(10s).item(), 9.0);  // not 1: after the grid's write
  write(slice, view, 5);
  EXPECT_EQ(grid.fetch(x, 2).get(10s).item(), 5.0);  // and the grid's read after the slice's
  // A view of the view is ordered after the first mesh too.
  TensorMesh one(ProcMesh(sim.world().shape().at("dp", 1).at("tp", 1)));
  RefId inner = one.client().newRef();
  slice.moveTo(one.client(), view, inner, /*view=*/true);
  write(grid, x, 7);
  EXPECT_EQ(one.client().fetch(inner, 3).get(10s).item(), 7.0);
  // The grid's procs outside the slice have none of its engines: nothing to wait for there.
  write(slice, view, 3);
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(grid.fetch(x, 0).get(10s).item(), 7.0);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_EQ(grid.fetch(x, 3).get(10s).item(), 3.0);
}

TEST(TransferRoutes, FollowCoordinatesThenProcsAndNameWhatCannotBeMapped) {
  mesh::Shape grid({{"dp", 2}, {"tp", 2}});
  using Routes = std::vector<std::pair<Rank, Rank>>;
  EXPECT_EQ(transferRoutes(grid.at("dp", 0), grid.at("dp", 1)), (Routes{{0, 2}, {1, 3}}));
  EXPECT_EQ(transferRoutes(grid.at("dp", 1), grid), (Routes{{2, 0}, {3, 1}, {2, 2}, {3, 3}}));
  EXPECT_EQ(transferRoutes(grid, grid.flatten("ranks")), (Routes{{0, 0}, {1, 1}, {2, 2}, {3, 3}}));
  EXPECT_THROW(transferRoutes(grid.at("dp", 0), grid.flatten("ranks").range("ranks", 2, 4, 1)),
               ConfigError);
}

TEST(CommandBatch, EveryCommandRoundTripsOnTheWire) {
  CommandBatch batch;
  batch.commands.push_back(Call{"fill", {1, 2}, {3}, ScalarType::f64, {2, 2}, {1.5}, "blob", "a.py:3"});
  batch.commands.push_back(Collective{CollectiveKind::reduceScatter, Reduction::avg, {"dp", "tp"},
                                      3, 4, 1, "b.py:9"});
  batch.commands.push_back(Delete{{1, 2, 3}});
  batch.commands.push_back(Transfer{true, false, 7, 3, 5, {{0, 2}, {1, 1}}, "c.py:1"});
  batch.commands.push_back(AwaitEngine{12, 34, mesh::Shape({{"dp", 2}, {"tp", 2}}).at("dp", 1)});
  auto back = wire::fromBytes<CommandBatch>(wire::toBytes(batch));
  ASSERT_EQ(back.commands.size(), 5u);
  const auto& call = std::get<Call>(back.commands[0]);
  EXPECT_EQ(call.kernel, "fill");
  EXPECT_EQ(call.inputs, (Refs{1, 2}));
  EXPECT_EQ(call.dtype, ScalarType::f64);
  EXPECT_EQ(call.blob, "blob");
  EXPECT_EQ(call.origin, "a.py:3");
  const auto& collective = std::get<Collective>(back.commands[1]);
  EXPECT_EQ(collective.kind, CollectiveKind::reduceScatter);
  EXPECT_EQ(collective.reduction, Reduction::avg);
  EXPECT_EQ(collective.dims, (std::vector<std::string>{"dp", "tp"}));
  EXPECT_EQ(collective.root, 1);
  EXPECT_EQ(std::get<Delete>(back.commands[2]).refs, (std::vector<RefId>{1, 2, 3}));
  const auto& transfer = std::get<Transfer>(back.commands[3]);
  EXPECT_TRUE(transfer.sending);
  EXPECT_EQ(transfer.id, 7u);
  EXPECT_EQ(transfer.routes, (std::vector<std::pair<Rank, Rank>>{{0, 2}, {1, 1}}));
  EXPECT_EQ(transfer.origin, "c.py:1");
  const auto& await = std::get<AwaitEngine>(back.commands[4]);
  EXPECT_EQ(await.engine, 12u);
  EXPECT_EQ(await.batches, 34u);
  EXPECT_EQ(await.where.ranks(), (std::vector<std::size_t>{2, 3}));
  CommandBatch deletes;
  deletes.commands.push_back(Delete{{1}});
  std::string bytes = wire::toBytes(deletes);
  bytes[16] = 9;  // the first command's kind, after the counts of texts (none) and commands
  EXPECT_THROW(wire::fromBytes<CommandBatch>(bytes), ProtocolError);
}

TEST(CommandBatch, CallsCarryEachDistinctBlobAndOriginOnce) {
  const std::string op(300, 'x');  // a recorded op's few hundred bytes
  SharedText shared(op);
  CommandBatch batch;
  for (RefId r = 0; r < 100; ++r) {
    // Half share one text object, half bring equal text of their own.
    batch.commands.push_back(Call{"aten", {r}, {r + 1}, ScalarType::f32, {}, {},
                                  r % 2 ? shared : SharedText(op), "loop.py:7"});
  }
  batch.commands.push_back(Call{"torch", {1}, {2}, ScalarType::f32, {}, {}, "other", "loop.py:9"});
  batch.commands.push_back(Call{"fill", {}, {3}, ScalarType::f32, {}, {}, {}, {}});  // no texts
  std::string bytes = wire::toBytes(batch);
  EXPECT_LT(bytes.size(), 102 * 100 + 2 * op.size());  // ~90 bytes a call, and the op once
  auto back = wire::fromBytes<CommandBatch>(bytes);
  ASSERT_EQ(back.commands.size(), 102u);
  const auto& first = std::get<Call>(back.commands[0]);
  for (RefId r = 0; r < 100; ++r) {
    const auto& call = std::get<Call>(back.commands[r]);
    EXPECT_EQ(call.inputs, (Refs{r}));
    EXPECT_EQ(call.blob, op);
    EXPECT_EQ(call.origin, "loop.py:7");
    EXPECT_EQ(call.blob.identity(), first.blob.identity());  // one text, shared on arrival
  }
  EXPECT_EQ(std::get<Call>(back.commands[100]).blob, "other");
  EXPECT_EQ(std::get<Call>(back.commands[100]).origin, "loop.py:9");
  EXPECT_TRUE(std::get<Call>(back.commands[101]).blob.empty());
  EXPECT_TRUE(std::get<Call>(back.commands[101]).origin.empty());

  // A call naming a text the batch does not have is a protocol error, not a crash.
  CommandBatch one;
  one.commands.push_back(Call{"aten", {}, {1}, ScalarType::f32, {}, {}, "op", "a.py:1"});
  std::string tampered = wire::toBytes(one);
  std::size_t originIndex = tampered.size() - sizeof(std::uint32_t);  // the call's last field
  tampered[originIndex] = 7;
  EXPECT_THROW(wire::fromBytes<CommandBatch>(tampered), ProtocolError);
}

}  // namespace
}  // namespace crown::tensor
