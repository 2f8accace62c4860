# LOOM_SANITIZE=address,undefined (any -fsanitize= list): a second configuration
# whose libraries, tests and fuzz targets run under the sanitizers. It replaces
# the build type's optimisation with -O1 and line tables, which keeps the build
# short on CI's two cores and still gives symbolised reports; asserts stay on.
set(LOOM_SANITIZE "" CACHE STRING "Sanitizers to build with (-fsanitize= list, e.g. address,undefined)")
if(LOOM_SANITIZE)
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    set(loom_debug_info -gline-tables-only)
  else()
    set(loom_debug_info -g1)
  endif()
  string(TOUPPER "${CMAKE_BUILD_TYPE}" loom_build_type)
  set(CMAKE_C_FLAGS_${loom_build_type} "-O1")
  set(CMAKE_CXX_FLAGS_${loom_build_type} "-O1")
  # A report is a failure: undefined behaviour aborts instead of printing and going on.
  add_compile_options(-fsanitize=${LOOM_SANITIZE} -fno-sanitize-recover=all -fno-omit-frame-pointer ${loom_debug_info})
  add_link_options(-fsanitize=${LOOM_SANITIZE})
  # Highway kernels for the baseline target only: compiling every ISA under the
  # sanitizers took ~10 min for attention.cc alone on CI's two cores.
  add_compile_definitions(HWY_COMPILE_ONLY_STATIC=1)
  # On x86-64 that baseline is SSE4 (x86-64-v2, plus the AES and PCLMUL that Highway's
  # SSE4 target asks for), any x86 CPU since 2010. Without it the baseline is EMU128,
  # vectors emulated one lane at a time, which no x86 user runs and which ran the
  # batching group's paged attention ~100x slower than Release: 186 s of the group's
  # 300 s went to one 64-request determinism test.
  if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
    add_compile_options(-march=x86-64-v2 -maes -mpclmul)
  endif()
endif()
