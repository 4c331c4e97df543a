// Transfers: how the engines move a mesh tensor's shards to another mesh's
// engines (a Transfer command: to_mesh, slice_mesh). Between procs over MPI
// point-to-point on the service thread (THR-1): per route the sender sends a
// header (the shard's type and shape, or the failure that stands for it) and
// then the bytes, and the receiver allocates from the header. So a poisoned
// source poisons the result instead of leaving the receiver waiting, and a
// lost peer fails the wait (MpiService::abandonPeer) instead of hanging it.
// Within one proc the sender hands the shard over in memory, at the same
// point of its stream, so the target sees the tensor as it was there.
#pragma once

#include "crown/actor/proc.h"
#include "crown/tensor/command.h"
#include "tensor/ref_table.h"

namespace crown::tensor::detail {

/// The source side, on the source tensor's stream: sends this rank's shard
/// of `command.source` (`source`, null when not defined here) along every
/// route from this rank, and returns once MPI is done with the bytes, so
/// later commands may write the shard. A lost receiver is left out: its own
/// side fails.
void sendShards(Proc& proc, const Transfer& command, const RefTable::Value* source);

/// The target side: the shard from world rank `from` (this proc's own: what
/// its source engine hands over), or the failure that poisons the result
/// (the source's, or the transfer's own: `from` lost, a header that does not
/// decode, no memory for it).
RefTable::Value receiveShard(Proc& proc, const Transfer& command, Rank from);

}  // namespace crown::tensor::detail
