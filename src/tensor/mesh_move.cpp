// to_mesh on the controller: which proc's shard goes where (transferRoutes)
// and the two halves of a Transfer, one for each mesh's engines.
#include <atomic>
#include <set>

#include "crown/tensor/tensor_mesh.h"

namespace crown::tensor {

std::vector<std::pair<Rank, Rank>> transferRoutes(const mesh::Shape& from, const mesh::Shape& to) {
  std::vector<std::pair<Rank, Rank>> routes;
  bool sameDims = true;
  for (const auto& [label, size] : from.sizes()) {
    if (!to.hasDim(label) || to.size(label) != size) sameDims = false;
  }
  if (sameDims) {
    for (std::size_t rank : to.ranks()) {
      std::map<std::string, std::size_t> coords;
      for (const auto& [label, index] : to.coordinates(rank)) {
        if (from.hasDim(label)) coords[label] = index;
      }
      routes.emplace_back(static_cast<Rank>(from.rank(coords)), static_cast<Rank>(rank));
    }
    return routes;
  }
  for (std::size_t rank : to.ranks()) {
    if (!from.contains(rank)) {
      throw ConfigError("to_mesh from " + from.toString() + " to " + to.toString() +
                        ": the target mesh has dimensions the tensor's mesh lacks or sizes "
                        "that differ, and rank " +
                        std::to_string(rank) +
                        " of it holds no shard of the tensor. Give the target every dimension of "
                        "the tensor's mesh, of the same size (the shards go by coordinates), or "
                        "slice the tensor's own mesh");
    }
    routes.emplace_back(static_cast<Rank>(rank), static_cast<Rank>(rank));
  }
  return routes;
}

void TensorClient::moveTo(TensorClient& target, RefId ref, RefId result, bool view,
                          std::string origin) {
  // Unique per controller: the transfer's MPI tag (transfer.cpp).
  static std::atomic<std::uint64_t> nextTransfer{1};
  Transfer t;
  t.id = nextTransfer++;
  t.source = ref;
  t.result = result;
  t.view = view;
  t.routes = transferRoutes(shape(), target.shape());
  t.origin = std::move(origin);
  std::lock_guard lock(viewGroupsMutex());
  if (view) joinViewGroupLocked(target);
  // What either mesh was given before goes first, the target's ordered
  // after ours as every flush of a view group is (AwaitEngine).
  flushGroupLocked();
  target.flushGroupLocked();
  Transfer sending = t;
  sending.sending = true;
  append(std::move(sending));
  // Both halves go out now: a source engine waits (its stream held) until
  // its receivers take the bytes, so a receive left in the target's batch
  // would stall every later command of the source, a fetch included.
  flushLocked();
  // The receive waits for the send by itself. An AwaitEngine for the send's
  // batch must not come before it: it could not end before the receive has
  // run (the sender of a big shard waits for its receiver).
  target.awaited_[serial_] = batchesSent_;
  target.append(std::move(t));
  target.flushLocked();
}

}  // namespace crown::tensor
