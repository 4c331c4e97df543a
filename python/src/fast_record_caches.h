// The caches of the controller's C++ recording path (tensor_fast_record.cpp):
// what an op was recorded from (Places), which cached entry its arguments
// name (EntryMemo), and the op texts its Calls share (TextCache). Each is
// keyed by Python objects' addresses and holds those objects, so that no
// address is reused while it is a key. Threads: the recording thread, with
// the GIL.
#pragma once

#include <pybind11/pybind11.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "crown/tensor/shared_text.h"

namespace crown::python::fast_record {

namespace py = pybind11;

// _mesh._location's answers: file:line of the innermost frame outside torch
// and crown. Kept by code object (held: its address names it alone) and
// instruction, not in _mesh's dicts, whose keys hash the code object's
// contents on every lookup.
class Places {
 public:
  py::object internalPrefix;  // _mesh._INTERNAL: a tuple of directory prefixes

  /// The place of the running frame; null with a Python error set.
  py::object here() {
    PyFrameObject* frame = PyEval_GetFrame();
    Py_XINCREF(frame);
    while (frame != nullptr) {
      PyObject* code = reinterpret_cast<PyObject*>(PyFrame_GetCode(frame));
      Py_DECREF(code);  // the frame holds it
      Code* known = lookUp(code);
      if (known == nullptr) break;
      if (!known->internal) {
        py::object place = known->place(frame);
        Py_DECREF(frame);
        return place;
      }
      PyFrameObject* back = PyFrame_GetBack(frame);
      Py_DECREF(frame);
      frame = back;
    }
    Py_XDECREF(frame);
    if (PyErr_Occurred()) return py::object();
    return py::str("<unknown>");
  }

 private:
  struct Code {
    py::object code;
    bool internal = false;  // inside torch or crown.tensor (_mesh._INTERNAL)
    std::unordered_map<int, py::object> byInstruction;

    py::object place(PyFrameObject* frame) {
      int instruction = lastInstruction(frame);
      auto it = byInstruction.find(instruction);
      if (it != byInstruction.end()) return it->second;
      py::object made = py::reinterpret_steal<py::object>(PyUnicode_FromFormat(
          "%U:%d", code.attr("co_filename").ptr(), PyFrame_GetLineNumber(frame)));
      if (made) byInstruction.emplace(instruction, made);
      return made;
    }
  };

  static int lastInstruction(PyFrameObject* frame) {
#if PY_VERSION_HEX >= 0x030B0000
    return PyFrame_GetLasti(frame);
#else
    return frame->f_lasti;
#endif
  }

  Code* lookUp(PyObject* code) {
    auto it = codes_.find(code);
    if (it != codes_.end()) return &it->second;
    static const py::object startswith =
        py::reinterpret_steal<py::object>(PyUnicode_InternFromString("startswith"));
    py::object file = py::reinterpret_borrow<py::object>(code).attr("co_filename");
    int internal = PyObject_IsTrue(py::reinterpret_steal<py::object>(
        PyObject_CallMethodOneArg(file.ptr(), startswith.ptr(), internalPrefix.ptr()))
        .ptr());
    if (internal < 0) return nullptr;
    if (codes_.size() >= kLimit) codes_.clear();
    Code& added = codes_[code];
    added.code = py::reinterpret_borrow<py::object>(code);
    added.internal = internal != 0;
    return &added;
  }

  static constexpr std::size_t kLimit = 4096;
  std::unordered_map<PyObject*, Code> codes_;
};

// What names an op's cached entry without the Python key: the function,
// and per argument a tag and two words (a mesh tensor: its slot and its
// metadata object; a number: its type and bits).
struct CompactKey {
  static constexpr std::size_t kMaxArguments = 6;
  std::array<std::uint64_t, 1 + 3 * kMaxArguments> words{};
  std::size_t size = 0;

  void push(std::uint64_t word) { words[size++] = word; }
  void push(std::uint64_t tag, std::uint64_t a, std::uint64_t b) {
    push(tag);
    push(a);
    push(b);
  }
  bool operator==(const CompactKey& other) const {
    return size == other.size && std::equal(words.begin(), words.begin() + size, other.words.begin());
  }
  struct Hash {
    std::size_t operator()(const CompactKey& key) const {
      std::uint64_t h = 0xcbf29ce484222325ULL;
      for (std::size_t i = 0; i < key.size; ++i) h = (h ^ key.words[i]) * 0x100000001b3ULL;
      return static_cast<std::size_t>(h);
    }
  };
};

// _op_cache._tf_cache's entries, by compact key: a loop's op finds its entry
// without building its key's tuples and hashing them. A hit's output shares
// its entry's metadata object, so a loop's tensors name a few. Holds what
// the keys name by address (the function, the metadata), so no address is
// reused while it is a key. Entries are what the Python cache learnt for the
// same arguments (the same blob for the same function, metadata and numbers).
class EntryMemo {
 public:
  PyObject* find(const CompactKey& key) const {
    auto it = entries_.find(key);
    return it == entries_.end() ? nullptr : it->second.entry.ptr();
  }
  void add(const CompactKey& key, PyObject* entry, PyObject* func,
           std::span<PyObject* const> metas) {
    if (entries_.size() >= kLimit) entries_.clear();
    Held held{py::reinterpret_borrow<py::object>(entry), {py::reinterpret_borrow<py::object>(func)}};
    for (PyObject* meta : metas) held.keep.push_back(py::reinterpret_borrow<py::object>(meta));
    entries_.emplace(key, std::move(held));
  }

 private:
  struct Held {
    py::object entry;
    std::vector<py::object> keep;
  };
  static constexpr std::size_t kLimit = 4096;
  std::unordered_map<CompactKey, Held, CompactKey::Hash> entries_;
};

// The engines' texts of the ops and places recorded here, one SharedText
// per Python object (held: its address names it alone). A loop records a
// few: each Call shares them instead of copying a few hundred bytes, and
// its batch sends each once (CommandBatch).
class TextCache {
 public:
  /// `text`, bytes or str, as a SharedText; nullopt with a Python error set.
  std::optional<tensor::SharedText> of(PyObject* text) {
    auto it = texts_.find(text);
    if (it != texts_.end()) return it->second.second;
    char* data = nullptr;
    Py_ssize_t size = 0;
    if (PyBytes_Check(text)) {
      if (PyBytes_AsStringAndSize(text, &data, &size) < 0) return std::nullopt;
    } else {
      data = const_cast<char*>(PyUnicode_AsUTF8AndSize(text, &size));
      if (data == nullptr) return std::nullopt;
    }
    if (texts_.size() >= kLimit) texts_.clear();
    tensor::SharedText shared(std::string_view(data, static_cast<std::size_t>(size)));
    texts_.emplace(text, std::make_pair(py::reinterpret_borrow<py::object>(text), shared));
    return shared;
  }

 private:
  static constexpr std::size_t kLimit = 4096;
  std::unordered_map<PyObject*, std::pair<py::object, tensor::SharedText>> texts_;
};

}  // namespace crown::python::fast_record
