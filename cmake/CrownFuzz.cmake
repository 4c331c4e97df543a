# The libFuzzer build (CROWN_BUILD_FUZZ, tests/fuzz): a separate build tree
# configured with clang, where everything compiled carries libFuzzer's
# coverage and ASan and UBSan, and any UB aborts. Only the fuzzers and the
# decoders they link are built there (target crown_fuzzers).
if(NOT CROWN_BUILD_FUZZ)
  return()
endif()
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "CROWN_BUILD_FUZZ=ON needs clang (libFuzzer), not ${CMAKE_CXX_COMPILER_ID}: "
                      "configure a separate build tree with -DCMAKE_CXX_COMPILER=clang++ "
                      "(tests/fuzz/README.md).")
endif()
# Not in CMAKE_CXX_FLAGS: find_package's test programs link without libFuzzer.
add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
                    -fno-omit-frame-pointer)
add_link_options(-fsanitize=address,undefined)

set(CROWN_FUZZ_SECONDS 60 CACHE STRING "How long each fuzz.<target> test fuzzes")
add_custom_target(crown_fuzzers)

# crown_add_fuzzer(NAME SOURCES ... DEPS ...): the libFuzzer binary fuzz_<name>
# and the test fuzz.<name>, which fuzzes it for CROWN_FUZZ_SECONDS from the
# corpus in tests/fuzz/corpus/<name> and fails on any crash, leak, UB, or an
# input that takes over 10 s. New inputs go to the build tree, never into the
# committed corpus; a failing input is kept in <build>/tests/fuzz/<name>/.
function(crown_add_fuzzer name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(fuzz_${name} ${ARG_SOURCES})
  target_link_libraries(fuzz_${name} PRIVATE ${ARG_DEPS})
  target_include_directories(fuzz_${name} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
  target_link_options(fuzz_${name} PRIVATE -fsanitize=fuzzer)
  add_dependencies(crown_fuzzers fuzz_${name})

  set(work ${CMAKE_CURRENT_BINARY_DIR}/${name})
  file(MAKE_DIRECTORY ${work}/corpus)
  set(corpus ${PROJECT_SOURCE_DIR}/tests/fuzz/corpus/${name})
  if(NOT EXISTS ${corpus})
    message(WARNING "fuzz_${name}: no corpus in ${corpus}; it starts from nothing")
    set(corpus "")
  endif()
  add_test(NAME fuzz.${name}
    COMMAND fuzz_${name} -max_total_time=${CROWN_FUZZ_SECONDS} -timeout=10 -print_final_stats=1
            -artifact_prefix=${work}/ ${work}/corpus ${corpus})
  math(EXPR timeout "${CROWN_FUZZ_SECONDS} + 60")
  set_tests_properties(fuzz.${name} PROPERTIES LABELS fuzz TIMEOUT ${timeout})
endfunction()
