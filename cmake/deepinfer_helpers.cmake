# deepinfer_test(NAME SOURCES... LIBS ... [TEST_PREFIX p]): one GoogleTest binary registered with
# CTest (each test's CTest name prefixed by p, for binaries that share test sources).
# Tests get DEEPINFER_SHARED_DIR (path to ../shared) and DEEPINFER_SOURCE_DIR as environment
# variables and as compile definitions, so they can be run from any directory.
function(deepinfer_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT;TEST_PREFIX" "SOURCES;LIBS;LABELS" ${ARGN})
  if(NOT DEEPINFER_BUILD_TESTS)
    return()
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} GTest::gtest GTest::gmock GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE
    DEEPINFER_SHARED_DIR="${DEEPINFER_SHARED_DIR}"
    DEEPINFER_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
    DEEPINFER_BINARY_DIR="${CMAKE_BINARY_DIR}")
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 600)
  endif()
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  gtest_discover_tests(${name}
    TEST_PREFIX "${ARG_TEST_PREFIX}"
    DISCOVERY_TIMEOUT 60
    PROPERTIES TIMEOUT ${ARG_TIMEOUT} LABELS "${ARG_LABELS}"
               ENVIRONMENT "DEEPINFER_SHARED_DIR=${DEEPINFER_SHARED_DIR}")
endfunction()

# deepinfer_bench(NAME SOURCES... LIBS ...): one Google Benchmark binary (run by `make bench`).
function(deepinfer_bench name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  if(NOT DEEPINFER_BUILD_BENCH)
    return()
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} benchmark::benchmark)
  target_compile_definitions(${name} PRIVATE
    DEEPINFER_SHARED_DIR="${DEEPINFER_SHARED_DIR}"
    DEEPINFER_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
  # Registered with CTest under the label "bench": `make bench` runs `ctest -L bench`, and
  # `make test` excludes that label.
  add_test(NAME ${name} COMMAND ${name} --benchmark_min_time=0.2)
  set_tests_properties(${name} PROPERTIES LABELS bench TIMEOUT 1800 RUN_SERIAL TRUE
    ENVIRONMENT "DEEPINFER_SHARED_DIR=${DEEPINFER_SHARED_DIR}")
endfunction()
