// Fixture of layers_test: the membership is beneath the server's layers.
#pragma once
#include "server/core/primaries.h"
#include "server/membership/etcd_rpc.grpc.pb.h"
