# Declaring transports and modex backends.
#
# A transport is one folder, src/btl/<name>/, whose CMakeLists.txt probes
# what it needs and makes one declaration:
#
#   ferry_transport(NAME sm          NAME first: a CONTRACT group has a NAME too
#     SOURCES sm_module.c sm_endpoint.c ...
#     [MODULE]                       built as the loadable module ferry_btl_<name>.so
#     [LIBRARIES lib...] [INCLUDE_DIRS dir...] [COMPILE_OPTIONS opt...]
#     [HARDWARE glob...]             MODULE only: devices it is for (see below)
#     [DISABLED "reason"]            not built (when the reason is not empty): its
#                                    tests are still declared and report SKIPPED
#     [CONTRACT [NAME label] NP n... [ENV VAR=VALUE...] [CASES case,...] [TIMEOUT s]]...
#     [FUZZ harness.c...])
#
# and src/btl/CMakeLists.txt lists the folder in its one line of transports.
# Nothing else outside the folder names it:
# - its code goes into the library (or into its module, and into the static
#   library), and the generated transport table (src/btl/components.c.in)
#   lists it;
# - each CONTRACT group stamps out the contract suite (tests/contract) for
#   it, one CTest entry per process count: contract_<name> for one process
#   without a NAME label, contract_<name>[_<label>]_np<n> otherwise; ENV
#   runs it under ferryrun with those variables set;
# - its folder's tests/CMakeLists.txt, when there is one, joins the suite
#   (added from tests/CMakeLists.txt, where ferry_contract_test() for
#   further contract runs, ferryrun and the test programs are known);
# - its manual page ferry-<name>.7, when there is one, is installed in man7;
# - each FUZZ harness h.c becomes fuzz_<name>_h through ferry_add_fuzzer
#   (cmake/fuzz.cmake) when the build has it, with its corpus in the
#   folder's tests/fuzz/h/ (tests/CMakeLists.txt).
#
# MODULE: for a transport that needs a foreign library (ofi: libfabric). The
# shared library then does not link that library; the module does, and is
# loaded only when FERRY_BTL names the transport, or when FERRY_BTL is empty
# and one of the HARDWARE patterns matches a path on the host (docs/design.md,
# "Modules"). The static library holds the module's code itself.
#
#   ferry_modex_backend(NAME pmix SOURCES ... [MODULE] [LIBRARIES ...]
#                       [INCLUDE_DIRS ...] [DISABLED "reason"])
#
# does the same for a launcher backend (src/rt): ferry_modex_<name>.so, loaded
# when the job's launcher needs it.

set_property(GLOBAL PROPERTY FERRY_TRANSPORTS "")
set_property(GLOBAL PROPERTY FERRY_MODEX_BACKENDS "")
set_property(GLOBAL PROPERTY FERRY_STATIC_OBJECTS "")
set_property(GLOBAL PROPERTY FERRY_MODULE_TARGETS "")

# Where modules go in the build tree: the folder "ferry" beside libferry.so,
# where the loader looks (src/rt/module.h), so the build runs uninstalled.
set(FERRY_MODULE_BUILD_DIR ${PROJECT_BINARY_DIR}/ferry)
set(FERRY_MODULE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/ferry)

# The code of a module: an object library (for the module and for the
# static library) and the module itself, with the descriptor the loader
# reads and nothing else exported.
function(_ferry_module kind name symbol type header)
  cmake_parse_arguments(arg "" "" "SOURCES;LIBRARIES;INCLUDE_DIRS;COMPILE_OPTIONS" ${ARGN})
  set(obj ferry_${kind}_${name}_obj)
  add_library(${obj} OBJECT ${arg_SOURCES})
  target_include_directories(${obj} PRIVATE ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src)
  # SYSTEM: a foreign library's headers are not held to ferry's warnings.
  target_include_directories(${obj} SYSTEM PRIVATE ${arg_INCLUDE_DIRS})
  target_compile_options(${obj} PRIVATE ${arg_COMPILE_OPTIONS})

  set(mod ferry_${kind}_${name})
  set(FERRY_MODULE_KIND ${kind})
  set(FERRY_MODULE_NAME ${name})
  set(FERRY_MODULE_SYMBOL ${symbol})
  set(FERRY_MODULE_TYPE ${type})
  set(FERRY_MODULE_HEADER ${header})
  configure_file(${PROJECT_SOURCE_DIR}/cmake/module.c.in
                 ${CMAKE_CURRENT_BINARY_DIR}/${mod}_info.c @ONLY)
  add_library(${mod} MODULE $<TARGET_OBJECTS:${obj}> ${CMAKE_CURRENT_BINARY_DIR}/${mod}_info.c)
  target_include_directories(${mod} PRIVATE ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src)
  # The module links the shared library for the internals it uses (exported
  # under FERRY_PRIVATE_<version>, cmake/libferry.map.in) and its foreign
  # library; it exports only its descriptor.
  target_link_libraries(${mod} PRIVATE ferry ${arg_LIBRARIES})
  target_link_options(${mod} PRIVATE
    -Wl,--version-script=${PROJECT_SOURCE_DIR}/cmake/module.map -Wl,--no-undefined)
  set_target_properties(${mod} PROPERTIES
    PREFIX ""
    LIBRARY_OUTPUT_DIRECTORY ${FERRY_MODULE_BUILD_DIR}
    LINK_DEPENDS ${PROJECT_SOURCE_DIR}/cmake/module.map)
  install(TARGETS ${mod} LIBRARY DESTINATION ${FERRY_MODULE_INSTALL_DIR})

  set_property(GLOBAL APPEND PROPERTY FERRY_STATIC_OBJECTS ${obj})
  set_property(GLOBAL APPEND PROPERTY FERRY_MODULE_TARGETS ${mod})
  # What libferry.a needs besides itself (ferry.pc's Libs.private,
  # cmake/install.cmake).
  set_property(GLOBAL APPEND PROPERTY FERRY_LINK_LIBS ${arg_LIBRARIES})
endfunction()

# Built-in code goes into the object library both libraries are made of.
function(_ferry_builtin)
  cmake_parse_arguments(arg "" "" "SOURCES;LIBRARIES;INCLUDE_DIRS;COMPILE_OPTIONS" ${ARGN})
  target_sources(ferry_obj PRIVATE ${arg_SOURCES})
  if(arg_INCLUDE_DIRS)
    target_include_directories(ferry_obj SYSTEM PRIVATE ${arg_INCLUDE_DIRS})
  endif()
  if(arg_COMPILE_OPTIONS)
    target_compile_options(ferry_obj PRIVATE ${arg_COMPILE_OPTIONS})
  endif()
  if(arg_LIBRARIES)
    set_property(GLOBAL APPEND PROPERTY FERRY_CORE_LIBS ${arg_LIBRARIES})
    set_property(GLOBAL APPEND PROPERTY FERRY_LINK_LIBS ${arg_LIBRARIES})
  endif()
endfunction()

function(_ferry_check_name what name)
  if(NOT name MATCHES "^[a-z][a-z0-9_]*$" OR name MATCHES "^.................................")
    message(FATAL_ERROR "${what} NAME '${name}': 1..32 characters of [a-z0-9_], a letter first")
  endif()
endfunction()

function(ferry_transport)
  # CONTRACT groups first: each runs from its keyword to the next CONTRACT,
  # FUZZ or the end.
  set(rest "")
  set(groups 0)
  set(in_contract FALSE)
  foreach(a IN LISTS ARGN)
    if(a STREQUAL "CONTRACT")
      math(EXPR groups "${groups} + 1")
      set(group_${groups} "")
      set(in_contract TRUE)
    elseif(in_contract AND a MATCHES "^(FUZZ|SOURCES|LIBRARIES|INCLUDE_DIRS|COMPILE_OPTIONS|HARDWARE|MODULE|DISABLED)$")
      set(in_contract FALSE)
      list(APPEND rest "${a}")
    elseif(in_contract)
      list(APPEND group_${groups} "${a}")
    else()
      list(APPEND rest "${a}")
    endif()
  endforeach()
  cmake_parse_arguments(arg "MODULE" "NAME;DISABLED"
                        "SOURCES;LIBRARIES;INCLUDE_DIRS;COMPILE_OPTIONS;HARDWARE;FUZZ" ${rest})
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "ferry_transport: unexpected arguments ${arg_UNPARSED_ARGUMENTS}")
  endif()
  set(t ${arg_NAME})
  _ferry_check_name(ferry_transport "${t}")
  get_property(known GLOBAL PROPERTY FERRY_TRANSPORTS)
  if(t IN_LIST known)
    message(FATAL_ERROR "ferry_transport: transport '${t}' declared twice")
  endif()
  set(indexes "")
  if(groups GREATER 0)
    foreach(i RANGE 1 ${groups})
      list(APPEND indexes ${i})
      cmake_parse_arguments(c "" "NAME;TIMEOUT;CASES" "NP;ENV" ${group_${i}})
      if(NOT c_NP OR c_UNPARSED_ARGUMENTS)
        message(FATAL_ERROR "ferry_transport(${t}): CONTRACT wants NP n... "
                            "[NAME label] [ENV VAR=VALUE...] [CASES list] [TIMEOUT s]")
      endif()
    endforeach()
  endif()

  set_property(GLOBAL APPEND PROPERTY FERRY_TRANSPORTS ${t})
  set_property(GLOBAL PROPERTY FERRY_TRANSPORT_${t}_DIR ${CMAKE_CURRENT_SOURCE_DIR})
  set_property(GLOBAL PROPERTY FERRY_TRANSPORT_${t}_CONTRACTS ${groups})
  foreach(i IN LISTS indexes)
    set_property(GLOBAL PROPERTY FERRY_TRANSPORT_${t}_CONTRACT_${i} "${group_${i}}")
  endforeach()
  if(arg_FUZZ)
    list(TRANSFORM arg_FUZZ PREPEND ${CMAKE_CURRENT_SOURCE_DIR}/)
    set_property(GLOBAL PROPERTY FERRY_TRANSPORT_${t}_FUZZ ${arg_FUZZ})
  endif()

  if(NOT "${arg_DISABLED}" STREQUAL "")
    set_property(GLOBAL PROPERTY FERRY_TRANSPORT_${t}_KIND disabled)
    set_property(GLOBAL PROPERTY FERRY_TRANSPORT_${t}_DISABLED "${arg_DISABLED}")
    message(STATUS "ferry transport ${t}: not built (${arg_DISABLED})")
    return()
  endif()
  if(NOT arg_SOURCES)
    message(FATAL_ERROR "ferry_transport(${t}): no SOURCES")
  endif()
  set(code SOURCES ${arg_SOURCES} LIBRARIES ${arg_LIBRARIES} INCLUDE_DIRS ${arg_INCLUDE_DIRS}
           COMPILE_OPTIONS ${arg_COMPILE_OPTIONS})
  if(arg_MODULE)
    set_property(GLOBAL PROPERTY FERRY_TRANSPORT_${t}_KIND module)
    set_property(GLOBAL PROPERTY FERRY_TRANSPORT_${t}_HARDWARE "${arg_HARDWARE}")
    _ferry_module(btl ${t} btl_${t}_component ferry_btl_component_t "ferry/btl.h" ${code})
    message(STATUS "ferry transport ${t}: module ferry_btl_${t}.so")
  else()
    if(arg_HARDWARE)
      message(FATAL_ERROR "ferry_transport(${t}): HARDWARE is for MODULE transports")
    endif()
    set_property(GLOBAL PROPERTY FERRY_TRANSPORT_${t}_KIND builtin)
    _ferry_builtin(${code})
    message(STATUS "ferry transport ${t}: built in")
  endif()
  if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/ferry-${t}.7)
    install(FILES ${CMAKE_CURRENT_SOURCE_DIR}/ferry-${t}.7 DESTINATION ${CMAKE_INSTALL_MANDIR}/man7)
  endif()
endfunction()

function(ferry_modex_backend)
  cmake_parse_arguments(arg "MODULE" "NAME;DISABLED"
                        "SOURCES;LIBRARIES;INCLUDE_DIRS;COMPILE_OPTIONS" ${ARGN})
  set(b ${arg_NAME})
  _ferry_check_name(ferry_modex_backend "${b}")
  if(NOT "${arg_DISABLED}" STREQUAL "")
    message(STATUS "ferry modex backend ${b}: not built (${arg_DISABLED})")
    return()
  endif()
  set_property(GLOBAL APPEND PROPERTY FERRY_MODEX_BACKENDS ${b})
  set(code SOURCES ${arg_SOURCES} LIBRARIES ${arg_LIBRARIES} INCLUDE_DIRS ${arg_INCLUDE_DIRS}
           COMPILE_OPTIONS ${arg_COMPILE_OPTIONS})
  if(arg_MODULE)
    set_property(GLOBAL PROPERTY FERRY_MODEX_${b}_KIND module)
    _ferry_module(modex ${b} rt_modex_${b}_backend rt_modex_backend_t "rt/modex_impl.h" ${code})
    message(STATUS "ferry modex backend ${b}: module ferry_modex_${b}.so")
  else()
    set_property(GLOBAL PROPERTY FERRY_MODEX_${b}_KIND builtin)
    _ferry_builtin(${code})
    message(STATUS "ferry modex backend ${b}: built in")
  endif()
endfunction()

# The tables of transports and modex backends, once for the shared library
# (modules by file name) and once for the static one (every part built in):
# ${PROJECT_BINARY_DIR}/{btl_components,modex_backends}_{shared,static}.c.
function(ferry_generate_tables)
  get_property(transports GLOBAL PROPERTY FERRY_TRANSPORTS)
  get_property(backends GLOBAL PROPERTY FERRY_MODEX_BACKENDS)
  foreach(lib shared static)
    set(FERRY_LIBRARY_KIND ${lib})
    set(FERRY_COMPONENT_DECLS "")
    set(FERRY_COMPONENT_ENTRIES "")
    foreach(t IN LISTS transports)
      get_property(kind GLOBAL PROPERTY FERRY_TRANSPORT_${t}_KIND)
      if(kind STREQUAL "disabled")
        continue()
      endif()
      # A module's devices, in both tables: the static library has its
      # code built in, and opens it by the same rule as the shared one
      # loads it.
      set(hw_field "")
      if(NOT kind STREQUAL "builtin")
        get_property(hw GLOBAL PROPERTY FERRY_TRANSPORT_${t}_HARDWARE)
        string(APPEND FERRY_COMPONENT_DECLS "static const char *const btl_${t}_hardware[] = {")
        foreach(h IN LISTS hw)
          string(APPEND FERRY_COMPONENT_DECLS "\"${h}\", ")
        endforeach()
        string(APPEND FERRY_COMPONENT_DECLS "NULL};\n")
        set(hw_field ", .hardware = btl_${t}_hardware")
      endif()
      if(kind STREQUAL "builtin" OR lib STREQUAL "static")
        string(APPEND FERRY_COMPONENT_DECLS "extern const ferry_btl_component_t btl_${t}_component;\n")
        string(APPEND FERRY_COMPONENT_ENTRIES
               "    {.name = \"${t}\", .builtin = &btl_${t}_component${hw_field}},\n")
      else()
        string(APPEND FERRY_COMPONENT_ENTRIES
               "    {.name = \"${t}\", .module = \"ferry_btl_${t}\"${hw_field}},\n")
      endif()
    endforeach()
    configure_file(${PROJECT_SOURCE_DIR}/src/btl/components.c.in
                   ${PROJECT_BINARY_DIR}/btl_components_${lib}.c @ONLY)

    set(FERRY_MODEX_DECLS "")
    set(FERRY_MODEX_ENTRIES "")
    foreach(b IN LISTS backends)
      get_property(kind GLOBAL PROPERTY FERRY_MODEX_${b}_KIND)
      if(kind STREQUAL "builtin" OR lib STREQUAL "static")
        string(APPEND FERRY_MODEX_DECLS "extern const rt_modex_backend_t rt_modex_${b}_backend;\n")
        string(APPEND FERRY_MODEX_ENTRIES
               "    {.name = \"${b}\", .builtin = &rt_modex_${b}_backend},\n")
      else()
        string(APPEND FERRY_MODEX_ENTRIES
               "    {.name = \"${b}\", .module = \"ferry_modex_${b}\"},\n")
      endif()
    endforeach()
    configure_file(${PROJECT_SOURCE_DIR}/src/rt/modex_backends.c.in
                   ${PROJECT_BINARY_DIR}/modex_backends_${lib}.c @ONLY)
  endforeach()
endfunction()
