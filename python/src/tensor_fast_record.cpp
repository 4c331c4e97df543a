// The controller's hot path, in C++: an out-of-place op on mesh tensors seen
// before with arguments of the same metadata and constants, recorded from
// __torch_function__ (crown/tensor/_op_cache.py's torch_function, whose hit
// path this is, step for step). crown.tensor sets tensor_torch_function as
// its Tensor's __torch_function__ when crown._aten is usable (the two
// questions only torch can answer, grad mode and requires_grad, go through
// its table, native_torch.h). Anything but a hit goes to the Python
// function, which learns it or records it the long way: this file makes the
// same keys, reads the same cache and the same state, and decides nothing
// the Python path would decide otherwise. Cost per op: torch's own
// __torch_function__ call and wrapper tensor (about 1.4 µs), then this.
//
// Threads: the recording thread, with the GIL, like the Python it replaces.
#include <pybind11/pybind11.h>

#include <atomic>
#include <boost/container/small_vector.hpp>
#include <cmath>
#include <cstring>
#include <string_view>
#include <vector>

#include "bind_tensor.h"
#include "crown/tensor/tensor_mesh.h"
#include "fast_record_caches.h"
#include "native_torch.h"

namespace py = pybind11;

namespace crown::python {
namespace {

using fast_record::CompactKey;
using fast_record::EntryMemo;
using fast_record::Places;
using fast_record::TextCache;
using tensor::RefId;
using tensor::TensorClient;

// Interned attribute names.
struct Names {
  PyObject *ref, *stream, *lentMutably, *known, *meta, *mesh, *location, *backend, *dead,
      *deleteBatch, *client, *sendDeletes, *record, *streamId, *id, *active, *noMeshDepth,
      *streamNow, *newRef;
};
Names names;

// What crown.tensor handed over (configure_tensor_fast_record), kept until
// it is configured again: the interpreter may call in until it is gone.
struct State {
  const NativeTorch* torch = nullptr;
  py::object tensorType;      // crown.tensor._tensor.Tensor
  py::object torchTensor;     // torch.Tensor: a local tensor among the arguments
  py::object meshModule;      // crown.tensor._mesh: _active, _no_mesh_depth, _stream_now
  py::object mainStream;      // _mesh.MAIN_STREAM, a Tensor's _stream unless set
  py::object tfCache;         // _op_cache._tf_cache: func -> key -> _TfEntry or None
  py::object slowPath;        // _op_cache.torch_function
  py::object attributeRead;   // the type of a getset's __get__ (t.grad)
  py::object makeWrapper;     // torch.Tensor._make_wrapper_subclass
  py::object wrapperKwnames;  // its keyword arguments, in the order they are passed
  py::object contiguousKwnames;  // the same for a contiguous tensor at offset 0
  py::object callType;        // crown.tensor._commands.Call (other backends than the engines)
  py::object engineBackend;   // crown.tensor._engine.EngineBackend
  TextCache texts;
  Places places;
  EntryMemo memo;
};
State* state = nullptr;
std::atomic<std::uint64_t> hits{0};

PyObject* intern(const char* s) { return PyUnicode_InternFromString(s); }

enum class Step { ok, slow, error };

// An attribute from an object's own dict, or `fallback` (a class default)
// when absent. Borrowed.
PyObject* own(PyObject* dict, PyObject* name, PyObject* fallback) {
  PyObject* v = PyDict_GetItemWithError(dict, name);
  return v != nullptr ? v : fallback;
}

py::object dictOf(PyObject* object) {
  return py::reinterpret_steal<py::object>(PyObject_GenericGetDict(object, nullptr));
}

// The few things one op's recording collects (its tensors, their refs and
// metadata), held inline: a heap vector each was a malloc and a free per op
// (issue 45).
template <class T>
using Few = boost::container::small_vector<T, 4>;

// _op_cache._arguments_key, for one value.
struct KeyBuilder {
  PyObject* mesh;                      // the active one; borrowed
  PyObject* streamNow;                 // borrowed
  Few<PyObject*> wrappers;             // borrowed: the arguments hold them
  Few<PyObject*> inputs;               // borrowed refs (ints), by first appearance
  Few<RefId> refs;                     // the same, as numbers

  Step key(PyObject* v, py::object& out) {
    PyTypeObject* t = Py_TYPE(v);
    if (reinterpret_cast<PyObject*>(t) == state->tensorType.ptr()) return tensorKey(v, out);
    if (t == &PyList_Type || t == &PyTuple_Type) {
      Py_ssize_t n = PySequence_Fast_GET_SIZE(v);
      PyObject** items = PySequence_Fast_ITEMS(v);
      py::tuple inner(n);
      for (Py_ssize_t i = 0; i < n; ++i) {
        py::object k;
        Step s = key(items[i], k);
        if (s != Step::ok) return s;
        PyTuple_SET_ITEM(inner.ptr(), i, k.release().ptr());
      }
      out = py::make_tuple(py::handle(reinterpret_cast<PyObject*>(t)), std::move(inner));
      return Step::ok;
    }
    // A local tensor (torch.Tensor has no __instancecheck__ of its own), or a dict.
    if (PyType_IsSubtype(t, reinterpret_cast<PyTypeObject*>(state->torchTensor.ptr())) ||
        PyDict_Check(v))
      return Step::slow;
    if (t == &PyFloat_Type && PyFloat_AS_DOUBLE(v) == 0.0) {  // -0.0 == 0.0, and their ops differ
      out = py::make_tuple(py::handle(reinterpret_cast<PyObject*>(t)), py::handle(v),
                           std::copysign(1.0, PyFloat_AS_DOUBLE(v)));
      return Step::ok;
    }
    out = py::make_tuple(py::handle(reinterpret_cast<PyObject*>(t)), py::handle(v));
    return Step::ok;
  }

  Step tensorKey(PyObject* v, py::object& out) {
    std::size_t slot = 0;
    PyObject* meta = nullptr;
    if (Step s = tensor(v, slot, meta); s != Step::ok) return s;
    out = py::make_tuple(py::int_(slot), py::handle(meta));
    return Step::ok;
  }

  // A mesh tensor argument: its slot among the op's tensors (by ref, first
  // appearance first) and its metadata; slow for what the hit path must not
  // take (dropped, another mesh than the active one, another stream, lent
  // mutably, a value the controller knows).
  Step tensor(PyObject* v, std::size_t& slot, PyObject*& meta) {
    py::object dict = dictOf(v);
    if (!dict) return Step::error;
    PyObject* ref = PyDict_GetItemWithError(dict.ptr(), names.ref);
    if (ref == nullptr || ref == Py_None) return PyErr_Occurred() ? Step::error : Step::slow;
    if (PyDict_GetItemWithError(dict.ptr(), names.mesh) != mesh)
      return PyErr_Occurred() ? Step::error : Step::slow;
    if (own(dict.ptr(), names.stream, state->mainStream.ptr()) != streamNow) return Step::slow;
    PyObject* lent = own(dict.ptr(), names.lentMutably, Py_False);
    int lentMutably = PyObject_IsTrue(lent);
    if (lentMutably != 0) return lentMutably < 0 ? Step::error : Step::slow;
    if (own(dict.ptr(), names.known, Py_None) != Py_None) return Step::slow;
    meta = PyDict_GetItemWithError(dict.ptr(), names.meta);
    if (meta == nullptr) return PyErr_Occurred() ? Step::error : Step::slow;
    RefId id = PyLong_AsUnsignedLongLong(ref);
    if (PyErr_Occurred()) return Step::error;
    slot = 0;
    while (slot < refs.size() && refs[slot] != id) ++slot;
    if (slot == refs.size()) {
      refs.push_back(id);
      inputs.push_back(ref);
      wrappers.push_back(v);
    }
    return Step::ok;
  }

  void reset() {
    wrappers.clear();
    inputs.clear();
    refs.clear();
  }

  // The compact key of func's positional arguments (EntryMemo), when each is
  // a mesh tensor, a float, an int that fits, a bool or None; `supported`
  // false otherwise (the Python key decides). Its tensors are checked and
  // slotted as for the Python key.
  Step compact(PyObject* func, PyObject* args, CompactKey& key, Few<PyObject*>& metas,
               bool& supported) {
    supported = false;
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    if (static_cast<std::size_t>(n) > CompactKey::kMaxArguments) return Step::ok;
    key.push(reinterpret_cast<std::uintptr_t>(func));
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyObject* v = PyTuple_GET_ITEM(args, i);
      PyTypeObject* t = Py_TYPE(v);
      if (reinterpret_cast<PyObject*>(t) == state->tensorType.ptr()) {
        std::size_t slot = 0;
        PyObject* meta = nullptr;
        if (Step s = tensor(v, slot, meta); s != Step::ok) return s;
        key.push(1, slot, reinterpret_cast<std::uintptr_t>(meta));
        metas.push_back(meta);
      } else if (t == &PyFloat_Type) {
        double value = PyFloat_AS_DOUBLE(v);
        std::uint64_t bits = 0;
        std::memcpy(&bits, &value, sizeof bits);
        key.push(2, bits, 0);
      } else if (t == &PyBool_Type) {
        key.push(3, v == Py_True, 0);
      } else if (t == &PyLong_Type) {
        int overflow = 0;
        long long value = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow != 0) return Step::ok;
        key.push(4, static_cast<std::uint64_t>(value), 0);
      } else if (v == Py_None) {
        key.push(5, 0, 0);
      } else {
        return Step::ok;
      }
    }
    supported = true;
    return Step::ok;
  }

  // The whole key: the arguments' keys, and (name, key) per keyword argument.
  Step arguments(PyObject* args, PyObject* kwargs, py::object& out) {
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    py::tuple positional(n);
    for (Py_ssize_t i = 0; i < n; ++i) {
      py::object k;
      Step s = key(PyTuple_GET_ITEM(args, i), k);
      if (s != Step::ok) return s;
      PyTuple_SET_ITEM(positional.ptr(), i, k.release().ptr());
    }
    if (kwargs == nullptr || PyDict_GET_SIZE(kwargs) == 0) {
      out = std::move(positional);
      return Step::ok;
    }
    py::tuple named(PyDict_GET_SIZE(kwargs));
    Py_ssize_t pos = 0, i = 0;
    PyObject *name, *value;
    while (PyDict_Next(kwargs, &pos, &name, &value)) {
      py::object k;
      Step s = key(value, k);
      if (s != Step::ok) return s;
      PyTuple_SET_ITEM(named.ptr(), i++, py::make_tuple(py::handle(name), std::move(k)).release().ptr());
    }
    out = py::make_tuple(std::move(positional), std::move(named));
    return Step::ok;
  }
};

TensorClient* engineClient(PyObject* backend) {
  py::object client = py::reinterpret_steal<py::object>(PyObject_GetAttr(backend, names.client));
  if (!client) return nullptr;
  try {
    return &client.cast<TensorClient&>();
  } catch (const py::cast_error&) {
    PyErr_SetString(PyExc_TypeError, "EngineBackend._client is not a TensorClient");
    return nullptr;
  }
}

// Whether `stride` is what torch gives `size` by itself (c10::contiguous_strides)
// and the offset 0: a wrapper made without them has them.
bool contiguousAtZero(PyObject* size, PyObject* stride, PyObject* offset) {
  if (!PyTuple_Check(size) || !PyTuple_Check(stride) || !PyLong_Check(offset) ||
      PyTuple_GET_SIZE(size) != PyTuple_GET_SIZE(stride) || PyLong_AsLongLong(offset) != 0)
    return false;
  long long expected = 1;
  for (Py_ssize_t i = PyTuple_GET_SIZE(size) - 1; i >= 0; --i) {
    long long n = PyLong_AsLongLong(PyTuple_GET_ITEM(size, i));
    if (PyLong_AsLongLong(PyTuple_GET_ITEM(stride, i)) != expected || PyErr_Occurred()) {
      PyErr_Clear();
      return false;
    }
    expected *= n > 1 ? n : 1;
  }
  return true;
}

// The new mesh tensor: Tensor(None, mesh, ref, location, meta) without its
// Python __new__ (the same attributes, set in its dict).
py::object makeTensor(PyObject* meta, PyObject* mesh, PyObject* ref, PyObject* place,
                      PyObject* stream) {
  if (!PyTuple_Check(meta) || PyTuple_GET_SIZE(meta) != 5) {
    PyErr_SetString(PyExc_TypeError, "a cached op's output metadata is not (size, stride, offset, dtype, device)");
    return py::object();
  }
  PyObject* size = PyTuple_GET_ITEM(meta, 0);
  PyObject* stride = PyTuple_GET_ITEM(meta, 1);
  PyObject* offset = PyTuple_GET_ITEM(meta, 2);
  py::object out;
  if (contiguousAtZero(size, stride, offset)) {  // torch's own strides: fewer arguments to parse
    PyObject* call[] = {state->tensorType.ptr(), size, PyTuple_GET_ITEM(meta, 3),
                        PyTuple_GET_ITEM(meta, 4)};
    out = py::reinterpret_steal<py::object>(
        PyObject_Vectorcall(state->makeWrapper.ptr(), call, 2, state->contiguousKwnames.ptr()));
  } else {
    PyObject* call[] = {state->tensorType.ptr(), size, stride, offset, PyTuple_GET_ITEM(meta, 3),
                        PyTuple_GET_ITEM(meta, 4)};
    out = py::reinterpret_steal<py::object>(
        PyObject_Vectorcall(state->makeWrapper.ptr(), call, 2, state->wrapperKwnames.ptr()));
  }
  if (!out) return out;
  py::object dict = dictOf(out.ptr());
  if (!dict || PyDict_SetItem(dict.ptr(), names.meta, meta) < 0 ||
      PyDict_SetItem(dict.ptr(), names.mesh, mesh) < 0 ||
      PyDict_SetItem(dict.ptr(), names.ref, ref) < 0 ||
      PyDict_SetItem(dict.ptr(), names.location, place) < 0 ||
      (stream != state->mainStream.ptr() && PyDict_SetItem(dict.ptr(), names.stream, stream) < 0))
    return py::object();
  return out;
}

// One hit: `out` is the new tensor; slow when the Python path must see it.
Step record(PyObject* func, PyObject* args, PyObject* kwargs, py::object& out) {
  PyObject* globals = PyModule_GetDict(state->meshModule.ptr());
  PyObject* active = PyDict_GetItemWithError(globals, names.active);
  PyObject* noMesh = PyDict_GetItemWithError(globals, names.noMeshDepth);
  PyObject* streamNow = PyDict_GetItemWithError(globals, names.streamNow);
  if (active == nullptr || noMesh == nullptr || streamNow == nullptr)
    return PyErr_Occurred() ? Step::error : Step::slow;
  if (!PyList_Check(active) || PyList_GET_SIZE(active) == 0 || PyObject_IsTrue(noMesh) != 0 ||
      reinterpret_cast<PyObject*>(Py_TYPE(func)) == state->attributeRead.ptr())
    return Step::slow;
  if (!PyTuple_Check(args) || (kwargs != nullptr && !PyDict_Check(kwargs))) return Step::slow;

  PyObject* mesh = PyList_GET_ITEM(active, PyList_GET_SIZE(active) - 1);
  KeyBuilder keys{mesh, streamNow, {}, {}, {}};
  CompactKey compact;
  Few<PyObject*> metas;
  bool compactKnown = false;
  if (kwargs == nullptr || PyDict_GET_SIZE(kwargs) == 0) {
    if (Step s = keys.compact(func, args, compact, metas, compactKnown); s != Step::ok) return s;
  }
  PyObject* entry = compactKnown ? state->memo.find(compact) : nullptr;
  if (entry == nullptr) {
    keys.reset();
    py::object key;
    if (Step s = keys.arguments(args, kwargs, key); s != Step::ok) return s;
    PyObject* table = PyDict_GetItemWithError(state->tfCache.ptr(), func);
    if (table == nullptr) return PyErr_Occurred() ? Step::error : Step::slow;
    entry = PyDict_GetItemWithError(table, key.ptr());
    if (entry == nullptr) {
      PyErr_Clear();  // not learnt yet, or a constant that does not hash (a slice)
      return Step::slow;
    }
    if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 4) return Step::slow;  // None: always slow
    if (compactKnown) state->memo.add(compact, entry, func, {metas.data(), metas.size()});
  }
  if (keys.wrappers.empty()) return Step::slow;
  if (state->torch->gradEnabled())
    for (PyObject* w : keys.wrappers)
      if (state->torch->requiresGrad(w) != 0) return Step::slow;  // autograd records it

  py::object keepEntry = py::reinterpret_borrow<py::object>(entry);  // the memo may be cleared below
  PyObject* blob = PyTuple_GET_ITEM(entry, 0);
  PyObject* meta = PyTuple_GET_ITEM(entry, 1);
  PyObject* perm = PyTuple_GET_ITEM(entry, 2);
  PyObject* native = PyTuple_GET_ITEM(entry, 3);

  py::object meshDict = dictOf(mesh);
  if (!meshDict) return Step::error;
  PyObject* backend = PyDict_GetItemWithError(meshDict.ptr(), names.backend);
  PyObject* streamId = PyDict_GetItemWithError(meshDict.ptr(), names.streamId);
  if (backend == nullptr || streamId == nullptr) return PyErr_Occurred() ? Step::error : Step::slow;
  py::object nowId = py::reinterpret_steal<py::object>(PyObject_GetAttr(streamNow, names.id));
  if (!nowId) return Step::error;
  int sameStream = PyObject_RichCompareBool(streamId, nowId.ptr(), Py_EQ);
  if (sameStream <= 0) return sameStream < 0 ? Step::error : Step::slow;  // Mesh._on_stream switches

  // Decided: a hit. What follows is what the Python path does for one.
  PyObject* dead = PyDict_GetItemWithError(meshDict.ptr(), names.dead);
  PyObject* batch = PyDict_GetItemWithError(meshDict.ptr(), names.deleteBatch);
  if (dead == nullptr || batch == nullptr) return PyErr_Occurred() ? Step::error : Step::slow;
  Py_ssize_t limit = PyLong_AsSsize_t(batch);
  if (limit == -1 && PyErr_Occurred()) return Step::error;
  if (PyList_Check(dead) && PyList_GET_SIZE(dead) >= limit) {
    py::object sent =
        py::reinterpret_steal<py::object>(PyObject_CallMethodNoArgs(mesh, names.sendDeletes));
    if (!sent) return Step::error;
  }
  bool engine = reinterpret_cast<PyObject*>(Py_TYPE(backend)) == state->engineBackend.ptr();
  TensorClient* client = engine ? engineClient(backend) : nullptr;
  if (engine && client == nullptr) return Step::error;
  RefId refId = client != nullptr ? client->newRef() : 0;
  py::object ref = client != nullptr
                       ? py::reinterpret_steal<py::object>(PyLong_FromUnsignedLongLong(refId))
                       : py::reinterpret_steal<py::object>(PyObject_CallMethodNoArgs(backend, names.newRef));
  if (!ref) return Step::error;
  py::object place = state->places.here();
  if (!place) return Step::error;
  out = makeTensor(meta, mesh, ref.ptr(), place.ptr(), streamNow);
  if (!out) return Step::error;

  // The Call's inputs: the op's tensor arguments, in perm's order.
  Py_ssize_t n = perm == Py_None ? static_cast<Py_ssize_t>(keys.inputs.size())
                                 : PyTuple_GET_SIZE(perm);
  Few<std::size_t> order(static_cast<std::size_t>(n));
  for (Py_ssize_t k = 0; k < n; ++k) {
    std::size_t at = perm == Py_None ? k : PyLong_AsSize_t(PyTuple_GET_ITEM(perm, k));
    if (at >= keys.inputs.size()) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_IndexError, "a cached op's input order is stale");
      return Step::error;
    }
    order[k] = at;
  }
  if (client != nullptr) {
    tensor::Refs inputs(static_cast<std::size_t>(n));
    for (Py_ssize_t k = 0; k < n; ++k) inputs[k] = keys.refs[order[k]];
    bool aten = native != Py_None;
    auto text = state->texts.of(aten ? native : blob);
    auto origin = state->texts.of(place.ptr());
    if (!text || !origin) return Step::error;
    // As EngineBackend.record: the "aten" kernel with the native form, else "torch".
    appendOrFlush(*client, tensor::Call{aten ? "aten" : "torch", std::move(inputs), {refId},
                                        tensor::ScalarType::f32, {}, {}, std::move(*text),
                                        std::move(*origin)});
  } else {
    py::list inputs(n);
    for (Py_ssize_t k = 0; k < n; ++k)
      PyList_SET_ITEM(inputs.ptr(), k, py::handle(keys.inputs[order[k]]).inc_ref().ptr());
    py::list results(1);
    PyList_SET_ITEM(results.ptr(), 0, ref.inc_ref().ptr());
    PyObject* callArgs[] = {results.ptr(), blob, inputs.ptr(), place.ptr()};
    auto command = py::reinterpret_steal<py::object>(
        PyObject_Vectorcall(state->callType.ptr(), callArgs, 4, nullptr));
    if (!command) return Step::error;
    auto recorded = py::reinterpret_steal<py::object>(
        PyObject_CallMethodOneArg(mesh, names.record, command.ptr()));
    if (!recorded) return Step::error;
  }
  hits.fetch_add(1, std::memory_order_relaxed);
  return Step::ok;
}

// __torch_function__(func, types, args, kwargs) of crown's Tensor.
PyObject* torchFunction(PyObject*, PyObject* const* given, Py_ssize_t argc) {
  if (argc < 2 || argc > 4) {
    PyErr_SetString(PyExc_TypeError, "__torch_function__(func, types, args=(), kwargs=None)");
    return nullptr;
  }
  // torch leaves args or kwargs out at times (a getter's call).
  py::tuple noArgs(0);
  PyObject* argv[] = {given[0], given[1], argc > 2 ? given[2] : noArgs.ptr(),
                      argc > 3 ? given[3] : Py_None};
  if (state != nullptr) {
    PyObject* kwargs = argv[3] == Py_None ? nullptr : argv[3];
    py::object out;
    Step step = Step::error;
    try {
      step = record(argv[0], argv[2], kwargs, out);
    } catch (py::error_already_set& e) {
      e.restore();
    } catch (const std::exception& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
    if (step == Step::ok) return out.release().ptr();
    if (step == Step::error) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "crown: recording failed");
      return nullptr;
    }
  }
  PyObject* slow = state != nullptr ? state->slowPath.ptr() : nullptr;
  if (slow == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "crown's tensor recording is not configured");
    return nullptr;
  }
  return PyObject_Vectorcall(slow, argv, 4, nullptr);
}

PyMethodDef torchFunctionDef{"tensor_torch_function", reinterpret_cast<PyCFunction>(
                                                          reinterpret_cast<void*>(torchFunction)),
                             METH_FASTCALL,
                             "crown.tensor's Tensor.__torch_function__ (func, types, args, kwargs): "
                             "an op seen before recorded in C++, anything else in Python "
                             "(crown.tensor._op_cache.torch_function)."};

}  // namespace

void bindTensorFastRecord(py::module_& m) {
  names = Names{intern("_ref"),        intern("_stream"),       intern("_lent_mutably"),
                intern("_known"),      intern("_meta"),         intern("_mesh"),
                intern("_location"),   intern("backend"),       intern("_dead"),
                intern("_delete_batch"), intern("_client"),     intern("_send_deletes"),
                intern("_record"),     intern("_stream_id"),    intern("id"),
                intern("_active"),     intern("_no_mesh_depth"), intern("_stream_now"),
                intern("new_ref")};
  m.add_object("tensor_torch_function",
               py::reinterpret_steal<py::object>(PyCFunction_New(&torchFunctionDef, nullptr)));
  m.def(
      "configure_tensor_fast_record",
      [](py::dict objects) {
        const NativeTorch* native = installedNativeTorch();
        if (native == nullptr)
          throw py::value_error("crown._aten's table is not installed (install_native_torch)");
        auto* s = new State;
        s->torch = native;
        s->tensorType = objects["tensor"];
        s->torchTensor = objects["torch_tensor"];
        s->meshModule = objects["mesh_module"];
        s->mainStream = objects["main_stream"];
        s->tfCache = objects["tf_cache"];
        s->slowPath = objects["slow_path"];
        s->attributeRead = objects["attribute_read"];
        s->places.internalPrefix = objects["internal_prefix"];
        s->makeWrapper = objects["make_wrapper"];
        // requires_grad: False by default, as Tensor.__new__ passes it.
        s->wrapperKwnames = py::make_tuple("strides", "storage_offset", "dtype", "device");
        s->contiguousKwnames = py::make_tuple("dtype", "device");
        s->callType = objects["call"];
        s->engineBackend = objects["engine_backend"];
        delete state;  // configured again (a test): the old one's objects go
        state = s;
      },
      py::arg("objects"),
      "Hands tensor_torch_function what it reads (crown.tensor._op_cache does, once).");
  m.def(
      "tensor_fast_record_hits", [] { return hits.load(); },
      "How many ops this process recorded through tensor_torch_function's C++ path.");
}

}  // namespace crown::python
