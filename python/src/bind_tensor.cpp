// Distributed tensors for Python: the controller's TensorClient (the
// engines of a mesh, refs, batched commands, fetches), and the kernels
// through which every engine runs recorded torch ops: "torch" with real
// torch in Python (crown/tensor/_worker.py), "aten" through ATen in C++ with
// no GIL (crown._aten, native_torch.h), falling back to Python for what it
// does not take. Shards cross into Python without a copy: as the torch
// tensor that holds them (crown._aten, once loaded, or TorchOwner), or as a
// numpy array over the engine's memory (the Python side makes it a torch
// tensor with from_numpy). Waits release the GIL; the Python kernel takes
// it (Gil) on the engine's thread.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>

#include "bind_tensor.h"
#include "bindings.h"
#include "crown/tensor/engine.h"
#include "crown/tensor/kernel.h"
#include "crown/tensor/tensor_mesh.h"
#include "gil.h"
#include "native_torch.h"
#include "program_wait.h"

namespace py = pybind11;

namespace crown::python {
namespace {

using namespace crown::tensor;

// crown._aten's table, once crown.tensor._worker has installed it.
std::atomic<const NativeTorch*> nativeTorch{nullptr};

// Keeps a Python object (a torch tensor) alive for the engine.
struct TorchOwner final : Owner {
  explicit TorchOwner(py::object tensor) : object(std::move(tensor)) {}
  ~TorchOwner() override {
    if (!Py_IsInitialized()) {
      object.release();  // the interpreter is gone: nothing left to free it with
      return;
    }
    Gil gil;
    object = py::object();
  }
  py::object object;
};

// Holds what a numpy array shows (a shard's owner, or fetched bytes).
struct Keep {
  std::shared_ptr<Owner> owner;
  std::string bytes;
};

const char* numpyName(ScalarType type) {
  switch (type) {
    case ScalarType::boolean: return "bool";
    case ScalarType::bf16:
      throw py::type_error("a bfloat16 shard has no numpy form: convert it to float32 first");
    default: return scalarName(type);
  }
}

py::array numpyOver(ScalarType type, const std::vector<std::int64_t>& shape,
                    const std::vector<std::int64_t>& strides, void* data,
                    std::unique_ptr<Keep> keep) {
  std::vector<py::ssize_t> byteStrides;
  for (auto s : strides) byteStrides.push_back(static_cast<py::ssize_t>(s * elementSize(type)));
  py::capsule base(keep.release(), [](void* p) { delete static_cast<Keep*>(p); });
  return py::array(py::dtype(numpyName(type)), std::vector<py::ssize_t>(shape.begin(), shape.end()),
                   byteStrides, data, base);
}

// A shard as Python sees it: its own torch tensor, or a numpy array over it.
py::object toPython(const LocalTensor& tensor) {
  if (auto* torch = dynamic_cast<TorchOwner*>(tensor.owner().get())) return torch->object;
  if (const NativeTorch* native = nativeTorch.load()) {
    if (PyObject* object = native->toPython(tensor))
      return py::reinterpret_steal<py::object>(object);
    if (PyErr_Occurred()) throw py::error_already_set();
  }
  // A device shard that no torch tensor holds (an NCCL collective's result):
  // a numpy array over device memory would crash at its first read.
  if (tensor.device().kind != DeviceKind::cpu) {
    throw py::type_error(tensor.describe() + " on cuda:" + std::to_string(tensor.device().index) +
                         " is a collective's result in device memory, which Python cannot take "
                         "yet: reduce in place (reduce_) or fetch it");
  }
  auto keep = std::make_unique<Keep>();
  keep->owner = tensor.owner();
  return numpyOver(tensor.dtype(), tensor.shape(), tensor.strides(), tensor.data(),
                   std::move(keep));
}

py::object toPython(TensorData data) {
  auto keep = std::make_unique<Keep>();
  keep->bytes = std::move(data.bytes);
  void* bytes = keep->bytes.data();
  return numpyOver(data.dtype, data.shape, contiguousStrides(data.shape), bytes, std::move(keep));
}

// torch's dtype objects are singletons: their ScalarType, by identity (under the GIL).
ScalarType scalarOfDtype(py::handle dtype) {
  static auto* known = new std::map<PyObject*, ScalarType>;
  auto it = known->find(dtype.ptr());
  if (it != known->end()) return it->second;
  std::string name = py::str(dtype);
  if (name.rfind("torch.", 0) == 0) name = name.substr(6);
  ScalarType type = scalarFromName(name);
  dtype.inc_ref();  // kept: the map holds its address
  known->emplace(dtype.ptr(), type);
  return type;
}

// A torch tensor as a shard, sharing its memory.
LocalTensor fromTorch(py::handle tensor) {
  if (const NativeTorch* native = nativeTorch.load()) {
    LocalTensor shard;
    if (native->fromPython(tensor.ptr(), shard)) return shard;
  }
  ScalarType type = scalarOfDtype(tensor.attr("dtype"));
  auto shape = tensor.attr("shape").cast<std::vector<std::int64_t>>();
  auto strides = tensor.attr("stride")().cast<std::vector<std::int64_t>>();
  auto data = reinterpret_cast<void*>(tensor.attr("data_ptr")().cast<std::uintptr_t>());
  Device where;
  if (tensor.attr("is_cuda").cast<bool>()) {
    where.kind = DeviceKind::cuda;
    py::object index = tensor.attr("device").attr("index");
    where.index = index.is_none() ? 0 : index.cast<int>();
  }
  return LocalTensor::wrap(type, std::move(shape), std::move(strides), data,
                           std::make_shared<TorchOwner>(py::reinterpret_borrow<py::object>(tensor)),
                           where);
}

py::tuple failureTuple(const Failure& f) {
  return py::make_tuple("failed", f.op, f.rank, f.message, f.traceback, f.origin,
                        f.rankLost ? py::object(py::int_(f.lostRank)) : py::object(py::none()));
}

class TensorFetch {
 public:
  explicit TensorFetch(Future<FetchReply> future) : future_(std::move(future)) {}
  /// ("ok", array) or ("failed", op, rank, message, traceback, origin, lost
  /// rank or None).
  py::tuple get(std::optional<double> timeout) {
    FetchReply reply;
    {
      py::gil_scoped_release release;
      ProgramWait abortable;  // fails with UnhandledFault when the job ends
      reply = timeout ? future_.get(std::chrono::milliseconds(static_cast<std::int64_t>(*timeout * 1000)))
                      : future_.get();
    }
    if (!reply.ok) return failureTuple(reply.failure);
    return py::make_tuple("ok", toPython(std::move(reply.data)));
  }
  bool done() const { return future_.isReady(); }

 private:
  Future<FetchReply> future_;
};

// The "torch" kernel: crown.tensor._worker.run(blob, inputs, rank, coords)
// -> list of tensors, on the engine's thread with the GIL; imported on the
// first torch command, so that `import crown` does not import torch. A
// Python exception becomes a KernelError; crown.tensor's KernelError brings
// its op, message and worker traceback.
std::vector<LocalTensor> runTorch(KernelContext& context, const std::vector<LocalTensor>& inputs,
                                  std::string_view blob) {
  Gil gil;
  try {
    // Leaked on purpose: it would be freed after the interpreter at exit.
    static py::object* run = new py::object(py::module_::import("crown.tensor._worker").attr("run"));
    py::list args;
    for (const LocalTensor& input : inputs) args.append(toPython(input));
    // An engine's coordinates do not change: one dict per engine, made once
    // (checked against them: a later engine may live at the same address).
    using Coords = std::map<std::string, std::size_t>;
    static auto* coordsOf = new std::map<const void*, std::pair<Coords, py::object>>;
    auto& [seen, coords] = (*coordsOf)[&context.coords];
    if (!coords || seen != context.coords) {
      py::dict made;
      for (const auto& [label, index] : context.coords) made[py::str(label)] = index;
      seen = context.coords;
      coords = std::move(made);
    }
    py::object out = (*run)(py::bytes(blob.data(), blob.size()), args, context.rank, coords);
    std::vector<LocalTensor> results;
    for (py::handle tensor : out) results.push_back(fromTorch(tensor));
    return results;
  } catch (py::error_already_set& e) {
    py::object value = e.value();
    if (py::hasattr(value, "op") && py::hasattr(value, "traceback") &&
        py::hasattr(value, "message")) {
      throw KernelError(py::str(value.attr("op")), py::str(value.attr("message")),
                        py::str(value.attr("traceback")));
    }
    throw KernelError(context.call.kernel,
                      std::string(py::str(e.type().attr("__name__"))) + ": " +
                          std::string(py::str(value)),
                      "");
  }
}

std::vector<LocalTensor> runTorchKernel(KernelContext& context,
                                        const std::vector<LocalTensor>& inputs) {
  return runTorch(context, inputs, context.call.blob);
}

// crown._aten's table, loaded by the first "aten" call of the process (GIL
// taken once: crown.tensor._worker.prepare seeds torch for this rank, as
// the Python kernel's first call does, and installs the table); nullptr
// where crown._aten was not built.
const NativeTorch* loadNativeTorch(Rank rank) {
  static std::once_flag loaded;
  std::call_once(loaded, [rank] {
    Gil gil;
    py::module_::import("crown.tensor._worker").attr("prepare")(rank);
  });
  return nativeTorch.load();
}

// The "aten" kernel: blob is the op's native form, a NUL, and its pickled
// form (_native.py), which the Python kernel runs when the native path does
// not take the op.
std::vector<LocalTensor> runAtenKernel(KernelContext& context,
                                       const std::vector<LocalTensor>& inputs) {
  std::string_view blob = context.call.blob;
  std::size_t cut = blob.find('\0');
  if (cut == std::string_view::npos) throw Error("an \"aten\" call without its pickled form");
  if (const NativeTorch* native = loadNativeTorch(context.rank)) {
    std::vector<LocalTensor> results;
    std::string op, message;
    switch (native->run(blob.substr(0, cut), inputs, results, op, message)) {
      case NativeOutcome::ran: return results;
      case NativeOutcome::failed:
        throw KernelError(op, message, "(in ATen, called by crown's engine: no Python frames)");
      case NativeOutcome::usePython: break;
    }
  }
  return runTorch(context, inputs, blob.substr(cut + 1));
}

// What call_torch and call_aten do: append a Call of `kernel`.
auto recordOp(std::string kernel) {
  return [kernel = std::move(kernel)](TensorClient& client, std::vector<RefId> inputs,
                                      std::vector<RefId> results, const py::bytes& blob,
                                      std::string origin) {
    appendOrFlush(client, Call{kernel, Refs(inputs.begin(), inputs.end()),
                               Refs(results.begin(), results.end()), ScalarType::f32, {}, {},
                               std::string(blob), std::move(origin)});
  };
}

}  // namespace

// Recording costs microseconds: the GIL is let go only for a flush (which
// may wait, FLO-1), not for every command.
void appendOrFlush(TensorClient& client, Command command) {
  if (!client.append(std::move(command))) return;
  py::gil_scoped_release release;
  client.flush();
}

const NativeTorch* installedNativeTorch() { return nativeTorch.load(); }

void bindTensor(py::module_& m) {
  py::class_<TensorFetch>(m, "TensorFetch")
      .def("get", &TensorFetch::get, py::arg("timeout") = py::none())
      .def("done", &TensorFetch::done);

  py::class_<TensorClient, std::shared_ptr<TensorClient>>(m, "TensorClient")
      .def(py::init([](const mesh::Shape& shape, std::uint64_t seed) {
             py::gil_scoped_release release;  // the spawn waits for every engine
             return std::make_shared<TensorClient>(ProcMesh(shape), seed);
           }),
           py::arg("shape"), py::arg("seed") = 0)
      .def_property_readonly("shape", &TensorClient::shape)
      .def_property_readonly("engine_local", &TensorClient::engineLocal)
      .def("batches_sent", &TensorClient::batchesSent)
      .def("move_to", &TensorClient::moveTo, py::arg("target"), py::arg("ref"), py::arg("result"),
           py::arg("view") = false, py::arg("origin") = "", py::call_guard<py::gil_scoped_release>())
      .def("new_ref", &TensorClient::newRef)
      .def("new_refs", &TensorClient::newRefs, py::arg("count"))
      .def(
          "call",
          [](TensorClient& client, std::string kernel, std::vector<RefId> inputs,
             std::vector<RefId> results, const py::bytes& blob, std::string origin,
             const std::string& dtype, std::vector<std::int64_t> ints, std::vector<double> reals) {
            Call call{std::move(kernel), Refs(inputs.begin(), inputs.end()),
                      Refs(results.begin(), results.end()),
                      scalarFromName(dtype), std::move(ints), std::move(reals),
                      std::string(blob), std::move(origin)};
            appendOrFlush(client, std::move(call));
          },
          py::arg("kernel"), py::arg("inputs"), py::arg("results"), py::arg("blob") = py::bytes(),
          py::arg("origin") = "", py::arg("dtype") = "float32",
          py::arg("ints") = std::vector<std::int64_t>{}, py::arg("reals") = std::vector<double>{})
      // call() of the "torch" kernel (blob: the pickled op) or the "aten" one
      // (blob: its native form, a NUL, the pickle), with nothing to convert
      // but what changes per op: one of these per recorded torch op.
      .def("call_torch", recordOp("torch"), py::arg("inputs"), py::arg("results"),
           py::arg("blob"), py::arg("origin"))
      .def("call_aten", recordOp("aten"), py::arg("inputs"), py::arg("results"), py::arg("blob"),
           py::arg("origin"))
      .def(
          "collective",
          [](TensorClient& client, const std::string& kind, const std::string& reduction,
             std::vector<std::string> dims, RefId source, RefId result, std::int64_t root,
             std::string origin, std::optional<std::vector<std::int64_t>> expectShape,
             const std::string& expectDtype) {
            static const std::map<std::string, CollectiveKind> kinds = {
                {"allreduce", CollectiveKind::allreduce},
                {"reduce_scatter", CollectiveKind::reduceScatter},
                {"allgather", CollectiveKind::allgather},
                {"all_to_all", CollectiveKind::alltoall},
                {"broadcast", CollectiveKind::broadcast}};
            auto it = kinds.find(kind);
            if (it == kinds.end()) throw py::value_error("unknown collective '" + kind + "'");
            Collective c{it->second, reductionFromName(reduction), std::move(dims), source, result,
                         root, std::move(origin)};
            if (expectShape) {  // the source as recorded (a CPU tensor)
              c.expected = true;
              c.expectShape = std::move(*expectShape);
              c.expectType = scalarFromName(expectDtype);
            }
            appendOrFlush(client, std::move(c));
          },
          py::arg("kind"), py::arg("reduction"), py::arg("dims"), py::arg("source"),
          py::arg("result"), py::arg("root") = 0, py::arg("origin") = "",
          py::arg("expect_shape") = py::none(), py::arg("expect_dtype") = "float32")
      .def("switch_stream",
           [](TensorClient& client, StreamId stream) { appendOrFlush(client, SwitchStream{stream}); })
      .def("borrow",
           [](TensorClient& client, std::uint64_t id, RefId source, RefId result, StreamId lender,
              bool mutableBorrow) {
             appendOrFlush(client, Borrow{id, source, result, lender, mutableBorrow});
           })
      .def("return_borrow",
           [](TensorClient& client, std::uint64_t id) { appendOrFlush(client, ReturnBorrow{id}); })
      .def("drop", &TensorClient::drop)
      .def(
          "delete",
          [](TensorClient& client, std::vector<RefId> refs) {
            appendOrFlush(client, Delete{std::move(refs)});
          },
          "Records the deletion of refs on every proc, in order with the other commands.")
      .def("flush", &TensorClient::flush, py::call_guard<py::gil_scoped_release>())
      .def(
          "sync",
          [](TensorClient& client) {
            std::vector<EngineStats> stats;
            {
              py::gil_scoped_release release;
              stats = client.sync();
            }
            py::list out;
            for (const auto& s : stats) out.append(py::dict(py::arg("commands") = s.commands,
                                                            py::arg("refs") = s.refs));
            return out;
          },
          "Waits for every engine; returns each one's {commands, refs}, by rank in the mesh.")
      .def(
          "fetch",
          [](TensorClient& client, RefId ref, std::size_t rank) {
            py::gil_scoped_release release;
            return TensorFetch(client.fetchReply(ref, rank));
          },
          py::arg("ref"), py::arg("rank"));

  registerKernel("torch", runTorchKernel);
  registerKernelGuard("torch", [] { return std::static_pointer_cast<void>(std::make_shared<Gil>()); });
  registerKernel("aten", runAtenKernel);
  // It holds nothing (no GIL): its guard only makes a run of its calls one
  // task of the stream thread instead of one each.
  registerKernelGuard("aten", [] { return std::shared_ptr<void>(); });
  m.def(
      "install_native_torch",
      [](py::capsule table) {
        auto* native = static_cast<const NativeTorch*>(table.get_pointer());
        if (std::string_view(table.name()) != kNativeTorchCapsule ||
            native->version != kNativeTorchVersion)
          throw py::value_error("crown._aten is from another build of crown: rebuild both");
        nativeTorch.store(native);
      },
      "Installs crown._aten's table (crown.tensor._worker does, once).");

  // An actor of this proc reads (or defines) its engine's refs: a mesh tensor
  // passed to an endpoint arrives as this rank's shard; rref stores what an
  // endpoint returns.
  auto engineHere = [](std::uint64_t local) {
    ActorId id{Proc::current().rank(), local};
    // The engine registers with its first batch, which may come after the
    // actor's message: wait for it a while.
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (true) {
      if (Engine* engine = Engine::find(id)) return engine;
      if (std::chrono::steady_clock::now() > until)
        throw Error("no tensor engine " + std::to_string(local) + " on rank " +
                    std::to_string(id.rank) + ": the tensor's mesh does not hold this rank");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  };
  m.def("engine_shard", [engineHere](std::uint64_t local, RefId ref, std::uint64_t batches) {
    LocalTensor shard;
    {
      py::gil_scoped_release release;
      shard = engineHere(local)->shard(ref, batches);
    }
    return toPython(shard);
  });
  m.def("engine_define", [engineHere](std::uint64_t local, RefId ref, py::object tensor) {
    LocalTensor shard = fromTorch(tensor);
    Engine* engine;
    {
      py::gil_scoped_release release;
      engine = engineHere(local);
    }
    engine->define(ref, std::move(shard));
  });
  m.def("tensor_kernels", &kernelNames, "The names of the registered kernels.");
}

}  // namespace crown::python
