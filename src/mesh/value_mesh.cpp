#include "crown/mesh/value_mesh.h"

#include "crown/actor/failure.h"

namespace crown {

namespace {
std::string listFailures(const std::string& action, std::size_t members,
                         const std::vector<MeshError::Failure>& failures) {
  std::string what = action + " failed on " + std::to_string(failures.size()) + " of " +
                     std::to_string(members) + " ranks:";
  for (const auto& failure : failures)
    what += "\n  rank " + std::to_string(failure.rank) + ": " + failure.what;
  return what;
}
}  // namespace

MeshError::MeshError(const std::string& action, std::size_t members,
                     std::vector<Failure> failures)
    : Error(listFailures(action, members, failures)), failures_(std::move(failures)) {}

namespace mesh::detail {

std::size_t indexOf(const Shape& shape, const std::map<std::string, std::size_t>& coords) {
  return shape.slice().indexOf(shape.rank(coords));  // rank() checks every label
}

std::exception_ptr errorOf(const CastEntry& entry) {
  try {
    return crown::detail::toException(
        wire::fromBytes<crown::detail::RemoteFailure>(entry.payload));
  } catch (...) {
    return std::current_exception();
  }
}

std::string describe(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

}  // namespace mesh::detail
}  // namespace crown
