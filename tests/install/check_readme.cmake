# cmake -DREADME=README.md -DEXAMPLE=examples/hello.c -P check_readme.cmake
# Fails unless the README's first ```c code block is exactly the example
# program, so that the program the README shows is the one the tests run.
foreach(var README EXAMPLE)
  if(NOT DEFINED ${var} OR NOT EXISTS "${${var}}")
    message(FATAL_ERROR "check_readme: ${var} is not set or does not exist")
  endif()
endforeach()

file(READ "${README}" readme)
file(READ "${EXAMPLE}" example)

string(FIND "${readme}" "\n```c\n" start)
if(start EQUAL -1)
  message(FATAL_ERROR "check_readme: ${README} has no ```c code block")
endif()
math(EXPR start "${start} + 6")
string(SUBSTRING "${readme}" ${start} -1 rest)
string(FIND "${rest}" "\n```" stop)
if(stop EQUAL -1)
  message(FATAL_ERROR "check_readme: the ```c code block of ${README} is not closed")
endif()
math(EXPR stop "${stop} + 1")
string(SUBSTRING "${rest}" 0 ${stop} block)

if(NOT block STREQUAL example)
  file(WRITE "${CMAKE_CURRENT_BINARY_DIR}/readme_block.c" "${block}")
  message(FATAL_ERROR "check_readme: the ```c block of ${README} differs from ${EXAMPLE}; "
                      "compare with ${CMAKE_CURRENT_BINARY_DIR}/readme_block.c")
endif()
message(STATUS "check_readme: the README's example is ${EXAMPLE}")
