// What the tensor bindings share: bind_tensor.cpp (the TensorClient, the
// table of crown._aten) and tensor_fast_record.cpp (the controller's hot
// recording path) append commands to a client the same way and ask torch
// through the same table.
#pragma once

#include "crown/tensor/tensor_mesh.h"
#include "native_torch.h"

namespace crown::python {

/// Appends `command` to the client's batch and, when that fills it, flushes
/// with the GIL let go (the flush may wait, FLO-1). GIL held on entry.
void appendOrFlush(tensor::TensorClient& client, tensor::Command command);

/// crown._aten's table, once install_native_torch has installed it; nullptr
/// before (or where crown._aten is not built).
const NativeTorch* installedNativeTorch();

}  // namespace crown::python
