// Fixture of layers_test: the core may not include gRPC or an edge.
#pragma once
#include <grpcpp/support/byte_buffer.h>
#include "server/rpc/state_service.h"
#include "server/core/job.h"
