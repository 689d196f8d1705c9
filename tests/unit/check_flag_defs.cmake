# cmake -DROOTS="dir;dir..." -P check_flag_defs.cmake
# Fails when a capability flag (FERRY_BTL_FLAG_*) is defined anywhere but in
# the table FERRY_BTL_FLAG_MAP of include/ferry/btl.h, which generates every
# flag with its name: a flag defined by hand would reach ferry_info unnamed.
cmake_minimum_required(VERSION 3.20)
if(NOT DEFINED ROOTS)
  message(FATAL_ERROR "check_flag_defs: ROOTS is not set")
endif()
set(bad "")
foreach(root IN LISTS ROOTS)
  if(IS_DIRECTORY "${root}")
    file(GLOB_RECURSE files "${root}/*.h" "${root}/*.c")
  else()
    set(files "${root}")
  endif()
  foreach(f IN LISTS files)
    file(STRINGS "${f}" lines REGEX "FERRY_BTL_FLAG_")
    foreach(line IN LISTS lines)
      if(line MATCHES "#[ \t]*define[ \t]+FERRY_BTL_FLAG_([A-Z0-9_]+)" AND
         NOT CMAKE_MATCH_1 MATCHES "^(MAP|ENUM_|BIT_|NAME_|HELP_)$")
        list(APPEND bad "${f}: ${line}")
      elseif(line MATCHES "FERRY_BTL_FLAG_[A-Z0-9_]+[ \t]*=([^=]|$)")
        list(APPEND bad "${f}: ${line}")
      endif()
    endforeach()
  endforeach()
endforeach()
if(bad)
  string(REPLACE ";" "\n  " bad "${bad}")
  message(FATAL_ERROR "check_flag_defs: flags defined outside FERRY_BTL_FLAG_MAP "
                      "(add them to the table in include/ferry/btl.h):\n  ${bad}")
endif()
message(STATUS "check_flag_defs: every FERRY_BTL_FLAG_* comes from FERRY_BTL_FLAG_MAP")
