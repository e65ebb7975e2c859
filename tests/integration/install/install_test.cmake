# ctest install_prefix_and_build_tree: `cmake --install` to a temporary prefix; the installed
# loupe finds its skeletons beside itself (not through the source tree), kda runs, and
# examples/subject builds with find_package(loupe) against the prefix and against the build tree.
# Variables: LOUPE_BUILD_DIR, EXAMPLE_SOURCE_DIR, WORK_DIR, GENERATOR, CONSUMER_CXX_FLAGS,
# CONSUMER_LINKER_FLAGS (the flags libloupe was built with; the asan preset's need its runtime).
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)

function(run_step name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err
                  WORKING_DIRECTORY ${WORK_DIR})
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "${name} failed (${status}):\n${out}\n${err}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

file(MAKE_DIRECTORY ${WORK_DIR})
run_step(install ${CMAKE_COMMAND} --install ${LOUPE_BUILD_DIR} --prefix ${prefix})
foreach(file bin/loupe bin/kda share/loupe/skeletons/merged-v-decode.toml
             include/loupe/probe.hpp lib/cmake/loupe/loupe-targets.cmake)
  if(NOT EXISTS ${prefix}/${file})
    message(FATAL_ERROR "cmake --install did not put ${file} under ${prefix}")
  endif()
endforeach()

# Run from a folder outside the source tree with LOUPE_SKELETONS unset: the library must be the
# installed copy.
unset(ENV{LOUPE_SKELETONS})
run_step(skeleton_list ${prefix}/bin/loupe skeleton list --json)
if(NOT step_output MATCHES "\"library\":\"${prefix}/share/loupe/skeletons\"")
  message(FATAL_ERROR "the installed loupe does not read ${prefix}/share/loupe/skeletons:\n"
                      "${step_output}")
endif()
run_step(kda_list ${prefix}/bin/kda probe list --json)
if(NOT step_output MATCHES "\"decode\"")
  message(FATAL_ERROR "the installed kda lists no decode probe:\n${step_output}")
endif()

# find_package(loupe) from the prefix, then from the build tree.
foreach(where prefix build_tree)
  if(where STREQUAL "prefix")
    set(locate -DCMAKE_PREFIX_PATH=${prefix})
  else()
    set(locate -Dloupe_DIR=${LOUPE_BUILD_DIR})
  endif()
  set(consumer ${WORK_DIR}/subject_${where})
  run_step(configure_${where} ${CMAKE_COMMAND} -S ${EXAMPLE_SOURCE_DIR} -B ${consumer} -G ${GENERATOR}
           -DCMAKE_BUILD_TYPE=Release ${locate}
           "-DCMAKE_CXX_FLAGS=${CONSUMER_CXX_FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${CONSUMER_LINKER_FLAGS}")
  run_step(build_${where} ${CMAKE_COMMAND} --build ${consumer})
  run_step(probe_run_${where} ${prefix}/bin/loupe probe run softmax_check --set N=64 --seed 11
           --home ${WORK_DIR}/home --json -- ${consumer}/example_subject)
  if(NOT step_output MATCHES "\"verdict\":\"pass\"")
    message(FATAL_ERROR "softmax_check built against the ${where} did not pass:\n${step_output}")
  endif()
endforeach()
message(STATUS "installed loupe, kda and skeletons under ${prefix}; examples/subject built "
               "against the prefix and the build tree")
