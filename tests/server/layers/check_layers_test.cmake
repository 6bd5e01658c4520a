# layers_test: cmake/check_layers.cmake passes the real tree and refuses a
# tree whose core includes gRPC and an edge, whose data plane includes the
# gRPC edge, and whose trainer includes the client and the worker, naming
# each include; the gRPC edge's includes are allowed.
# Run as: cmake -DSOURCE=<tree> -DFIXTURE=<bad tree> -P check_layers_test.cmake
set(check ${SOURCE}/cmake/check_layers.cmake)

execute_process(COMMAND ${CMAKE_COMMAND} -DROOT=${SOURCE} -P ${check}
                RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the source tree crosses its layers:\n${err}")
endif()

execute_process(COMMAND ${CMAKE_COMMAND} -DROOT=${FIXTURE} -P ${check}
                RESULT_VARIABLE rc ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "check_layers.cmake accepted a core that includes gRPC")
endif()
foreach(expected
    "server/core/uses_grpc.h: #include grpcpp/support/byte_buffer.h"
    "server/core/uses_grpc.h: #include server/rpc/state_service.h"
    "server/dataplane/uses_rpc.cc: #include server/rpc/chunk_reactors.h"
    "trainer/uses_client.h: #include client/client.h"
    "trainer/uses_client.h: #include worker/engine.h")
  string(FIND "${err}" "${expected}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "check_layers.cmake did not name '${expected}':\n${err}")
  endif()
endforeach()
foreach(allowed "server/core/job.h (" "data_session.h" "server/rpc/fine.cc" "trainer/step_policy.h")
  string(FIND "${err}" "${allowed}" at)
  if(NOT at EQUAL -1)
    message(FATAL_ERROR "check_layers.cmake refused an allowed include '${allowed}':\n${err}")
  endif()
endforeach()
