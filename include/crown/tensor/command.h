// The commands a controller sends to the tensor engine on every proc of a
// mesh, batched into one cast (CommandBatch), and the requests that read the
// engine's state back (FetchShard, Sync). Refs are ids the controller gives
// out: each names one tensor on every proc (each proc its own shard). Plain
// values, serialized with Boost.Serialization; any thread.
#pragma once

#include <algorithm>
#include <boost/container/small_vector.hpp>
#include <boost/serialization/array_wrapper.hpp>
#include <boost/serialization/collection_size_type.hpp>
#include <boost/serialization/split_member.hpp>
#include <cstdint>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "crown/mesh/shape.h"
#include "crown/tensor/local_tensor.h"
#include "crown/tensor/shared_text.h"
#include "crown/wire/serialize.h"

namespace crown::tensor {

using RefId = std::uint64_t;
/// A call's refs, up to four held inline (most calls name one to three): a
/// call recorded or decoded allocates nothing for them (issue 45). On the
/// wire, as a std::vector<RefId> is.
using Refs = boost::container::small_vector<RefId, 4>;

/// Runs the kernel registered as `kernel` (kernel.h) on `inputs` and defines
/// `results` with what it returns. What a kernel reads besides its inputs
/// (shapes, scalars, an encoded op for front-end kernels) travels in
/// dtype, ints, reals and blob.
struct Call {
  std::string kernel;
  Refs inputs;
  Refs results;
  ScalarType dtype = ScalarType::f32;
  std::vector<std::int64_t> ints;
  std::vector<double> reals;
  SharedText blob;
  SharedText origin;  ///< where the controller issued it (file:line), for errors
  /// What a batch writes of it, the only way a Call travels: its blob and
  /// origin by their place in the batch's table of texts (CommandBatch).
  template <class Archive>
  void saveShared(Archive& archive, std::uint32_t blobIndex, std::uint32_t originIndex) const {
    archive << kernel;
    saveRefs(archive, inputs);
    saveRefs(archive, results);
    archive << dtype << ints << reals << blobIndex << originIndex;
  }
  template <class Archive>
  void loadShared(Archive& archive, const std::vector<SharedText>& texts) {
    std::uint32_t blobIndex = 0, originIndex = 0;
    archive >> kernel;
    loadRefs(archive, inputs);
    loadRefs(archive, results);
    archive >> dtype >> ints >> reals >> blobIndex >> originIndex;
    if (blobIndex >= texts.size() || originIndex >= texts.size())
      throw ProtocolError("a tensor call names text " +
                          std::to_string(std::max(blobIndex, originIndex)) + " of a batch of " +
                          std::to_string(texts.size()));
    blob = texts[blobIndex];
    origin = texts[originIndex];
  }

 private:
  // Boost writes a vector of numbers as its count, then its elements.
  template <class Archive>
  static void saveRefs(Archive& archive, const Refs& refs) {
    const boost::serialization::collection_size_type count(refs.size());
    archive << count;
    if (!refs.empty()) archive << boost::serialization::make_array(refs.data(), refs.size());
  }
  template <class Archive>
  static void loadRefs(Archive& archive, Refs& refs) {
    boost::serialization::collection_size_type count;
    archive >> count;  // no more than the bytes left (crown's archive checks)
    refs.resize(count);
    if (count != 0) archive >> boost::serialization::make_array(refs.data(), refs.size());
  }
};

enum class CollectiveKind : std::uint8_t {
  allreduce,      ///< every member gets the reduction of all
  reduceScatter,  ///< member i gets block i (of dimension 0) of the reduction
  allgather,      ///< every member gets all sources stacked on a new dimension 0
  alltoall,       ///< block j (of dimension 0) of member i goes to block i of member j
  broadcast,      ///< every member gets member `root`'s source
};
enum class Reduction : std::uint8_t { sum, avg, min, max, product };
const char* collectiveName(CollectiveKind kind);
const char* reductionName(Reduction reduction);
/// "sum", "avg", "min", "max", "product"; throws ConfigError otherwise.
Reduction reductionFromName(const std::string& name);

/// A collective over the members that share this proc's coordinates outside
/// `dims` (labels of the engine's mesh). `result` == `source` works in place.
struct Collective {
  CollectiveKind kind = CollectiveKind::allreduce;
  Reduction reduction = Reduction::sum;
  std::vector<std::string> dims;
  RefId source = 0;
  RefId result = 0;
  std::int64_t root = 0;  ///< broadcast: the root's index among the members
  std::string origin;
  /// The source's shape and type as the controller recorded them, when it
  /// knows them (`expected`): then a small collective moves its data while
  /// the members agree, not after (Collectives::run).
  bool expected = false;
  std::vector<std::int64_t> expectShape{};
  ScalarType expectType = ScalarType::f32;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& kind& reduction& dims& source& result& root& origin& expected& expectShape& expectType;
  }
};

/// Forgets refs (the controller's tensors died).
struct Delete {
  std::vector<RefId> refs;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& refs;
  }
};

using StreamId = std::uint32_t;

/// The commands after this one run on `stream` (0 is the default stream,
/// one made on first use), until the next SwitchStream. Each stream runs
/// its commands in order on its own thread, beside the others.
struct SwitchStream {
  StreamId stream = 0;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& stream;
  }
};

/// Hands `source`, as it is at this point of stream `lender`, to the stream
/// of this command (the borrower) as `result`. Until ReturnBorrow{id}, the
/// controller keeps the lender off the tensor (off writing it, for a shared
/// borrow); the lender's commands after the return wait for the borrower to
/// be done with it.
struct Borrow {
  std::uint64_t id = 0;
  RefId source = 0;
  RefId result = 0;
  StreamId lender = 0;
  bool mutableBorrow = false;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& id& source& result& lender& mutableBorrow;
  }
};
/// Ends borrow `id` (on the borrower's stream): its result ref goes.
struct ReturnBorrow {
  std::uint64_t id = 0;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& id;
  }
};

/// A mesh tensor's shards moved to the engines of another mesh (to_mesh,
/// slice_mesh): the same command goes to both meshes, `sending` set in the
/// source mesh's copy. Each route (from, to) is a pair of world ranks: at
/// this point of its stream, the source engine on `from` sends its shard of
/// `source` (over MPI to another proc; within one proc, handed over: a copy,
/// or with `view` the shard itself), and the target engine on `to` defines
/// `result` from it. A failed source poisons the result with its failure.
struct Transfer {
  bool sending = false;
  bool view = false;
  std::uint64_t id = 0;  ///< unique per controller: names the hand-over, makes the MPI tag
  RefId source = 0;
  RefId result = 0;
  std::vector<std::pair<Rank, Rank>> routes;
  std::string origin;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& sending& view& id& source& result& routes& origin;
  }
};

/// The commands after this one, on every stream, wait until this proc's
/// engine of actor `engine` (another mesh's, on the same procs) has been
/// given `batches` batches and run them. The controller sends it between
/// meshes that share shards (slice_mesh's views): a read or write through
/// one mesh then comes after the other's earlier writes, in program order,
/// though the two meshes' casts travel apart.
struct AwaitEngine {
  std::uint64_t engine = 0;  ///< the other engines' actor id, the same on every proc
  std::uint64_t batches = 0;
  mesh::Shape where;  ///< the other engines' procs: on the rest there is nothing to wait for
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& engine& batches& where;
  }
};

using Command = std::variant<Call, Collective, Delete, SwitchStream, Borrow, ReturnBorrow,
                             Transfer, AwaitEngine>;

/// What a flush casts: commands run in this order on every proc (ORD-1
/// keeps the batches of one controller in order too). The Calls' blobs and
/// origins travel once each, in a table of the batch's distinct texts: a
/// loop's 256 calls of a few ops carry a few hundred bytes of them, not
/// 100 KB, and every engine's calls share them.
struct CommandBatch {
  std::vector<Command> commands;

  template <class Archive>
  void save(Archive& archive, unsigned) const {
    // The same text object first (one pointer), then the same text.
    std::unordered_map<const void*, std::uint32_t> byIdentity;
    std::unordered_map<std::string_view, std::uint32_t> byText;
    std::vector<std::string_view> texts;
    auto place = [&](const SharedText& text) {
      auto known = byIdentity.find(text.identity());
      if (known != byIdentity.end()) return known->second;
      auto [it, added] = byText.try_emplace(text.view(), static_cast<std::uint32_t>(texts.size()));
      if (added) texts.push_back(text.view());
      byIdentity.emplace(text.identity(), it->second);
      return it->second;
    };
    std::vector<std::pair<std::uint32_t, std::uint32_t>> places;
    for (const Command& command : commands) {
      if (const auto* call = std::get_if<Call>(&command))
        places.emplace_back(place(call->blob), place(call->origin));
    }
    std::uint64_t textCount = texts.size();
    archive << textCount;
    for (std::string_view text : texts) {
      std::string copy(text);
      archive << copy;
    }
    std::uint64_t count = commands.size();
    archive << count;
    std::size_t call = 0;
    for (const Command& command : commands) {
      std::uint8_t index = static_cast<std::uint8_t>(command.index());
      archive << index;
      std::visit(
          [&](const auto& alternative) {
            if constexpr (std::is_same_v<std::decay_t<decltype(alternative)>, Call>) {
              alternative.saveShared(archive, places[call].first, places[call].second);
              ++call;
            } else {
              archive << alternative;
            }
          },
          command);
    }
  }
  template <class Archive>
  void load(Archive& archive, unsigned) {
    std::uint64_t textCount = 0;
    archive >> textCount;
    std::vector<SharedText> texts;
    for (std::uint64_t i = 0; i < textCount; ++i) {
      std::string text;
      archive >> text;  // a short archive throws before a huge count allocates
      texts.emplace_back(std::move(text));
    }
    std::uint64_t count = 0;
    archive >> count;
    commands.clear();
    commands.reserve(std::min<std::uint64_t>(count, 1 << 16));
    for (std::uint64_t i = 0; i < count; ++i) {
      std::uint8_t index = 0;
      archive >> index;
      switch (index) {
        case 0: {
          Call c;
          c.loadShared(archive, texts);
          commands.push_back(std::move(c));
          break;
        }
        case 1: commands.push_back(read<Collective>(archive)); break;
        case 2: commands.push_back(read<Delete>(archive)); break;
        case 3: commands.push_back(read<SwitchStream>(archive)); break;
        case 4: commands.push_back(read<Borrow>(archive)); break;
        case 5: commands.push_back(read<ReturnBorrow>(archive)); break;
        case 6: commands.push_back(read<Transfer>(archive)); break;
        case 7: commands.push_back(read<AwaitEngine>(archive)); break;
        default: throw ProtocolError("unknown tensor command " + std::to_string(index));
      }
    }
  }
  BOOST_SERIALIZATION_SPLIT_MEMBER()

 private:
  template <class T, class Archive>
  static T read(Archive& archive) {
    T value;
    archive >> value;
    return value;
  }
};

/// Why a ref holds no tensor: the first command that failed on its way
/// (deferred errors: later commands carry this root cause on).
struct Failure {
  std::string op;         ///< the kernel or collective that failed
  Rank rank = 0;          ///< where it failed
  std::string message;
  std::string traceback;  ///< the worker's, for front-end kernels
  std::string origin;     ///< the controller's file:line that issued it
  bool rankLost = false;  ///< it failed because rank `lostRank` was lost
  Rank lostRank = 0;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& op& rank& message& traceback& origin& rankLost& lostRank;
  }
  /// "matmul failed on rank 2 (issued at train.py:14): shapes ...".
  std::string describe() const;
};

/// Reads one ref's shard. The reply is a FetchReply.
struct FetchShard {
  RefId ref = 0;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& ref;
  }
};
struct FetchReply {
  bool ok = false;
  TensorData data;  ///< when ok
  Failure failure;  ///< when not
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& ok& data& failure;
  }
};

/// Answers (with the engine's EngineStats) once every command sent before
/// it has run.
struct Sync {
  template <class Archive>
  void serialize(Archive&, unsigned) {}
};
struct EngineStats {
  std::uint64_t commands = 0;  ///< run since the engine started
  std::uint64_t refs = 0;      ///< defined (or poisoned) now
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& commands& refs;
  }
};

}  // namespace crown::tensor

CROWN_MESSAGE(crown::tensor::CommandBatch, "crown::tensor::CommandBatch");
CROWN_MESSAGE(crown::tensor::FetchShard, "crown::tensor::FetchShard");
CROWN_MESSAGE(crown::tensor::FetchReply, "crown::tensor::FetchReply");
CROWN_MESSAGE(crown::tensor::Sync, "crown::tensor::Sync");
CROWN_MESSAGE(crown::tensor::EngineStats, "crown::tensor::EngineStats");
