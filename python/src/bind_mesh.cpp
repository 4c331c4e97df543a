// Shape for Python: labelled dimensions over the job's ranks, sliced by
// index (removes a dimension) or by Python slice (keeps it). Picklable, so
// meshes travel inside messages.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "crown/mesh/shape.h"

namespace py = pybind11;

namespace crown::python {
namespace {

mesh::Selector toSelector(const std::string& label, const py::handle& value) {
  if (py::isinstance<py::int_>(value)) return value.cast<std::int64_t>();
  if (py::isinstance<py::slice>(value)) {
    auto field = [&](const char* name, std::int64_t fallback) {
      py::object v = value.attr(name);
      return v.is_none() ? fallback : v.cast<std::int64_t>();
    };
    return mesh::Range{field("start", 0), field("stop", mesh::kEnd), field("step", 1)};
  }
  throw py::type_error("dimension '" + label + "': an index must be an int or a slice, not " +
                       std::string(py::str(value.get_type().attr("__name__"))));
}

}  // namespace

void bindMesh(py::module_& m) {
  py::class_<mesh::Shape>(m, "Shape")
      .def(py::init([](const std::vector<std::pair<std::string, std::size_t>>& dims) {
             return mesh::Shape(dims);
           }),
           "Row-major from rank 0: Shape([('hosts', 2), ('procs', 4)]).")
      .def(py::init([](const std::vector<std::string>& labels, const py::object& slice) {
             // Monarch's form, Shape(labels, Slice): any object with its fields.
             return mesh::Shape(labels,
                                mesh::Slice(slice.attr("offset").cast<std::size_t>(),
                                            slice.attr("sizes").cast<std::vector<std::size_t>>(),
                                            slice.attr("strides").cast<std::vector<std::size_t>>()));
           }),
           py::arg("labels"), py::arg("slice"),
           "Monarch's form: Shape(['hosts', 'gpus'], Slice(offset=0, sizes=[2, 4], "
           "strides=[4, 1])).")
      .def_static(
          "of_ranks",
          [](const std::string& label, std::vector<std::size_t> ranks) {
            return mesh::Shape({label}, mesh::Slice::ofRanks(std::move(ranks)));
          },
          "One dimension over exactly these ranks (strictly increasing): a mesh of survivors.")
      .def_property_readonly("labels", &mesh::Shape::labels)
      .def_property_readonly(
          "chosen", [](const mesh::Shape& s) { return !s.slice().members().empty(); },
          "True for a shape over chosen ranks (of_ranks), which no stride describes.")
      .def_property_readonly("sizes", &mesh::Shape::sizes)
      .def("__len__", [](const mesh::Shape& s) { return s.size(); })
      .def("size", [](const mesh::Shape& s, const std::string& label) { return s.size(label); })
      .def("ranks", &mesh::Shape::ranks)
      .def("rank", &mesh::Shape::rank)
      .def("coordinates", &mesh::Shape::coordinates)
      .def("index_of", [](const mesh::Shape& s, std::size_t rank) { return s.slice().indexOf(rank); })
      .def("select",
           [](const mesh::Shape& s, const py::dict& selectors) {
             std::map<std::string, mesh::Selector> chosen;
             for (auto item : selectors) {
               auto label = item.first.cast<std::string>();
               chosen[label] = toSelector(label, item.second);
             }
             return s.select(chosen);
           })
      .def(
          "replacing",
          [](const mesh::Shape& s, const std::map<std::size_t, std::size_t>& replacements) {
            std::vector<std::pair<std::size_t, std::size_t>> pairs(replacements.begin(),
                                                                   replacements.end());
            return mesh::Shape(s.labels(), s.slice().replacing(pairs));
          },
          "The same shape, each old rank of {old: new} standing for its new one (respawn_lost).")
      .def("flatten", &mesh::Shape::flatten)
      .def("rename", &mesh::Shape::rename)
      .def("split", &mesh::Shape::split)
      .def("__eq__", [](const mesh::Shape& a, const mesh::Shape& b) { return a == b; })
      .def("__repr__", &mesh::Shape::toString)
      .def(py::pickle(
          [](const mesh::Shape& s) {
            const auto& slice = s.slice();
            return py::make_tuple(s.labels(), slice.offset(), slice.sizes(), slice.strides(),
                                  slice.members());
          },
          [](const py::tuple& t) {
            return mesh::Shape(t[0].cast<std::vector<std::string>>(),
                               mesh::Slice(t[1].cast<std::size_t>(),
                                           t[2].cast<std::vector<std::size_t>>(),
                                           t[3].cast<std::vector<std::size_t>>(),
                                           t[4].cast<std::vector<std::size_t>>()));
          }));
}

}  // namespace crown::python
