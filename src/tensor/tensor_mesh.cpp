// TensorClient's batching and fetches, and the C++ controller API
// (TensorMesh, DTensor) over it.
#include "crown/tensor/tensor_mesh.h"

#include <cmath>

#include "crown/common/env.h"

namespace crown::tensor {

namespace {
std::atomic<std::uint64_t> nextClientSerial{1};
}  // namespace

std::mutex& TensorClient::viewGroupsMutex() {
  static std::mutex* mutex = new std::mutex;  // leaked: clients may outlive the statics
  return *mutex;
}

TensorClient::TensorClient(const ProcMesh& procs, std::uint64_t seed)
    : engines_(procs.spawn<Engine>("tensor-engine", seed)),
      serial_(nextClientSerial++),
      batchLimit_(static_cast<std::size_t>(env::integer("CROWN_TENSOR_BATCH", 256, 1, 1 << 20))) {}

TensorClient::~TensorClient() {
  try {
    flush();  // the last deletes
  } catch (...) {  // NOLINT: the mesh may be gone at shutdown; nothing left to free then
  }
  std::lock_guard lock(viewGroupsMutex());
  if (viewGroup_) std::erase(viewGroup_->members, this);
}

void TensorClient::joinViewGroupLocked(TensorClient& other) {
  if (!viewGroup_) viewGroup_ = std::make_shared<ViewGroup>(ViewGroup{{this}});
  if (other.viewGroup_ == viewGroup_) return;
  std::vector<TensorClient*> joining{&other};
  if (other.viewGroup_) joining = other.viewGroup_->members;
  for (TensorClient* member : joining) {
    member->viewGroup_ = viewGroup_;
    viewGroup_->members.push_back(member);
  }
}

void TensorClient::flushGroupLocked() {
  if (!viewGroup_) return flushLocked();
  // The others first: what they were given before goes out before our batch
  // that awaits it.
  for (TensorClient* member : viewGroup_->members) {
    if (member != this) member->flushLocked();
  }
  flushLocked();
}

void TensorClient::flushLocked() {
  std::lock_guard lock(mutex_);
  if (!dropped_.empty()) pending_.commands.push_back(Delete{std::move(dropped_)});
  dropped_.clear();
  if (viewGroup_) {
    std::vector<Command> awaits;
    for (const TensorClient* member : viewGroup_->members) {
      if (member == this) continue;
      const std::uint64_t sent = member->batchesSent_;
      std::uint64_t& awaited = awaited_[member->serial_];
      if (sent > awaited) {
        awaits.emplace_back(AwaitEngine{member->engineLocal(), sent, member->shape()});
        awaited = sent;
      }
    }
    pending_.commands.insert(pending_.commands.begin(), awaits.begin(), awaits.end());
  }
  if (pending_.commands.empty()) return;
  CommandBatch batch = std::move(pending_);
  pending_.commands.clear();
  // Under the lock: batches leave in the order they are counted.
  engines_.broadcast(batch);
  ++batchesSent_;
  // Encoded now: the next batch fills the same vector, grown once, not
  // regrown through 1, 2, 4 ... 256 commands per batch (its last steps
  // large enough that glibc's malloc consolidates its free lists for them).
  batch.commands.clear();
  pending_.commands.swap(batch.commands);
}

RefId TensorClient::newRef() { return newRefs(1); }

RefId TensorClient::newRefs(std::size_t count) {
  std::lock_guard lock(mutex_);
  RefId first = nextRef_;
  nextRef_ += count;
  return first;
}

void TensorClient::record(Command command) {
  if (append(std::move(command))) flush();
}

bool TensorClient::append(Command command) {
  std::lock_guard lock(mutex_);
  pending_.commands.push_back(std::move(command));
  return pending_.commands.size() >= batchLimit_;
}

void TensorClient::drop(RefId ref) {
  std::lock_guard lock(mutex_);
  dropped_.push_back(ref);
}

void TensorClient::flush() {
  std::lock_guard lock(viewGroupsMutex());
  flushGroupLocked();
}

std::uint64_t TensorClient::batchesSent() const { return batchesSent_; }

Future<FetchReply> TensorClient::fetchReply(RefId ref, std::size_t rank) {
  flush();
  return Proc::current().request<FetchReply>(ActorId{static_cast<Rank>(rank), engines_.localId()},
                                             FetchShard{ref});
}

Future<LocalTensor> TensorClient::fetch(RefId ref, std::size_t rank) {
  return fetchReply(ref, rank).then([rank](Future<FetchReply> done) {
    FetchReply reply = done.get();
    if (!reply.ok) {
      throw RemoteError("crown::tensor::Failure", reply.failure.describe(),
                        static_cast<Rank>(rank), "tensor-engine");
    }
    return fromData(std::move(reply.data));
  });
}

std::vector<EngineStats> TensorClient::sync() {
  flush();
  return engines_.call<EngineStats>(Sync{}).get().values();
}

TensorMesh::TensorMesh(const ProcMesh& procs, std::uint64_t seed)
    : client_(std::make_shared<TensorClient>(procs, seed)) {}

DTensor TensorMesh::define(Call call, std::vector<std::int64_t> shape, ScalarType type) {
  return DTensor::record(client_, std::move(call), std::move(shape), type);
}

DTensor DTensor::record(const std::shared_ptr<TensorClient>& client, Call call,
                        std::vector<std::int64_t> shape, ScalarType type) {
  auto handle = std::make_shared<Handle>();
  handle->client = client;
  handle->ref = client->newRef();
  handle->shape = std::move(shape);
  handle->dtype = type;
  call.results = {handle->ref};
  client->record(std::move(call));
  return DTensor(std::move(handle));
}

DTensor TensorMesh::rand(std::vector<std::int64_t> shape, ScalarType type) {
  return define(Call{"rand", {}, {}, type, shape, {}, {}, {}}, shape, type);
}
DTensor TensorMesh::zeros(std::vector<std::int64_t> shape, ScalarType type) {
  return define(Call{"zeros", {}, {}, type, shape, {}, {}, {}}, shape, type);
}
DTensor TensorMesh::ones(std::vector<std::int64_t> shape, ScalarType type) {
  return define(Call{"ones", {}, {}, type, shape, {}, {}, {}}, shape, type);
}
DTensor TensorMesh::full(std::vector<std::int64_t> shape, double value, ScalarType type) {
  return define(Call{"fill", {}, {}, type, shape, {value}, {}, {}}, shape, type);
}
DTensor TensorMesh::arange(double start, double end, double step, ScalarType type) {
  CROWN_CHECK(step != 0, "arange with a step of 0");
  auto count = static_cast<std::int64_t>(std::max(0.0, std::ceil((end - start) / step)));
  return define(Call{"arange", {}, {}, type, {}, {start, end, step}, {}, {}}, {count}, type);
}

DTensor TensorMesh::matmul(const DTensor& a, const DTensor& b) {
  if (a.shape().size() != 2 || b.shape().size() != 2 || a.shape()[1] != b.shape()[0]) {
    throw ConfigError("matmul of [" + std::to_string(a.shape().size()) + "-d] and [" +
                      std::to_string(b.shape().size()) +
                      "-d] tensors: it takes matrices [m, k] and [k, n]");
  }
  return define(Call{"matmul", {a.ref(), b.ref()}, {}, a.dtype(), {}, {}, {}, {}},
                {a.shape()[0], b.shape()[1]}, a.dtype());
}

std::vector<DTensor> TensorMesh::call(
    const std::string& kernel, const std::vector<DTensor>& inputs,
    const std::vector<std::pair<std::vector<std::int64_t>, ScalarType>>& results,
    std::vector<std::int64_t> ints, std::vector<double> reals) {
  Call c{kernel, {}, {}, ScalarType::f32, std::move(ints), std::move(reals), {}, {}};
  for (const DTensor& input : inputs) c.inputs.push_back(input.ref());
  std::vector<DTensor> out;
  for (const auto& [shape, type] : results) {
    auto handle = std::make_shared<DTensor::Handle>();
    handle->client = client_;
    handle->ref = client_->newRef();
    handle->shape = shape;
    handle->dtype = type;
    c.results.push_back(handle->ref);
    out.push_back(DTensor(std::move(handle)));
  }
  client_->record(std::move(c));
  return out;
}

DTensor::Handle::~Handle() { client->drop(ref); }

DTensor DTensor::binary(const char* kernel, const DTensor& other) const {
  if (handle_->client != other.handle_->client)
    throw ConfigError(std::string(kernel) + " of tensors of two different meshes");
  const auto& big = shape().size() >= other.shape().size() ? *this : other;
  return record(handle_->client, Call{kernel, {ref(), other.ref()}, {}, dtype(), {}, {}, {}, {}},
                big.shape(), dtype());
}

DTensor DTensor::unary(const char* kernel, std::vector<std::int64_t> shape) const {
  return record(handle_->client, Call{kernel, {ref()}, {}, dtype(), {}, {}, {}, {}},
                std::move(shape), dtype());
}

DTensor DTensor::sum() const { return unary("sum", {}); }
DTensor DTensor::mean() const { return unary("mean", {}); }

DTensor DTensor::collective(CollectiveKind kind, const std::vector<std::string>& dims,
                            Reduction reduction, std::int64_t root,
                            std::vector<std::int64_t> resultShape) const {
  const mesh::Shape& shape = handle_->client->shape();
  for (const auto& label : dims) shape.dim(label);  // throws ConfigError for an unknown label
  auto handle = std::make_shared<Handle>();
  handle->client = handle_->client;
  handle->ref = handle_->client->newRef();
  handle->shape = std::move(resultShape);
  handle->dtype = dtype();
  // Not `expected`: a DTensor does not know its device (a kernel may put it on a GPU).
  handle_->client->record(Collective{kind, reduction, dims, ref(), handle->ref, root, {}});
  return DTensor(std::move(handle));
}

namespace {
std::int64_t groupSize(const mesh::Shape& shape, const std::vector<std::string>& dims) {
  std::int64_t size = 1;
  for (const auto& label : dims) size *= static_cast<std::int64_t>(shape.size(label));
  return size;
}
}  // namespace

DTensor DTensor::reduce(const std::vector<std::string>& dims, Reduction reduction) const {
  return collective(CollectiveKind::allreduce, dims, reduction, 0, shape());
}
DTensor DTensor::reduceScatter(const std::vector<std::string>& dims, Reduction reduction) const {
  auto resultShape = shape();
  std::int64_t members = groupSize(handle_->client->shape(), dims);
  if (resultShape.empty() || resultShape[0] % members != 0) {
    throw ConfigError("reduceScatter over " + std::to_string(members) +
                      " members needs dimension 0 to split evenly among them");
  }
  resultShape[0] /= members;
  return collective(CollectiveKind::reduceScatter, dims, reduction, 0, resultShape);
}
DTensor DTensor::allgather(const std::vector<std::string>& dims) const {
  auto resultShape = shape();
  resultShape.insert(resultShape.begin(), groupSize(handle_->client->shape(), dims));
  return collective(CollectiveKind::allgather, dims, Reduction::sum, 0, resultShape);
}
DTensor DTensor::alltoall(const std::vector<std::string>& dims) const {
  return collective(CollectiveKind::alltoall, dims, Reduction::sum, 0, shape());
}
DTensor DTensor::broadcast(const std::vector<std::string>& dims, std::int64_t root) const {
  return collective(CollectiveKind::broadcast, dims, Reduction::sum, root, shape());
}

DTensor DTensor::toMesh(TensorMesh& target) const {
  auto handle = std::make_shared<Handle>();
  handle->client = target.client_;
  handle->ref = target.client_->newRef();
  handle->shape = shape();
  handle->dtype = dtype();
  handle_->client->moveTo(*target.client_, ref(), handle->ref);
  return DTensor(std::move(handle));
}

Future<LocalTensor> DTensor::fetch(const std::map<std::string, std::size_t>& coords) const {
  const mesh::Shape& shape = handle_->client->shape();
  std::map<std::string, std::size_t> full;
  for (const auto& label : shape.labels()) full[label] = 0;
  for (const auto& [label, index] : coords) {
    shape.dim(label);  // throws ConfigError naming an unknown label
    full[label] = index;
  }
  return handle_->client->fetch(ref(), shape.rank(full));
}

}  // namespace crown::tensor
