// Fixture of layers_test: the gRPC edge may include the core and gRPC.
#include <grpcpp/grpcpp.h>
#include "server/core/job.h"
#include "zerostate/v1/state_service.grpc.pb.h"
