// What the tensor bindings share: bind_tensor.cpp (the TensorClient) and
// tensor_fast_record.cpp (the controller's hot recording path) append
// commands to a client the same way.
#pragma once

#include "crown/tensor/tensor_mesh.h"

namespace crown::python {

/// Appends `command` to the client's batch and, when that fills it, flushes
/// with the GIL let go (the flush may wait, FLO-1). GIL held on entry.
void appendOrFlush(tensor::TensorClient& client, tensor::Command command);

}  // namespace crown::python
