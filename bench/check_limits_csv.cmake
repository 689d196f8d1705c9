# Runs `ferry-bench limits --csv` under ferryrun and checks the file: the
# exact header (the seven original columns and the five of the paired
# measurement, empty on these rows), one cache-line row, and a memcpy and a process_vm_writev row
# with a positive figure for each size from 1 to 64 KiB.
# Usage: cmake -DFERRYRUN=... -DBENCH=... -DCSV=... -P check_limits_csv.cmake
foreach(v FERRYRUN BENCH CSV)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "${v} is not set")
  endif()
endforeach()
file(REMOVE "${CSV}")
execute_process(COMMAND "${FERRYRUN}" -n 2 "${BENCH}" limits -m 1:64K -i 20 -w 2 -r 3
                        --csv "${CSV}"
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ferry-bench limits exited with ${rc}")
endif()
if(NOT EXISTS "${CSV}")
  message(FATAL_ERROR "no CSV written to ${CSV}")
endif()
file(STRINGS "${CSV}" lines)
list(GET lines 0 header)
set(want "test,transport,size,value,unit,floor,ratio")
string(APPEND want ",ratio_q1,ratio_q3,pairs,mixed_pairs,mixed_dropped")
if(NOT header STREQUAL want)
  message(FATAL_ERROR "CSV header is '${header}'")
endif()
set(n_cacheline 0)
set(n_memcpy 0)
set(n_pvw 0)
set(number "[0-9]+(\\.[0-9]+)?")
set(n_ofi_pp 0) # ofi floors
set(n_ofi_wr 0) # ofi floors
foreach(line IN LISTS lines)
  if(line MATCHES "^cacheline-pingpong,[^,]+,64,(${number}),us,,,,,,,$")
    math(EXPR n_cacheline "${n_cacheline} + 1")
  elseif(line MATCHES "^memcpy,[^,]+,([0-9]+),(${number}),MB/s,,,,,,,$")
    math(EXPR n_memcpy "${n_memcpy} + 1")
  elseif(line MATCHES "^process_vm_writev,[^,]+,([0-9]+),(${number}),MB/s,,,,,,,$")
    math(EXPR n_pvw "${n_pvw} + 1")
  # >>> ofi floors: with -DEXPECT_OFI=1 (FERRY_BTL selects ofi) the libfabric rows.
  elseif(EXPECT_OFI AND line MATCHES "^ofi-pingpong,[^,]+,8,(${number}),us,,,,,,,$")
    math(EXPR n_ofi_pp "${n_ofi_pp} + 1")
  elseif(EXPECT_OFI AND line MATCHES "^ofi-write-stream,[^,]+,([0-9]+),(${number}),MB/s,,,,,,,$")
    math(EXPR n_ofi_wr "${n_ofi_wr} + 1")
  # <<< ofi floors
  elseif(NOT line STREQUAL header)
    message(FATAL_ERROR "unexpected CSV line '${line}'")
  endif()
endforeach()
# 1, 2, 4, ... 65536: 17 sizes.
if(NOT n_cacheline EQUAL 1 OR NOT n_memcpy EQUAL 17 OR NOT n_pvw EQUAL 17)
  message(FATAL_ERROR "CSV rows: ${n_cacheline} cache-line (1 expected), ${n_memcpy} memcpy "
                      "and ${n_pvw} process_vm_writev (17 each expected)")
endif()
# >>> ofi floors
if(EXPECT_OFI AND (NOT n_ofi_pp EQUAL 1 OR NOT n_ofi_wr EQUAL 17))
  message(FATAL_ERROR "CSV rows: ${n_ofi_pp} ofi-pingpong (1 expected) and ${n_ofi_wr} "
                      "ofi-write-stream (17 expected)")
endif()
# <<< ofi floors
message(STATUS "CSV ${CSV}: header and 35 rows as expected")
