# layers_test: cmake/check_layers.cmake passes the real tree and refuses a
# tree whose core includes gRPC and an edge, whose data plane includes the
# gRPC edge, whose replication includes the client library, the data
# plane's server side, etcd's membership or another service's stubs, whose
# membership includes the core, whose trainer includes the client and
# the worker, and whose trainer engine includes the client's internals, the
# server and the worker, naming each include; the gRPC edge's includes,
# replication's data-plane connections and stubs, the membership's
# interface and etcd stubs, and the client's public API in the trainer
# engine are allowed.
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
    "server/core/uses_etcd.h: #include server/membership/etcd_membership.h"
    "server/replication/uses_client.cc: #include client/client.h"
    "server/replication/uses_client.cc: #include server/dataplane/data_plane.h"
    "server/replication/uses_client.cc: #include server/membership/etcd_membership.h"
    "server/replication/uses_client.cc: #include zerostate/v1/state_service.grpc.pb.h"
    "server/membership/uses_core.h: #include server/core/primaries.h"
    "trainer/uses_client.h: #include client/client.h"
    "trainer/uses_client.h: #include worker/engine.h"
    "trainer/engine/uses_internals.cc: #include client/client_impl.h"
    "trainer/engine/uses_internals.cc: #include server/core/primaries.h"
    "trainer/engine/uses_internals.cc: #include worker/engine.h")
  string(FIND "${err}" "${expected}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "check_layers.cmake did not name '${expected}':\n${err}")
  endif()
endforeach()
foreach(allowed "server/core/job.h (" "data_session.h" "server/rpc/fine.cc" "trainer/step_policy.h"
    "include server/membership/membership.h" "include client/data_conn.h"
    "include zerostate/v1/replica.grpc.pb.h" "include server/membership/etcd_rpc.grpc.pb.h"
    "include client/client.h (trainer/engine" "include client/c_api_handles.h"
    "include trainer/policy.h")
  string(FIND "${err}" "${allowed}" at)
  if(NOT at EQUAL -1)
    message(FATAL_ERROR "check_layers.cmake refused an allowed include '${allowed}':\n${err}")
  endif()
endforeach()
