#include "bootstrap/mpi_check.h"

#include <cstdio>
#include <string>

#include "crown/common/error.h"

namespace crown::detail {
namespace {

BootstrapError describe(int code, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) {
    std::snprintf(text, sizeof text, "MPI error %d", code);
  }
  return BootstrapError(std::string(call) + " failed: " + text + " (" + file + ":" +
                        std::to_string(line) + ")");
}

}  // namespace

void checkMpi(int code, const char* call, const char* file, int line) {
  if (code == MPI_SUCCESS) return;
  throw describe(code, call, file, line);
}

std::exception_ptr mpiError(int code, const char* call, const char* file, int line) {
  return std::make_exception_ptr(describe(code, call, file, line));
}

}  // namespace crown::detail
