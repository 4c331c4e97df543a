// The MPI service's typed operations (each one nonblocking MPI call, polled
// by the loop in mpi_service.cpp) and its communicators: the world, and
// those over mesh dimensions (commOver), made once and cached.
#include <algorithm>
#include <climits>
#include <numeric>

#include "bootstrap/mpi_check.h"
#include "bootstrap/mpi_service.h"

namespace crown::detail {
namespace {

MPI_Datatype mpiType(DType type) {
  switch (type) {
    case DType::i8:
      return MPI_INT8_T;
    case DType::u8:
      return MPI_UINT8_T;
    case DType::i32:
      return MPI_INT32_T;
    case DType::u32:
      return MPI_UINT32_T;
    case DType::i64:
      return MPI_INT64_T;
    case DType::u64:
      return MPI_UINT64_T;
    case DType::f32:
      return MPI_FLOAT;
    case DType::f64:
      return MPI_DOUBLE;
  }
  throw ConfigError("unknown crown::DType " + std::to_string(static_cast<int>(type)));
}

MPI_Op mpiOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return MPI_SUM;
    case ReduceOp::prod:
      return MPI_PROD;
    case ReduceOp::min:
      return MPI_MIN;
    case ReduceOp::max:
      return MPI_MAX;
  }
  throw ConfigError("unknown crown::ReduceOp " + std::to_string(static_cast<int>(op)));
}

// MPI counts are ints; larger buffers would need derived types, which no
// caller has wanted yet.
int mpiCount(std::size_t count, const std::string& what) {
  if (count > static_cast<std::size_t>(INT_MAX)) {
    throw ConfigError(what + ": " + std::to_string(count) + " is more than MPI's int counts hold");
  }
  return static_cast<int>(count);
}

}  // namespace

template <class T>
Future<T> MpiService::enqueue(std::string what, Kind kind, Comm comm, std::optional<Rank> peer,
                              std::function<void(MPI_Comm, MPI_Request&)> post,
                              std::function<T(const MPI_Status&)> value) {
  auto state = std::make_shared<FutureState<T>>();
  auto op = std::make_unique<Op>();
  op->kind = kind;
  op->what = what;
  try {
    std::lock_guard lock(mutex_);
    const CommInfo& in = info(comm);
    if (peer) {
      CROWN_CHECK(*peer < in.members.size(), what + ": rank " + std::to_string(*peer) +
                                                 " is not in a communicator of " +
                                                 std::to_string(in.members.size()));
      op->peers = {in.members[*peer]};
    } else {
      // A collective waits on every other member.
      for (Rank member : in.members)
        if (member != in.members[in.rank]) op->peers.push_back(member);
    }
    op->post = [mpiComm = in.comm, post = std::move(post)](MPI_Request& request) {
      post(mpiComm, request);
    };
  } catch (...) {
    return Future<T>::failed(std::current_exception());
  }
  op->succeed = [state, value = std::move(value)](const MPI_Status& status) {
    try {
      if constexpr (std::is_void_v<T>) {
        state->setValue(Unit{});
      } else {
        state->setValue(value(status));
      }
    } catch (...) {
      state->setError(std::current_exception());
    }
  };
  admit(std::move(op), [state](std::exception_ptr error) { state->setError(std::move(error)); });
  return Future<T>(state);
}

Future<void> MpiService::send(Comm comm, Rank peer, int tag, const void* data, std::size_t bytes) {
  int count = 0;
  try {
    count = mpiCount(bytes, "MPI_Isend");
  } catch (...) {
    return Future<void>::failed(std::current_exception());
  }
  return enqueue<void>(
      "MPI_Isend to rank " + std::to_string(peer), Kind::pointToPoint, comm, peer,
      [=](MPI_Comm mpiComm, MPI_Request& request) {
        CROWN_CHECK_MPI(
            MPI_Isend(data, count, MPI_BYTE, static_cast<int>(peer), tag, mpiComm, &request));
      },
      nullptr);
}

Future<std::size_t> MpiService::recv(Comm comm, Rank peer, int tag, void* data, std::size_t bytes) {
  int count = 0;
  try {
    count = mpiCount(bytes, "MPI_Irecv");
  } catch (...) {
    return Future<std::size_t>::failed(std::current_exception());
  }
  return enqueue<std::size_t>(
      "MPI_Irecv from rank " + std::to_string(peer), Kind::pointToPoint, comm, peer,
      [=](MPI_Comm mpiComm, MPI_Request& request) {
        CROWN_CHECK_MPI(
            MPI_Irecv(data, count, MPI_BYTE, static_cast<int>(peer), tag, mpiComm, &request));
      },
      [](const MPI_Status& status) {
        int received = 0;
        CROWN_CHECK_MPI(MPI_Get_count(&status, MPI_BYTE, &received));
        return static_cast<std::size_t>(received);
      });
}

Future<void> MpiService::broadcast(Comm comm, void* data, std::size_t bytes, Rank root) {
  int count = 0;
  try {
    count = mpiCount(bytes, "MPI_Ibcast");
    std::lock_guard lock(mutex_);
    CROWN_CHECK(root < info(comm).members.size(),
                "MPI_Ibcast: root " + std::to_string(root) + " is not in the communicator");
  } catch (...) {
    return Future<void>::failed(std::current_exception());
  }
  return enqueue<void>(
      "MPI_Ibcast", Kind::collective, comm, std::nullopt,
      [=](MPI_Comm mpiComm, MPI_Request& request) {
        CROWN_CHECK_MPI(
            MPI_Ibcast(data, count, MPI_BYTE, static_cast<int>(root), mpiComm, &request));
      },
      nullptr);
}

Future<void> MpiService::allreduce(Comm comm, void* data, std::size_t count, DType type,
                                   ReduceOp op) {
  int n = 0;
  MPI_Datatype mpiDtype;
  MPI_Op mpiReduce;
  try {
    n = mpiCount(count, "MPI_Iallreduce");
    mpiDtype = mpiType(type);
    mpiReduce = mpiOp(op);
  } catch (...) {
    return Future<void>::failed(std::current_exception());
  }
  return enqueue<void>(
      "MPI_Iallreduce", Kind::collective, comm, std::nullopt,
      [=](MPI_Comm mpiComm, MPI_Request& request) {
        CROWN_CHECK_MPI(
            MPI_Iallreduce(MPI_IN_PLACE, data, n, mpiDtype, mpiReduce, mpiComm, &request));
      },
      nullptr);
}

Future<void> MpiService::barrier(Comm comm) {
  return enqueue<void>(
      "MPI_Ibarrier", Kind::collective, comm, std::nullopt,
      [](MPI_Comm mpiComm, MPI_Request& request) {
        CROWN_CHECK_MPI(MPI_Ibarrier(mpiComm, &request));
      },
      nullptr);
}

Future<void> MpiService::allgather(Comm comm, const void* send, void* recv,
                                   std::size_t bytesEach) {
  int count = 0;
  try {
    count = mpiCount(bytesEach, "MPI_Iallgather");
  } catch (...) {
    return Future<void>::failed(std::current_exception());
  }
  return enqueue<void>(
      "MPI_Iallgather", Kind::collective, comm, std::nullopt,
      [=](MPI_Comm mpiComm, MPI_Request& request) {
        CROWN_CHECK_MPI(
            MPI_Iallgather(send, count, MPI_BYTE, recv, count, MPI_BYTE, mpiComm, &request));
      },
      nullptr);
}

Future<void> MpiService::reduceScatter(Comm comm, const void* send, void* recv,
                                       std::size_t countEach, DType type, ReduceOp op) {
  int n = 0;
  MPI_Datatype mpiDtype;
  MPI_Op mpiReduce;
  try {
    n = mpiCount(countEach, "MPI_Ireduce_scatter_block");
    mpiDtype = mpiType(type);
    mpiReduce = mpiOp(op);
  } catch (...) {
    return Future<void>::failed(std::current_exception());
  }
  return enqueue<void>(
      "MPI_Ireduce_scatter_block", Kind::collective, comm, std::nullopt,
      [=](MPI_Comm mpiComm, MPI_Request& request) {
        CROWN_CHECK_MPI(
            MPI_Ireduce_scatter_block(send, recv, n, mpiDtype, mpiReduce, mpiComm, &request));
      },
      nullptr);
}

Future<void> MpiService::alltoall(Comm comm, const void* send, void* recv,
                                  std::size_t bytesEach) {
  int count = 0;
  try {
    count = mpiCount(bytesEach, "MPI_Ialltoall");
  } catch (...) {
    return Future<void>::failed(std::current_exception());
  }
  return enqueue<void>(
      "MPI_Ialltoall", Kind::collective, comm, std::nullopt,
      [=](MPI_Comm mpiComm, MPI_Request& request) {
        CROWN_CHECK_MPI(
            MPI_Ialltoall(send, count, MPI_BYTE, recv, count, MPI_BYTE, mpiComm, &request));
      },
      nullptr);
}

void MpiService::adoptWorld(MPI_Comm world, std::vector<std::string> hosts, Rank first) {
  call([&] {
    // Errors come back as codes, so the async path can fail one future
    // instead of MPI aborting the job.
    CROWN_CHECK_MPI(MPI_Comm_set_errhandler(world, MPI_ERRORS_RETURN));
    int rank = 0, size = 0;
    CROWN_CHECK_MPI(MPI_Comm_rank(world, &rank));
    CROWN_CHECK_MPI(MPI_Comm_size(world, &size));
    CommInfo in{world, static_cast<Rank>(rank), std::vector<Rank>(static_cast<std::size_t>(size))};
    std::iota(in.members.begin(), in.members.end(), first);
    std::lock_guard lock(mutex_);
    CROWN_CHECK(comms_.empty(), "MpiService::adoptWorld called twice");
    comms_.push_back(std::move(in));
    hosts_ = std::move(hosts);
  });
}

void MpiService::adoptNoWorld(std::vector<std::string> hosts) {
  std::lock_guard lock(mutex_);
  outsideWorld_ = true;
  hosts_ = std::move(hosts);
}

Comm MpiService::commOver(const std::vector<std::size_t>& sizes,
                          const std::vector<std::size_t>& dims, std::uint32_t instance) {
  auto key = std::make_tuple(sizes, dims, instance);
  std::size_t worldSize = 0;
  Rank worldRank = 0;
  {
    std::lock_guard lock(mutex_);
    if (auto it = along_.find(key); it != along_.end()) return it->second;
    worldSize = info(Comm::world()).members.size();
    worldRank = info(Comm::world()).rank;
  }
  std::size_t product =
      std::accumulate(sizes.begin(), sizes.end(), std::size_t{1}, std::multiplies<>());
  bool increasing = !dims.empty() && std::is_sorted(dims.begin(), dims.end()) &&
                    std::adjacent_find(dims.begin(), dims.end()) == dims.end();
  if (!increasing || dims.back() >= sizes.size() || product != worldSize) {
    std::string list;
    for (std::size_t d : dims) list += (list.empty() ? "" : ",") + std::to_string(d);
    throw ConfigError("commOver: dimensions {" + list + "} of a mesh of " +
                      std::to_string(sizes.size()) + " dimensions holding " +
                      std::to_string(product) + " ranks, where the world has " +
                      std::to_string(worldSize) + " (dimensions must be distinct and increasing)");
  }
  // Row-major: the last dimension varies fastest. The communicator's
  // members share every coordinate outside `dims` (the colour: this rank's
  // index with its coordinates in `dims` zeroed) and are ordered by their
  // coordinates in `dims`, row-major among themselves (the key).
  std::vector<std::size_t> coords(sizes.size());
  for (std::size_t d = sizes.size(), rest = worldRank; d-- > 0; rest /= sizes[d])
    coords[d] = rest % sizes[d];
  std::size_t colourIndex = 0, keyIndex = 0;
  for (std::size_t d = 0; d < sizes.size(); ++d) {
    bool inside = std::find(dims.begin(), dims.end(), d) != dims.end();
    colourIndex = colourIndex * sizes[d] + (inside ? 0 : coords[d]);
    if (inside) keyIndex = keyIndex * sizes[d] + coords[d];
  }
  int colour = static_cast<int>(colourIndex);
  std::size_t coordinate = keyIndex;
  Comm made;
  call([&] {
    // Only the service thread adds to along_, one closure at a time, so a
    // second look here settles a race between two threads of this rank.
    MPI_Comm world = MPI_COMM_NULL;
    {
      std::lock_guard lock(mutex_);
      if (auto it = along_.find(key); it != along_.end()) {
        made = it->second;
        return;
      }
      world = info(Comm::world()).comm;
    }
    // Not under mutex_: the split waits for every rank, and abandonPeer,
    // submissions and stats() must not wait with it.
    CommInfo in;
    CROWN_CHECK_MPI(MPI_Comm_split(world, colour, static_cast<int>(coordinate), &in.comm));
    ++splits_;
    CROWN_CHECK_MPI(MPI_Comm_set_errhandler(in.comm, MPI_ERRORS_RETURN));
    int rank = 0, size = 0;
    CROWN_CHECK_MPI(MPI_Comm_rank(in.comm, &rank));
    CROWN_CHECK_MPI(MPI_Comm_size(in.comm, &size));
    in.rank = static_cast<Rank>(rank);
    // Who MPI actually put in it, as world ranks.
    MPI_Group group, worldGroup;
    CROWN_CHECK_MPI(MPI_Comm_group(in.comm, &group));
    CROWN_CHECK_MPI(MPI_Comm_group(world, &worldGroup));
    std::vector<int> local(static_cast<std::size_t>(size)), global(local.size());
    std::iota(local.begin(), local.end(), 0);
    CROWN_CHECK_MPI(
        MPI_Group_translate_ranks(group, size, local.data(), worldGroup, global.data()));
    CROWN_CHECK_MPI(MPI_Group_free(&group));
    CROWN_CHECK_MPI(MPI_Group_free(&worldGroup));
    in.members.assign(global.begin(), global.end());
    std::lock_guard lock(mutex_);
    made = Comm(static_cast<std::uint32_t>(comms_.size()));
    comms_.push_back(std::move(in));
    along_.emplace(key, made);
  });
  return made;
}

std::optional<Rank> MpiService::worldPosition(Rank rank) const {
  std::lock_guard lock(mutex_);
  if (comms_.empty()) return std::nullopt;  // a replacement's, or before bootstrap
  const CommInfo& world = comms_.front();
  Rank first = world.members.front();  // the world's ranks are consecutive (adoptWorld)
  if (rank < first || rank - first >= world.members.size()) return std::nullopt;
  return rank - first;
}

Comm MpiService::commOfRanks(const std::vector<Rank>& members, std::uint32_t instance) {
  auto key = std::make_pair(members, instance);
  std::vector<int> positions;  // the members' ranks in the world, as MPI_Group_incl takes them
  Rank self = 0;
  {
    std::lock_guard lock(mutex_);
    if (auto it = groups_.find(key); it != groups_.end()) return it->second;
    const CommInfo& world = info(Comm::world());
    Rank first = world.members.front();
    Rank me = world.members[world.rank];
    std::vector<Rank> sorted = members;
    std::sort(sorted.begin(), sorted.end());
    bool outside = !members.empty() && (sorted.front() < first ||
                                        sorted.back() - first >= world.members.size());
    if (members.empty() || outside ||
        std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
      throw ConfigError("commOfRanks: " + std::to_string(members.size()) +
                        " members, some repeated or not ranks of a world of " +
                        std::to_string(world.members.size()) +
                        (outside ? " (a replacement started by respawn_lost, and procs started "
                                   "by different spawn_procs calls, are outside each other's "
                                   "MPI_COMM_WORLD: MPI collectives do not reach across)"
                                 : ""));
    }
    auto at = std::find(members.begin(), members.end(), me);
    if (at == members.end()) {
      throw ConfigError("commOfRanks: rank " + std::to_string(me) +
                        " asked for a group it is not in");
    }
    self = static_cast<Rank>(at - members.begin());
    for (Rank member : members) positions.push_back(static_cast<int>(member - first));
  }
  Comm made;
  call([&] {
    MPI_Comm world = MPI_COMM_NULL;
    {
      std::lock_guard lock(mutex_);
      if (auto it = groups_.find(key); it != groups_.end()) {
        made = it->second;
        return;
      }
      world = info(Comm::world()).comm;
    }
    MPI_Group worldGroup, group;
    CROWN_CHECK_MPI(MPI_Comm_group(world, &worldGroup));
    CROWN_CHECK_MPI(MPI_Group_incl(worldGroup, static_cast<int>(positions.size()),
                                   positions.data(), &group));
    CommInfo in;
    // The tag tells apart groups made at once from the same parent; every
    // member of one group makes it with the same instance.
    int status = MPI_Comm_create_group(world, group, static_cast<int>(instance % 32768), &in.comm);
    MPI_Group_free(&group);
    MPI_Group_free(&worldGroup);
    CROWN_CHECK_MPI(status);
    CROWN_CHECK_MPI(MPI_Comm_set_errhandler(in.comm, MPI_ERRORS_RETURN));
    in.rank = self;
    in.members = members;
    std::lock_guard lock(mutex_);
    made = Comm(static_cast<std::uint32_t>(comms_.size()));
    comms_.push_back(std::move(in));
    groups_.emplace(key, made);
  });
  return made;
}

const MpiService::CommInfo& MpiService::info(Comm comm) const {
  if (comm.id() >= comms_.size()) {
    if (outsideWorld_) {
      throw ConfigError("this rank replaced a lost one (respawn_lost): it is outside the job's "
                        "MPI_COMM_WORLD, so no MPI communicator reaches it");
    }
    throw ConfigError(comms_.empty() ? "the MPI service has no communicators (before bootstrap, "
                                       "or after MPI_Finalize)"
                                     : "unknown communicator " + std::to_string(comm.id()));
  }
  return comms_[comm.id()];
}

const void* MpiService::nativeComm(Comm comm) const {
  std::lock_guard lock(mutex_);
  return &info(comm).comm;
}

Rank MpiService::commRank(Comm comm) const {
  std::lock_guard lock(mutex_);
  return info(comm).rank;
}

std::vector<Rank> MpiService::commMembers(Comm comm) const {
  std::lock_guard lock(mutex_);
  return info(comm).members;
}

}  // namespace crown::detail
