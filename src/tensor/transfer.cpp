// Transfers: between procs a header, then the bytes in chunks that MPI's
// int counts can carry; within one proc, a hand-over table.
#include "tensor/transfer.h"

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>

#include "crown/wire/serialize.h"

namespace crown::tensor::detail {

namespace {

// Tags of world point-to-point messages that transfers use: the upper half
// of MPI's guaranteed range (0..32767), one per transfer id, so that two
// transfers in flight between the same pair of ranks (from engines of two
// meshes, which post in no agreed order) never take each other's messages.
constexpr int kFirstTag = 16384;
constexpr int kTags = 16384;
// A header holds a shape or a failure; a failure's text is cut to fit.
constexpr std::size_t kHeaderBytes = 64 << 10;
constexpr std::size_t kTextBytes = 16 << 10;
constexpr std::size_t kChunkBytes = std::size_t{1} << 30;

struct ShardHeader {
  bool ok = false;
  ScalarType dtype = ScalarType::f32;
  std::vector<std::int64_t> shape;
  Failure failure;  ///< when not ok
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& ok& dtype& shape& failure;
  }
};

// Shards handed from a source engine to a target engine of the same proc,
// by (transfer id, rank: simulated procs share a process). The target
// waits for its shard; the source always leaves one (a failure included).
// Leaked: engines may outlive the statics.
class HandOver {
 public:
  static HandOver& instance() {
    static HandOver* table = new HandOver;
    return *table;
  }
  void put(std::uint64_t id, Rank rank, RefTable::Value value) {
    {
      std::lock_guard lock(mutex_);
      shards_.insert_or_assign({id, rank}, std::move(value));
    }
    arrived_.notify_all();
  }
  RefTable::Value take(std::uint64_t id, Rank rank) {
    std::unique_lock lock(mutex_);
    arrived_.wait(lock, [&] { return shards_.count({id, rank}) != 0; });
    auto it = shards_.find({id, rank});
    RefTable::Value value = std::move(it->second);
    shards_.erase(it);
    return value;
  }

 private:
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::map<std::pair<std::uint64_t, Rank>, RefTable::Value> shards_;
};

int tagOf(const Transfer& command) { return kFirstTag + static_cast<int>(command.id % kTags); }

std::string cut(std::string text) {
  if (text.size() > kTextBytes) text.resize(kTextBytes);
  return text;
}

// What this rank sends: its shard as a contiguous CPU tensor, or why not.
ShardHeader headerFor(const Proc& proc, const Transfer& command, const RefTable::Value* source,
                      LocalTensor& dense) {
  ShardHeader header;
  auto fail = [&](std::string message) {
    header.failure = Failure{"to_mesh", proc.rank(), std::move(message), {}, command.origin};
  };
  if (!source) {
    fail("its input (ref " + std::to_string(command.source) + ") is not defined here");
  } else if (auto* poison = std::get_if<RefTable::Poison>(source)) {
    header.failure = **poison;
    header.failure.message = cut(header.failure.message);
    header.failure.traceback = cut(header.failure.traceback);
  } else if (const auto& shard = std::get<LocalTensor>(*source);
             shard.device().kind != DeviceKind::cpu) {
    fail(shard.describe() +
         " is on a GPU: to_mesh between procs moves CPU tensors only; "
         "move it to the CPU first (t.cpu())");
  } else {
    dense = shard.contiguousCopy();
    header.ok = true;
    header.dtype = dense.dtype();
    header.shape = dense.shape();
  }
  return header;
}

// This proc's own route: the shard itself (a view), a copy, or why not.
RefTable::Value handedOver(const Proc& proc, const Transfer& command,
                           const RefTable::Value* source) {
  if (!source) {
    return std::make_shared<const Failure>(
        Failure{"to_mesh",
                proc.rank(),
                "its input (ref " + std::to_string(command.source) + ") is not defined here",
                {},
                command.origin});
  }
  const auto* shard = std::get_if<LocalTensor>(source);
  // A GPU shard is handed over as it is: the engines have no device copy.
  if (!shard || command.view || shard->device().kind != DeviceKind::cpu) return *source;
  try {
    return shard->clone();
  } catch (const std::exception& e) {
    return std::make_shared<const Failure>(
        Failure{"to_mesh", proc.rank(), e.what(), {}, command.origin});
  }
}

}  // namespace

void sendShards(Proc& proc, const Transfer& command, const RefTable::Value* source) {
  std::vector<Rank> to;
  for (const auto& [from, dest] : command.routes) {
    if (from != proc.rank()) continue;
    if (dest != proc.rank()) {
      to.push_back(dest);
    } else {
      HandOver::instance().put(command.id, proc.rank(), handedOver(proc, command, source));
    }
  }
  if (to.empty()) return;
  LocalTensor dense;
  const wire::Bytes header = wire::toBytes(headerFor(proc, command, source, dense));
  MpiService& mpi = proc.mpi();
  const int tag = tagOf(command);
  std::vector<Future<void>> sends;
  for (Rank rank : to) {
    std::optional<Rank> dest = mpi.worldPosition(rank);
    if (!dest) continue;  // outside this rank's MPI world: the receiver says so
    sends.push_back(mpi.send(Comm::world(), *dest, tag, header.data(), header.size()));
    if (!dense.defined()) continue;
    const char* bytes = static_cast<const char*>(dense.data());
    for (std::size_t at = 0; at < dense.nbytes(); at += kChunkBytes) {
      sends.push_back(mpi.send(Comm::world(), *dest, tag, bytes + at,
                               std::min(kChunkBytes, dense.nbytes() - at)));
    }
  }
  for (auto& sent : sends) {
    try {
      sent.get();
    } catch (const std::exception&) {  // NOLINT: a lost receiver fails on its own side
    }
  }
}

RefTable::Value receiveShard(Proc& proc, const Transfer& command, Rank from) {
  if (from == proc.rank()) return HandOver::instance().take(command.id, from);
  auto failure = [&](std::string message, bool lost = false) {
    Failure f{"to_mesh", proc.rank(), std::move(message), {}, command.origin};
    f.rankLost = lost;
    f.lostRank = lost ? from : 0;
    return RefTable::Value(std::make_shared<const Failure>(std::move(f)));
  };
  MpiService& mpi = proc.mpi();
  const int tag = tagOf(command);
  std::optional<Rank> source = mpi.worldPosition(from);
  if (!source) {
    return failure("rank " + std::to_string(from) + " is outside rank " +
                   std::to_string(proc.rank()) +
                   "'s MPI world (procs of different spawn_procs calls, and replacements, do not "
                   "share one), so no shard moves between them over MPI");
  }
  try {
    std::string bytes(kHeaderBytes, '\0');
    bytes.resize(mpi.recv(Comm::world(), *source, tag, bytes.data(), bytes.size()).get());
    auto header = wire::fromBytes<ShardHeader>(bytes.data(), bytes.size());
    if (!header.ok)
      return RefTable::Value(std::make_shared<const Failure>(std::move(header.failure)));
    LocalTensor shard;
    try {
      shard = LocalTensor::allocate(header.dtype, header.shape);
    } catch (const std::exception& e) {
      // Take the sender's chunks all the same (each fails, truncated, and
      // is gone), so that its stream does not wait for us for good.
      std::int64_t total =
          elementCount(header.shape) * static_cast<std::int64_t>(elementSize(header.dtype));
      char sink = 0;
      for (std::int64_t at = 0; at < total; at += static_cast<std::int64_t>(kChunkBytes)) {
        try {
          mpi.recv(Comm::world(), *source, tag, &sink, 1).get();
        } catch (const std::exception&) {  // NOLINT: truncated, as meant
        }
      }
      return failure(e.what());
    }
    char* data = static_cast<char*>(shard.data());
    for (std::size_t at = 0; at < shard.nbytes(); at += kChunkBytes) {
      std::size_t want = std::min(kChunkBytes, shard.nbytes() - at);
      std::size_t got = mpi.recv(Comm::world(), *source, tag, data + at, want).get();
      if (got != want) {
        return failure("the shard from rank " + std::to_string(from) + " was cut short (" +
                       std::to_string(got) + " of " + std::to_string(want) + " bytes)");
      }
    }
    return RefTable::Value(std::move(shard));
  } catch (const ProcessLost& e) {
    return failure(e.what(), true);
  } catch (const std::exception& e) {
    return failure("receiving the shard from rank " + std::to_string(from) + ": " + e.what());
  }
}

}  // namespace crown::tensor::detail
