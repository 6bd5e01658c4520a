// The headers that most of every test's compile time goes to (gtest, gRPC,
// the service's generated protos, Abseil), compiled once into one
// precompiled header that every gtest executable reuses
// (tests/CMakeLists.txt: zerostate_share_test_pch). Tests still include
// what they use; this file only makes those includes cheap.
#pragma once

#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>

#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "zerostate/v1/state_service.grpc.pb.h"
