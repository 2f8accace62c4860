# `cmake --install build --prefix P`: the `loom` command (and its bundled model), the
# public headers, the layer libraries with a CMake package (find_package(loom CONFIG):
# loom::loom and loom::loom_<layer>, loom::loom_portable) and loom.pc, the portable
# runtime's header and library. The Python package installs itself (python/CMakeLists.txt).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(LOOM_LAYER_NAMES core graph runtime io weights kernels models tokenizer generation structured batching export serve)
set(LOOM_INSTALLED_TARGETS loom loom_portable loom_portable_schema)
foreach(layer ${LOOM_LAYER_NAMES})
  list(APPEND LOOM_INSTALLED_TARGETS loom_${layer})
endforeach()

# The targets name their include folders in the source and build trees; installed,
# they are under P/include (the portable schema's under P/include/loom_portable).
function(loom_relocate_includes target installed_dir)
  get_target_property(dirs ${target} INTERFACE_INCLUDE_DIRECTORIES)
  if(NOT dirs)
    return()
  endif()
  set(relocated)
  foreach(d ${dirs})
    if(d MATCHES "^\\$<" OR d MATCHES "^/usr/include")
      list(APPEND relocated "${d}")
    else()
      list(APPEND relocated "$<BUILD_INTERFACE:${d}>")
    endif()
  endforeach()
  list(APPEND relocated "$<INSTALL_INTERFACE:${installed_dir}>")
  list(REMOVE_DUPLICATES relocated)
  set_target_properties(${target} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${relocated}")
endfunction()
foreach(t ${LOOM_INSTALLED_TARGETS})
  if(t STREQUAL "loom_portable_schema")
    loom_relocate_includes(${t} ${CMAKE_INSTALL_INCLUDEDIR}/loom_portable)
  else()
    loom_relocate_includes(${t} ${CMAKE_INSTALL_INCLUDEDIR})
  endif()
endforeach()

install(TARGETS ${LOOM_INSTALLED_TARGETS} EXPORT loomTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS loom_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/loom DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_SOURCE_DIR}/src/portable/include/loom_portable.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_BINARY_DIR}/src/portable/generated/loom_program_generated.h
              ${PROJECT_SOURCE_DIR}/src/portable/schema/lpte_weights_file.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/loom_portable)
# The bundled default model, where the installed `loom` looks for it (share/loom/models).
install(DIRECTORY ${PROJECT_SOURCE_DIR}/models/loom-kjv-tiny DESTINATION ${CMAKE_INSTALL_DATADIR}/loom/models)

set(LOOM_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/loom)
install(EXPORT loomTargets NAMESPACE loom:: DESTINATION ${LOOM_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/loomConfig.cmake.in ${PROJECT_BINARY_DIR}/loomConfig.cmake
                              INSTALL_DESTINATION ${LOOM_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/loomConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/loomConfig.cmake ${PROJECT_BINARY_DIR}/loomConfigVersion.cmake
        DESTINATION ${LOOM_CMAKE_DIR})

# pkg-config: static libraries, so Libs lists every layer in link order and what they use.
set(LOOM_PC_LIBS "-lloom_serve -lloom_export -lloom_batching -lloom_structured -lloom_tokenizer -lloom_generation -lloom_models -lloom_kernels -lloom_weights -lloom_io -lloom_runtime -lloom_graph -lloom_core -lloom_portable")
set(LOOM_PC_EXTRA_LIBS "-lonnx_proto -lcpp-httplib")
if(MPI_C_FOUND)
  list(JOIN MPI_C_LIBRARIES " " LOOM_PC_MPI_LIBS)
  string(APPEND LOOM_PC_EXTRA_LIBS " ${LOOM_PC_MPI_LIBS}")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/loom.pc.in ${PROJECT_BINARY_DIR}/loom.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/loom.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

if(LOOM_BUILD_TESTS)
  add_test(NAME install COMMAND ${PROJECT_SOURCE_DIR}/tests/install/run_install_test.sh ${PROJECT_BINARY_DIR})
  set_tests_properties(install PROPERTIES TIMEOUT 900)
endif()
