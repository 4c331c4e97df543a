// Shards as ATen tensors and back, sharing memory both ways: an ATen
// result is kept by its at::Tensor (AtenOwner), which hands it back to
// ATen, or to Python, as itself.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

#include "crown/tensor/local_tensor.h"

namespace crown::python::aten {

/// Keeps an ATen tensor's memory alive for the engine.
struct AtenOwner final : tensor::Owner {
  explicit AtenOwner(at::Tensor t) : tensor(std::move(t)) {}
  at::Tensor tensor;
};

/// ATen's type of `type`.
at::ScalarType atenType(tensor::ScalarType type);
/// crown's type of `type`, or nothing for one crown has none of (complex, ...).
std::optional<tensor::ScalarType> crownType(at::ScalarType type);

/// The shard as an ATen tensor over its memory (its own when ATen made it).
/// Nothing for device memory that ATen did not make.
std::optional<at::Tensor> toAten(const tensor::LocalTensor& shard);
/// The ATen tensor as a shard; throws c10::Error for a type crown has none of.
tensor::LocalTensor fromAten(const at::Tensor& t);

}  // namespace crown::python::aten
