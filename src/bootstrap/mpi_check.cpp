#include "bootstrap/mpi_check.h"

#include <string>

#include "crown/common/error.h"

namespace crown::detail {

void checkMpi(int code, const char* call, const char* file, int line) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw BootstrapError(std::string(call) + " failed: " + text + " (" + file + ":" +
                       std::to_string(line) + ")");
}

}  // namespace crown::detail
