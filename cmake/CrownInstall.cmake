# cmake --install build --prefix P gives:
#   P/bin/crownrun, P/lib/libcrown_*.a, P/include/crown,
#   P/lib/cmake/Crown (find_package(Crown) with Crown::crown),
#   P/share/modulefiles/crown/<version>{,.lua} (Tcl and Lmod), and the
#   Python package (python/CMakeLists.txt).
include(CMakePackageConfigHelpers)
include(GNUInstallDirs)

set(crown_libraries crown_common crown_wire crown_transport crown_actor crown_mesh crown_tensor crown_rdma crown_supervision crown_debug
                    crown_bootstrap crown)
# The CUDA and NCCL targets, when built: Crown::crown links NCCL's and
# CUDA's RDMA device memory whole.
if(CROWN_WITH_CUDA_ENABLED)
  list(APPEND crown_libraries crown_cuda crown_cuda_rdma)
endif()
if(CROWN_WITH_NCCL_ENABLED)
  list(APPEND crown_libraries crown_nccl)
endif()
install(TARGETS ${crown_libraries} EXPORT CrownTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/crown DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h")
install(FILES ${PROJECT_BINARY_DIR}/include/crown/config.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/crown)

set(package_dir ${CMAKE_INSTALL_LIBDIR}/cmake/Crown)
install(EXPORT CrownTargets NAMESPACE Crown:: DESTINATION ${package_dir})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/CrownConfig.cmake.in
  ${PROJECT_BINARY_DIR}/CrownConfig.cmake INSTALL_DESTINATION ${package_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/CrownConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/CrownConfig.cmake ${PROJECT_BINARY_DIR}/CrownConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/FindNCCL.cmake
  DESTINATION ${package_dir})

install(PROGRAMS ${PROJECT_SOURCE_DIR}/launch/crownrun ${PROJECT_SOURCE_DIR}/launch/crown
        DESTINATION ${CMAKE_INSTALL_BINDIR})

# Modulefiles find the prefix from their own path, so one installed tree
# can be moved or mounted elsewhere.
set(module_dir ${CMAKE_INSTALL_DATADIR}/modulefiles/crown)
configure_file(${PROJECT_SOURCE_DIR}/launch/modulefiles/crown.lua.in
  ${PROJECT_BINARY_DIR}/modulefiles/${PROJECT_VERSION}.lua @ONLY)
configure_file(${PROJECT_SOURCE_DIR}/launch/modulefiles/crown.tcl.in
  ${PROJECT_BINARY_DIR}/modulefiles/${PROJECT_VERSION} @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/modulefiles/${PROJECT_VERSION}.lua
              ${PROJECT_BINARY_DIR}/modulefiles/${PROJECT_VERSION}
  DESTINATION ${module_dir})
