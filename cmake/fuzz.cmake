# Fuzz harnesses. A harness is one C file (or a few) defining
#   int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
# (and, optionally, int LLVMFuzzerInitialize(int *argc, char ***argv)), the
# libFuzzer interface. From any folder:
#
#   ferry_add_fuzzer(NAME n SOURCES file.c... [CORPUS dir] [LIBS lib...])
#
# builds fuzz_<n>. CORPUS (by default tests/fuzz/<n>) holds the harness's
# inputs: seed/ a small seed corpus, regress/ every input that once crashed
# or hung a parser, kept so that it never does again.
#
# - With clang and -DFERRY_FUZZ=ON, fuzz_<n> is a libFuzzer binary
#   (-fsanitize=fuzzer,address,undefined), and every other object of the
#   build is instrumented for coverage (fuzzer-no-link) and sanitized, so
#   that the fuzzer sees into the library. `make fuzz` builds them all
#   (target `fuzzers`) and runs each over its corpus (tests/fuzz/run_fuzzers.sh,
#   reading the list this file writes to fuzzers.txt).
# - In every other build the same sources are linked with a small driver
#   (tests/fuzz/driver.c) that runs every file of seed/ and regress/ once,
#   as the CTest entry fuzz.<n>: corpora and regressions run in `make test`
#   and, sanitized, in `make asan`.
option(FERRY_FUZZ "Build libFuzzer harnesses (needs clang)" OFF)

if(FERRY_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "FERRY_FUZZ=ON needs clang (CC=clang), not ${CMAKE_C_COMPILER_ID}")
  endif()
  if(NOT FERRY_SANITIZE STREQUAL "")
    message(FATAL_ERROR "FERRY_FUZZ=ON brings its own sanitizers; leave FERRY_SANITIZE empty")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer
                      -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
  add_custom_target(fuzzers)
endif()

set(FERRY_FUZZ_DRIVER ${CMAKE_CURRENT_LIST_DIR}/../tests/fuzz/driver.c)
set_property(GLOBAL PROPERTY FERRY_FUZZERS "")

function(ferry_add_fuzzer)
  cmake_parse_arguments(arg "" "NAME;CORPUS" "SOURCES;LIBS" ${ARGN})
  if(NOT arg_NAME OR NOT arg_SOURCES)
    message(FATAL_ERROR "ferry_add_fuzzer needs NAME and SOURCES")
  endif()
  set(corpus ${arg_CORPUS})
  if(NOT corpus)
    set(corpus ${PROJECT_SOURCE_DIR}/tests/fuzz/${arg_NAME})
  endif()
  if(NOT IS_DIRECTORY ${corpus}/seed)
    message(FATAL_ERROR "fuzzer ${arg_NAME}: no seed corpus in ${corpus}/seed")
  endif()
  set(target fuzz_${arg_NAME})
  if(FERRY_FUZZ)
    add_executable(${target} ${arg_SOURCES})
    target_link_options(${target} PRIVATE -fsanitize=fuzzer)
    add_dependencies(fuzzers ${target})
    set_property(GLOBAL APPEND PROPERTY FERRY_FUZZERS
                 "${arg_NAME} $<TARGET_FILE:${target}> ${corpus}")
  else()
    add_executable(${target} ${arg_SOURCES} ${FERRY_FUZZ_DRIVER})
    add_test(NAME fuzz.${arg_NAME} COMMAND ${target} ${corpus}/seed ${corpus}/regress)
    set_tests_properties(fuzz.${arg_NAME} PROPERTIES TIMEOUT 120 LABELS fuzz
      FAIL_REGULAR_EXPRESSION "ERROR: AddressSanitizer;ERROR: LeakSanitizer;runtime error:")
  endif()
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/tests/fuzz)
  if(arg_LIBS)
    target_link_libraries(${target} PRIVATE ${arg_LIBS})
  endif()
endfunction()

# The list run_fuzzers.sh reads: "name binary corpus" a line, written once
# every folder has declared its harnesses.
function(_ferry_fuzz_write_list)
  get_property(fuzzers GLOBAL PROPERTY FERRY_FUZZERS)
  string(REPLACE ";" "\n" text "${fuzzers}")
  file(GENERATE OUTPUT ${PROJECT_BINARY_DIR}/fuzzers.txt CONTENT "${text}\n")
endfunction()
if(FERRY_FUZZ)
  cmake_language(DEFER DIRECTORY ${PROJECT_SOURCE_DIR} CALL _ferry_fuzz_write_list)
endif()
