# The layers of the server and of the trainer library, checked at build time
# (zerostate_check_layers, cmake/ZerostateLayers.cmake) and by a test
# (tests/server/CMakeLists.txt: layers_test):
#
#   server/core/       includes no gRPC header (grpc/, grpcpp/, *.grpc.pb.h),
#                      none of the gRPC codec or the data plane's frames, and
#                      nothing of server/rpc/, server/dataplane/, server/cli/,
#                      server/replication/, state_server.h, or of
#                      server/membership/ but its interface (membership.h);
#   server/rpc/        nothing of server/dataplane/, server/cli/, state_server.h;
#   server/dataplane/  no gRPC header, nothing of server/rpc/, server/cli/,
#                      state_server.h;
#   server/replication/ (built into the gRPC edge's library) nothing of
#                      server/dataplane/, server/cli/, state_server.h, of
#                      membership/ but its interface (membership.h), or of
#                      client/ but the data plane's connections
#                      (client/data_conn.h, library zerostate_data_conn: the
#                      lanes to the backups), which link no client library;
#   server/membership/ nothing of server/ outside it, nothing of client/; its
#                      own etcd stubs are its only generated gRPC header;
#   trainer/           (the step policy and the bucket plan, below worker/
#                      and beside client/; not trainer/engine/) no gRPC
#                      header, nothing of server/, client/ or worker/;
#   trainer/engine/    (the trainer engine's pipeline over the client
#                      library, below worker/) no gRPC header, nothing of
#                      server/ or worker/, of client/ only its public API
#                      (client.h, zerostate_c.h) and the C API's handles
#                      (c_api_handles.h).
#
# Run as: cmake -DROOT=<tree> -P check_layers.cmake. Fails naming each file,
# line and include that crosses a layer.
if(NOT DEFINED ROOT)
  message(FATAL_ERROR "check_layers.cmake: pass -DROOT=<source tree>")
endif()

set(grpc_headers "grpc/|grpcpp/|grpc\\+\\+/|\\.grpc\\.pb\\.h")
set(edges_of_core "server/rpc/|server/dataplane/|server/cli/|server/replication/|server/state_server\\.h")
set(forbidden_core
  "${grpc_headers}|${edges_of_core}|server/membership/|common/chunk_wire\\.h|common/rpc_status\\.h|common/frame|common/data_stream\\.h|common/data_tls\\.h|common/shm_segment\\.h|common/metrics_exposer\\.h")
set(forbidden_rpc "server/dataplane/|server/cli/|server/state_server\\.h")
set(forbidden_dataplane "${grpc_headers}|server/rpc/|server/cli/|server/state_server\\.h|common/chunk_wire\\.h|common/rpc_status\\.h")
set(forbidden_replication
  "server/dataplane/|server/cli/|server/state_server\\.h|server/membership/|client/")
set(forbidden_membership "server/|client/|zerostate/")
set(forbidden_trainer "${grpc_headers}|server/|client/|worker/")
set(forbidden_engine "${grpc_headers}|server/|client/|worker/")
# What a layer may include although a rule above (or the one on generated
# gRPC stubs: the gRPC edge's only) would refuse it.
set(membership_interface "server/membership/membership\\.h$")
set(allowed_core "${membership_interface}")
set(allowed_rpc ".*\\.grpc\\.pb\\.h$")
set(allowed_replication
  "${membership_interface}|client/data_conn\\.h$|zerostate/v1/replica\\.grpc\\.pb\\.h$")
set(allowed_membership "server/membership/")
set(allowed_dataplane "^$")
set(allowed_trainer "^$")
set(allowed_engine "client/client\\.h$|client/zerostate_c\\.h$|client/c_api_handles\\.h$")

set(violations "")
foreach(layer core rpc dataplane replication membership trainer engine)
  set(dir "server/${layer}")
  if(layer STREQUAL "trainer")
    set(dir "trainer")
  elseif(layer STREQUAL "engine")
    set(dir "trainer/engine")
  endif()
  if(layer STREQUAL "trainer")  # its own folder; trainer/engine/ is a layer of its own
    file(GLOB files "${ROOT}/${dir}/*.h" "${ROOT}/${dir}/*.cc")
  else()
    file(GLOB_RECURSE files "${ROOT}/${dir}/*.h" "${ROOT}/${dir}/*.cc")
  endif()
  foreach(f ${files})
    file(STRINGS "${f}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"]")
    foreach(line ${lines})
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*[<\"]([^>\"]*)[>\"].*$" "\\1" header "${line}")
      if(header MATCHES "^(${allowed_${layer}})")
        continue()
      endif()
      if(header MATCHES "^(${forbidden_${layer}})" OR header MATCHES "\\.grpc\\.pb\\.h$")
        file(RELATIVE_PATH rel "${ROOT}" "${f}")
        string(APPEND violations "\n  ${rel}: #include ${header} (${dir}/ may not)")
      endif()
    endforeach()
  endforeach()
endforeach()

if(violations)
  message(FATAL_ERROR "includes across layers (cmake/check_layers.cmake):${violations}")
endif()
