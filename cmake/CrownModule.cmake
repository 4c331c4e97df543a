# crown_add_module(LAYER SOURCES ... DEPS ...): one layer of design.md as the
# static library crown_<layer> (alias Crown::<layer>). Public headers live in
# include/crown/<layer>; DEPS name the lower layers it may use.
function(crown_add_module layer)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(crown_${layer} STATIC ${ARG_SOURCES})
  add_library(Crown::${layer} ALIAS crown_${layer})
  target_include_directories(crown_${layer}
    PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
           $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/include>
           $<INSTALL_INTERFACE:include>
    PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(crown_${layer} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  target_compile_options(crown_${layer} PRIVATE -Wall -Wextra)
endfunction()

# crown_add_test(NAME SOURCES ... DEPS ... [LABEL unit] [TIMEOUT 60]): one
# GoogleTest binary; every discovered test gets the label and a timeout.
function(crown_add_test name)
  cmake_parse_arguments(ARG "" "LABEL;TIMEOUT" "SOURCES;DEPS" ${ARGN})
  if(NOT ARG_LABEL)
    set(ARG_LABEL unit)
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 60)
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
  gtest_discover_tests(${name}
    PROPERTIES LABELS ${ARG_LABEL} TIMEOUT ${ARG_TIMEOUT}
    DISCOVERY_TIMEOUT 30)
endfunction()
