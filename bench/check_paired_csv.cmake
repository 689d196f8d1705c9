# Checks the CSV of ferry-bench's paired measurement: the header, twelve
# fields on every row, and on every row of a paired test (one with a floor)
# a positive finite value, floor and ratio, quartiles around the ratio, a
# pair count from 1 to the -p given, mixed pairs from 0 to that count, and
# mixed_dropped 0 or 1 (or, where --drop-mixed left no pair, an empty ratio
# and quartiles with 0 pairs). No timing is judged.
#
# Run and check:
#   cmake -DFERRYRUN=... -DBENCH=... -DCSV=prefix [-DEXPECT_OFI=1] -P check_paired_csv.cmake
# runs every mode at 8 bytes with 3 short pairs into prefix.csv; put-bw,
# get-bw, amo-rate and put-notify-bw with --alloc (memcpy floor for the
# bandwidths) into prefix-alloc.csv; and amo-rate and put-notify-bw at 4 and
# 8 bytes with --check (their counts are checked by ferry-bench itself,
# which fails the run on a wrong sum) into prefix-counted.csv, where each
# of the two must have a paired row at both sizes.
# Check only (the checker's own tests feed it malformed files):
#   cmake -DCHECK_ONLY=file.csv [-DPAIRS=3] -P check_paired_csv.cmake
# A rejection prints "rejected: <reason>" and fails.
# Empty CSV fields must stay list elements (policy CMP0007).
cmake_minimum_required(VERSION 3.20)
if(NOT DEFINED PAIRS)
  set(PAIRS 3)
endif()
set(header "test,transport,size,value,unit,floor,ratio")
string(APPEND header ",ratio_q1,ratio_q3,pairs,mixed_pairs,mixed_dropped")
set(number "^[0-9]+(\\.[0-9]+)?$")
set(integer "^[0-9]+$")

function(reject why)
  message(FATAL_ERROR "rejected: ${why}")
endfunction()

# A number that is finite (digits only: no nan, inf or sign) and not zero.
function(check_positive what value line)
  if(NOT value MATCHES "${number}" OR NOT value MATCHES "[1-9]")
    reject("${what} '${value}' is not a positive finite number in '${line}'")
  endif()
endfunction()

# Checks one file; expected: the tests that must each have a paired row,
# each as "test" (any size) or "test@size".
function(check_file csv expected)
  if(NOT EXISTS "${csv}")
    reject("no CSV at ${csv}")
  endif()
  file(STRINGS "${csv}" lines)
  list(LENGTH lines n)
  if(n EQUAL 0)
    reject("${csv} is empty")
  endif()
  list(GET lines 0 first)
  if(NOT first STREQUAL header)
    reject("header is '${first}'")
  endif()
  list(REMOVE_AT lines 0)
  set(seen "")
  foreach(line IN LISTS lines)
    # The transport may be quoted (it holds commas): blank it first.
    string(REGEX REPLACE "\"[^\"]*\"" "q" plain "${line}")
    # Empty fields survive the split as empty list elements once ";" is
    # the separator; a literal ";" in the file would be wrong anyway.
    if(plain MATCHES ";")
      reject("stray ';' in '${line}'")
    endif()
    string(REPLACE "," ";" f "${plain}")
    list(LENGTH f nf)
    if(NOT nf EQUAL 12)
      reject("${nf} fields, 12 expected, in '${line}'")
    endif()
    list(GET f 0 test)
    list(GET f 2 size)
    list(GET f 3 value)
    list(GET f 5 floor)
    list(GET f 6 ratio)
    list(GET f 7 q1)
    list(GET f 8 q3)
    list(GET f 9 pairs)
    list(GET f 10 mixed)
    list(GET f 11 dropped)
    if(NOT size MATCHES "${integer}")
      reject("size '${size}' in '${line}'")
    endif()
    if(pairs STREQUAL "")
      # Not paired: limits rows, am-rate, or a floor that is not available.
      if(NOT q1 STREQUAL "" OR NOT q3 STREQUAL "" OR NOT mixed STREQUAL "" OR
         NOT dropped STREQUAL "")
        reject("pair columns without a pair count in '${line}'")
      endif()
      if(test IN_LIST expected AND NOT floor STREQUAL "n/a")
        reject("${test} has a floor but no pairs in '${line}'")
      endif()
      continue()
    endif()
    check_positive("value" "${value}" "${line}")
    check_positive("floor" "${floor}" "${line}")
    if(ratio STREQUAL "" AND q1 STREQUAL "" AND q3 STREQUAL "" AND pairs STREQUAL "0" AND
       dropped STREQUAL "1")
      # --drop-mixed left no pair: no ratio, honestly.
      list(APPEND seen "${test}" "${test}@${size}")
      continue()
    endif()
    check_positive("ratio" "${ratio}" "${line}")
    check_positive("ratio_q1" "${q1}" "${line}")
    check_positive("ratio_q3" "${q3}" "${line}")
    if(q1 GREATER ratio OR ratio GREATER q3)
      reject("quartiles ${q1} and ${q3} do not surround the ratio ${ratio} in '${line}'")
    endif()
    if(NOT pairs MATCHES "${integer}" OR pairs LESS 1 OR pairs GREATER PAIRS)
      reject("pairs '${pairs}' not from 1 to ${PAIRS} in '${line}'")
    endif()
    if(NOT mixed MATCHES "${integer}" OR mixed GREATER PAIRS)
      reject("mixed_pairs '${mixed}' not from 0 to ${PAIRS} in '${line}'")
    endif()
    if(NOT dropped MATCHES "^[01]$")
      reject("mixed_dropped '${dropped}' is not 0 or 1 in '${line}'")
    endif()
    list(APPEND seen "${test}" "${test}@${size}")
  endforeach()
  foreach(t IN LISTS expected)
    if(NOT t IN_LIST seen)
      reject("no paired row for ${t} in ${csv}")
    endif()
  endforeach()
  list(LENGTH seen ns)
  math(EXPR ns "${ns} / 2")
  message(STATUS "${csv}: header and ${ns} paired rows as expected")
endfunction()

if(DEFINED CHECK_ONLY)
  check_file("${CHECK_ONLY}" "")
  return()
endif()

foreach(v FERRYRUN BENCH CSV)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "${v} is not set")
  endif()
endforeach()
set(common -m 8:8 -p ${PAIRS} -b 0.05 -i 20 -w 2 -r 1)
file(REMOVE "${CSV}.csv" "${CSV}-alloc.csv" "${CSV}-counted.csv")
execute_process(COMMAND "${FERRYRUN}" -n 2 "${BENCH}" all ${common} --csv "${CSV}.csv"
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ferry-bench all exited with ${rc}")
endif()
check_file("${CSV}.csv"
           "am-lat;am-bw;am-bibw;put-lat;get-lat;put-bw;get-bw;am-lat-rndv;am-bw-rndv;tag-lat;tag-bw;tag-bibw;amo-fadd-lat;amo-cswap-lat;amo-fadd-am;put-notify-lat;amo-rate;put-notify-bw")
set(alloc_modes put-bw,get-bw,amo-rate,put-notify-bw)
execute_process(COMMAND "${FERRYRUN}" -n 2 "${BENCH}" ${alloc_modes} --alloc ${common}
                        --csv "${CSV}-alloc.csv"
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ferry-bench ${alloc_modes} --alloc exited with ${rc}")
endif()
check_file("${CSV}-alloc.csv" "put-bw-alloc;get-bw-alloc;amo-rate-alloc;put-notify-bw-alloc")
set(counted -m 4:8 -p ${PAIRS} -b 0.05 -i 20 -w 2 -r 1 --check)
execute_process(COMMAND "${FERRYRUN}" -n 2 "${BENCH}" amo-rate,put-notify-bw ${counted}
                        --csv "${CSV}-counted.csv"
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ferry-bench amo-rate,put-notify-bw --check exited with ${rc}")
endif()
check_file("${CSV}-counted.csv" "amo-rate@4;amo-rate@8;put-notify-bw@4;put-notify-bw@8")
