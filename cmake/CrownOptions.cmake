# Feature options. AUTO: built when found. ON: configure fails loudly when
# missing. OFF: never built. CUDA and NCCL code lives in its own targets
# linked on top of the core, never behind #ifdef in core files.
set(CROWN_WITH_CUDA AUTO CACHE STRING "Build the CUDA target (AUTO, ON, OFF)")
set(CROWN_WITH_NCCL AUTO CACHE STRING "Build the NCCL target (AUTO, ON, OFF)")
set_property(CACHE CROWN_WITH_CUDA PROPERTY STRINGS AUTO ON OFF)
set_property(CACHE CROWN_WITH_NCCL PROPERTY STRINGS AUTO ON OFF)
option(CROWN_BUILD_TESTS "Build the tests" ON)
option(CROWN_BUILD_BENCH "Build the benchmarks" ON)
# libFuzzer targets (tests/fuzz), for a separate build tree configured with
# clang; see cmake/CrownFuzz.cmake.
option(CROWN_BUILD_FUZZ "Build the libFuzzer targets (clang only)" OFF)
option(CROWN_WITH_PYTHON "Build the Python front end (needs pybind11 and Python 3 headers)" ON)
# Where cmake --install puts the crown package, relative to the prefix (the
# modulefiles add it to PYTHONPATH).
set(CROWN_PYTHON_INSTALL_DIR "lib/python3/dist-packages" CACHE STRING
    "Python package directory under the install prefix")

# Debian keeps the interpreter with numpy, torch and mpi4py at /usr/bin/python3;
# the first python3 on PATH may be another one.
if(NOT Python3_EXECUTABLE AND EXISTS /usr/bin/python3)
  set(Python3_EXECUTABLE /usr/bin/python3 CACHE FILEPATH "Python interpreter for crown")
endif()
# pybind11 finds Python through FindPython, pinned to the same interpreter.
set(PYBIND11_FINDPYTHON ON)
set(Python_EXECUTABLE ${Python3_EXECUTABLE})

if(NOT CUDAToolkit_ROOT AND EXISTS /usr/local/cuda)
  set(CUDAToolkit_ROOT /usr/local/cuda)
endif()

function(crown_resolve_feature option found what)
  if(${option} STREQUAL "ON" AND NOT ${found})
    message(FATAL_ERROR "${option}=ON but ${what} was not found. "
                        "Install it, point CMake at it, or set ${option}=AUTO or OFF.")
  endif()
  if(${option} STREQUAL "OFF" OR NOT ${found})
    set(${option}_ENABLED 0 PARENT_SCOPE)
  else()
    set(${option}_ENABLED 1 PARENT_SCOPE)
  endif()
endfunction()

set(_cuda_found FALSE)
if(NOT CROWN_WITH_CUDA STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  set(_cuda_found ${CUDAToolkit_FOUND})
endif()
crown_resolve_feature(CROWN_WITH_CUDA _cuda_found "the CUDA toolkit (cuda_runtime.h, libcudart)")

set(_nccl_found FALSE)
if(NOT CROWN_WITH_NCCL STREQUAL "OFF")
  find_package(NCCL QUIET)
  set(_nccl_found ${NCCL_FOUND})
  if(NOT CROWN_WITH_CUDA_ENABLED)
    set(_nccl_found FALSE)
  endif()
endif()
crown_resolve_feature(CROWN_WITH_NCCL _nccl_found "NCCL (nccl.h, libnccl) together with CUDA")

message(STATUS "crown: CUDA ${CROWN_WITH_CUDA_ENABLED}, NCCL ${CROWN_WITH_NCCL_ENABLED}")
