# ctest probe_out_of_tree_subject: install libloupe's "subject" component to a temporary prefix,
# build examples/subject against it with find_package(loupe), and run its check through loupe.
# Variables: LOUPE_BUILD_DIR, EXAMPLE_SOURCE_DIR, WORK_DIR, LOUPE_EXECUTABLE, GENERATOR, and
# CONSUMER_CXX_FLAGS / CONSUMER_LINKER_FLAGS: the flags libloupe was built with, which the consumer
# needs too when they name a runtime (the asan preset's library calls the sanitizer runtime).
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)

function(run_step name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "${name} failed (${status}):\n${out}\n${err}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

run_step(install ${CMAKE_COMMAND} --install ${LOUPE_BUILD_DIR} --component subject --prefix ${prefix})
if(NOT EXISTS ${prefix}/include/loupe/probe.hpp)
  message(FATAL_ERROR "install did not put include/loupe/probe.hpp under ${prefix}")
endif()
run_step(configure ${CMAKE_COMMAND} -S ${EXAMPLE_SOURCE_DIR} -B ${WORK_DIR}/build -G ${GENERATOR}
         -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${prefix}
         "-DCMAKE_CXX_FLAGS=${CONSUMER_CXX_FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${CONSUMER_LINKER_FLAGS}")
run_step(build ${CMAKE_COMMAND} --build ${WORK_DIR}/build)
set(subject ${WORK_DIR}/build/example_subject)

run_step(list ${subject} list --json)
if(NOT step_output MATCHES "\"softmax_check\"" OR NOT step_output MATCHES "\"softmax_speed\"")
  message(FATAL_ERROR "example_subject list --json does not name both probes:\n${step_output}")
endif()

run_step(probe_run ${LOUPE_EXECUTABLE} probe run softmax_check --set N=64 --seed 11
         --home ${WORK_DIR}/home --json -- ${subject})
if(NOT step_output MATCHES "\"verdict\":\"pass\"")
  message(FATAL_ERROR "softmax_check did not pass:\n${step_output}")
endif()
message(STATUS "out-of-tree subject built against ${prefix} and its check passed")
