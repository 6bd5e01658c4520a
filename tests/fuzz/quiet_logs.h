// Included once by each harness: drops protobuf's log lines (invalid UTF-8
// in a string field, text-format parse errors), which the code under test
// turns into statuses anyway and which would otherwise flood the fuzzer's
// output and slow it down.
#pragma once

#include "google/protobuf/stubs/logging.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}
