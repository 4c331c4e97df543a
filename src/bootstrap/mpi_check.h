// CROWN_CHECK_MPI(call): throws BootstrapError naming the call, MPI's own
// error text and file:line when an MPI call fails; CROWN_MPI_ERROR(code,
// what) makes the same error as a value, for the service's async path,
// which fails a future instead of throwing across its loop. Private to
// bootstrap, the one layer that sees MPI.
#pragma once

#include <mpi.h>

#include <exception>

namespace crown::detail {

void checkMpi(int code, const char* call, const char* file, int line);
std::exception_ptr mpiError(int code, const char* call, const char* file, int line);

}  // namespace crown::detail

#define CROWN_CHECK_MPI(call) ::crown::detail::checkMpi((call), #call, __FILE__, __LINE__)
#define CROWN_MPI_ERROR(code, what) ::crown::detail::mpiError((code), (what), __FILE__, __LINE__)
