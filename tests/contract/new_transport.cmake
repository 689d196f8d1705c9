# A transport is one folder: copying src/btl/self under a new name, and
# adding that name to the one line of src/btl/CMakeLists.txt that lists the
# transports, must give the new transport the contract suite, with no other
# edit. This script does exactly that in a copy of the source tree, builds
# the suite there, and runs the contract tests the new folder's declaration
# stamped out.
#
# usage: cmake -DSRC=<source tree> -DWORK=<scratch folder> [-DCC=<compiler>]
#              [-DJOBS=n] -P new_transport.cmake
foreach(v SRC WORK)
  if(NOT ${v})
    message(FATAL_ERROR "usage: cmake -DSRC=... -DWORK=... -P new_transport.cmake")
  endif()
endforeach()
if(NOT JOBS)
  set(JOBS 2)
endif()
set(name loop)
set(tree ${WORK}/src)
set(build ${WORK}/build)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${tree})

# The tree as it is, without build folders.
foreach(item CMakeLists.txt cmake include src tests tools examples bench)
  file(COPY ${SRC}/${item} DESTINATION ${tree} PATTERN "build*" EXCLUDE)
endforeach()

# The new folder: self's, every "self" in names and text made "loop".
set(from ${tree}/src/btl/self)
set(to ${tree}/src/btl/${name})
file(GLOB_RECURSE files RELATIVE ${from} ${from}/*)
foreach(f IN LISTS files)
  string(REPLACE "self" "${name}" g "${f}")
  file(READ ${from}/${f} text)
  string(REPLACE "self" "${name}" text "${text}")
  string(REPLACE "SELF" "LOOP" text "${text}")
  file(WRITE ${to}/${g} "${text}")
endforeach()

# The one line outside the folder.
set(list_file ${tree}/src/btl/CMakeLists.txt)
file(READ ${list_file} text)
string(REGEX MATCHALL "\nset\\(FERRY_TRANSPORT_FOLDERS [^)\n]*\\)" lines "${text}")
list(LENGTH lines n)
if(NOT n EQUAL 1)
  message(FATAL_ERROR "src/btl/CMakeLists.txt has ${n} set(FERRY_TRANSPORT_FOLDERS ...) lines, not one")
endif()
string(REGEX REPLACE "(\nset\\(FERRY_TRANSPORT_FOLDERS [^)\n]*)\\)" "\\1 ${name})" text "${text}")
file(WRITE ${list_file} "${text}")

# Configure and build only what the contract runs need, without the
# transports that need foreign libraries.
set(cfg ${CMAKE_COMMAND} -S ${tree} -B ${build} -DCMAKE_BUILD_TYPE=RelWithDebInfo
        -DFERRY_WERROR=ON -DFERRY_ENABLE_OFI=OFF -DFERRY_ENABLE_PMIX=OFF)
if(CC)
  list(APPEND cfg -DCMAKE_C_COMPILER=${CC})
endif()
execute_process(COMMAND ${cfg} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring the copy failed:\n${out}")
endif()
if(NOT out MATCHES "ferry transport ${name}: built in")
  message(FATAL_ERROR "the copy's configure did not declare transport ${name}:\n${out}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${build} --target contract_suite ferryrun
                        -j ${JOBS}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building the copy failed:\n${out}")
endif()
file(READ ${build}/btl_components_shared.c table)
if(NOT table MATCHES "btl_${name}_component")
  message(FATAL_ERROR "the transport table does not list ${name}:\n${table}")
endif()

# The runs the new folder's declaration stamped out (self's: one process
# and four), and nothing skipped.
execute_process(COMMAND ${CMAKE_CTEST_COMMAND} -R "^contract_${name}(_np[0-9]+)?$" -FC ".*"
                        --output-on-failure
                WORKING_DIRECTORY ${build}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
message("${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the contract runs of ${name} failed")
endif()
if(NOT out MATCHES "100% tests passed, 0 tests failed out of 2" OR out MATCHES "Skipped")
  message(FATAL_ERROR "expected contract_${name} and contract_${name}_np4 to run and pass")
endif()
file(REMOVE_RECURSE ${WORK})
message(STATUS "new transport ${name}: the contract suite ran on it with one line added outside its folder")
