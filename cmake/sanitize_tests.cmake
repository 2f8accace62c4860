# Under LOOM_SANITIZE: the test groups that read untrusted input are labelled
# `sanitized`, and `loom_sanitized` builds just them and the fuzz targets, so the
# sanitizer configuration compiles only the layers those need. Included from
# tests/CMakeLists.txt after the groups exist (test properties are per directory).
# A group missing from the tree (serve, gguf before they land) is skipped.
if(NOT LOOM_SANITIZE)
  return()
endif()
set(LOOM_SANITIZED_TEST_GROUPS io tokenizer weights batching generation serve gguf)
add_custom_target(loom_sanitized)
# The SIMD kernels stay under AddressSanitizer but not UBSan, whose checks on
# their inlined vector code cost more to compile than the rest of the build; the
# GEMM/GEMV micro-kernels (intrinsics, fully unrolled) under neither: ASan alone
# took 9.5 min for gemm_avx512.cc on CI's two cores. What they read is bounded by
# the packing code, which is instrumented.
file(GLOB loom_kernel_sources ${PROJECT_SOURCE_DIR}/src/runtime/cpu/*.cc)
file(GLOB loom_microkernel_sources ${PROJECT_SOURCE_DIR}/src/runtime/cpu/gemm_*.cc
     ${PROJECT_SOURCE_DIR}/src/runtime/cpu/gemv_*.cc)
list(REMOVE_ITEM loom_kernel_sources ${loom_microkernel_sources})
set_source_files_properties(${loom_kernel_sources} TARGET_DIRECTORY loom_runtime
                            PROPERTIES COMPILE_OPTIONS -fno-sanitize=undefined)
set_source_files_properties(${loom_microkernel_sources} TARGET_DIRECTORY loom_runtime
                            PROPERTIES COMPILE_OPTIONS -fno-sanitize=all)
foreach(group ${LOOM_SANITIZED_TEST_GROUPS})
  if(TARGET loom_${group}_tests)
    # Each links only its own layer (tests/CMakeLists.txt), so this builds no exporters.
    add_dependencies(loom_sanitized loom_${group}_tests)
    get_property(entries GLOBAL PROPERTY LOOM_TEST_ENTRIES_${group})
    if(NOT entries)
      set(entries ${group})
    endif()
    set_property(TEST ${entries} APPEND PROPERTY LABELS sanitized)
  endif()
endforeach()
# Under ASan the tokenizer group (real tokenizer.json files loaded again and again) takes
# ~320 s, longer than every other sanitized test together on CI's second core: its
# entries (tests/CMakeLists.txt, loom_split_tests) start first on a clean tree (no
# CTestCostData.txt yet), the rest follow.
get_property(loom_tokenizer_entries GLOBAL PROPERTY LOOM_TEST_ENTRIES_tokenizer)
if(loom_tokenizer_entries)
  set_tests_properties(${loom_tokenizer_entries} PROPERTIES COST 160)
endif()
add_subdirectory(${CMAKE_CURRENT_LIST_DIR}/../tests/fuzz ${PROJECT_BINARY_DIR}/tests/fuzz)
