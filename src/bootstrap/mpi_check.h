// CROWN_CHECK_MPI(call): throws BootstrapError naming the call, MPI's own
// error text and file:line when an MPI call fails. Private to bootstrap,
// the one layer that sees MPI.
#pragma once

#include <mpi.h>

namespace crown::detail {

void checkMpi(int code, const char* call, const char* file, int line);

}  // namespace crown::detail

#define CROWN_CHECK_MPI(call) ::crown::detail::checkMpi((call), #call, __FILE__, __LINE__)
