# pvnet_add_test(NAME <name> SOURCES <files...> LIBS <libs...> [LABELS <labels...>])
#
# One GoogleTest executable per call, linked with GTest::gtest_main (and gmock) plus LIBS.
# gtest_discover_tests registers every TEST/TEST_P case as its own ctest test, so ctest
# counts cases, not binaries. LABELS (e.g. `slow`, `netns`) let make and ctest select
# tests: the ASan run in `make test` excludes `slow`.
#
# Every test binary is a dependency of the target pvnet_tests (what ctest needs built).
#
# Label `threads`: the binary starts threads (its own, a backend worker, a relay, netns
# helpers) or runs a process that does. Such binaries are also dependencies of the
# target pvnet_threads_tests, which `make tsan` builds in the TSan tree;
# `make test-tsan` runs `ctest -L '^threads$'` there.
include_guard(GLOBAL)
include(GoogleTest)

add_custom_target(pvnet_threads_tests)
# Everything ctest runs in a tree (test and replay executables, the pvnet binary): what the
# ASan tree builds in `make asan`, which has no use for the benchmark tools.
add_custom_target(pvnet_tests)

# Release trees build the libraries and the app as shipped (-O3) and the test drivers at -O2:
# gtest bodies cost twice the CPU at -O3 (split_device_test.cc 20.7 -> 10.4 s user), and what
# they check runs in the -O3 libraries and the -O3 `pvnet` either way.
set(pvnet_test_opt $<$<CONFIG:Release>:-O2>)

# gtest.h (and the standard headers most tests include) parsed once per build tree: every
# test executable reuses this target's precompiled header (REUSE_FROM), which is valid
# because all of them are compiled with the same flags (the tree's; tests add only include
# directories and definitions that the precompiled headers do not use). -Winvalid-pch on the
# users: a header left unused because the flags drifted apart is an error under -Werror, not
# a silent slowdown.
add_library(pvnet_test_pch OBJECT ${CMAKE_CURRENT_LIST_DIR}/pvnet_test_pch.cc)
target_link_libraries(pvnet_test_pch PRIVATE GTest::gtest)
target_precompile_headers(pvnet_test_pch PRIVATE
  <gtest/gtest.h> <algorithm> <array> <atomic> <chrono> <cstdint> <cstring> <memory>
  <optional> <span> <string> <thread> <vector>)
target_compile_options(pvnet_test_pch PRIVATE ${pvnet_test_opt})

function(pvnet_add_test)
  cmake_parse_arguments(PARSE_ARGV 0 ARG "" "NAME" "SOURCES;LIBS;LABELS")
  if(NOT ARG_NAME OR NOT ARG_SOURCES)
    message(FATAL_ERROR "pvnet_add_test: NAME and SOURCES are required")
  endif()
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "pvnet_add_test(${ARG_NAME}): unknown arguments ${ARG_UNPARSED_ARGUMENTS}")
  endif()

  add_executable(${ARG_NAME} ${ARG_SOURCES})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_LIBS} GTest::gmock GTest::gtest_main
                                            Threads::Threads)
  # Tests may include helpers that sit beside them (e.g. tests/ring/ring_builder.h).
  target_include_directories(${ARG_NAME} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  target_precompile_headers(${ARG_NAME} REUSE_FROM pvnet_test_pch)
  target_compile_options(${ARG_NAME} PRIVATE -Winvalid-pch ${pvnet_test_opt})

  gtest_discover_tests(${ARG_NAME} DISCOVERY_TIMEOUT 60 TEST_LIST ${ARG_NAME}_TESTS)
  add_dependencies(pvnet_tests ${ARG_NAME})
  if("threads" IN_LIST ARG_LABELS)
    add_dependencies(pvnet_threads_tests ${ARG_NAME})
  endif()

  # gtest_discover_tests(... PROPERTIES LABELS a;b) splits the list (CMake 3.25), so labels
  # are set by a script ctest includes after the discovered tests (same TEST_INCLUDE_FILES
  # order), over the list discovery recorded.
  if(ARG_LABELS)
    set(labels_file "${CMAKE_CURRENT_BINARY_DIR}/${ARG_NAME}_labels.cmake")
    file(WRITE "${labels_file}"
         "if(${ARG_NAME}_TESTS)\n"
         "  set_tests_properties(\${${ARG_NAME}_TESTS} PROPERTIES LABELS \"${ARG_LABELS}\")\n"
         "endif()\n")
    set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${labels_file}")
  endif()
endfunction()
