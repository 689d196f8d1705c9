# Shows that a final check of amo-rate or put-notify-bw catches what it is
# for: runs ferry-bench with FERRY_BENCH_FAULT set (an uncounted fetch-add,
# an uncounted put with notification, or payloads that name the other
# window's bytes) and passes only when the run fails and its error says why.
# Usage:
#   cmake -DFERRYRUN=... -DBENCH=... -DFAULT=amo-sum -DMODES=amo-rate
#         -DEXPECT=regex [-DEXTRA="--alloc;--check"] -P check_fault.cmake
cmake_minimum_required(VERSION 3.20)
foreach(v FERRYRUN BENCH FAULT MODES EXPECT)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "${v} is not set")
  endif()
endforeach()
if(NOT DEFINED EXTRA)
  set(EXTRA "")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E env FERRY_BENCH_FAULT=${FAULT}
                        "${FERRYRUN}" -n 2 "${BENCH}" ${MODES} -m 4:8 -p 1 -b 0.05 -i 5 -w 1
                        -r 1 ${EXTRA}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "FERRY_BENCH_FAULT=${FAULT} ${MODES} ${EXTRA}: the run passed\n${out}${err}")
endif()
if(NOT err MATCHES "${EXPECT}")
  message(FATAL_ERROR "FERRY_BENCH_FAULT=${FAULT} ${MODES} ${EXTRA}: exited with ${rc} but "
                      "without '${EXPECT}':\n${err}")
endif()
message(STATUS "FERRY_BENCH_FAULT=${FAULT} ${MODES} ${EXTRA}: failed as it must (${rc})")
