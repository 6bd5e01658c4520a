// Bad checkpoint, peer-timeout, pause and stream flags of zerostate-worker: refused with
// exit code 2 and a message naming the flag, before anything is trained.
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "tests/worker/fault_worker_process.h"

namespace zerostate::testing {
namespace {

struct BadFlags {
  const char* name;
  std::vector<std::string> flags;
  const char* named;  // what the message must contain
};

class RecoveryFlagsTest : public ::testing::TestWithParam<BadFlags> {};

TEST_P(RecoveryFlagsTest, RefusedNamingTheFlag) {
  const BadFlags& bad = GetParam();
  std::vector<std::string> flags = {
      absl::StrCat("--config=", ZEROSTATE_SOURCE_DIR, "/configs/mlp.textproto"),
      "--servers=127.0.0.1:1", "--plaintext", "--metrics_port=0"};
  flags.insert(flags.end(), bad.flags.begin(), bad.flags.end());
  WorkerProcess worker(ZEROSTATE_WORKER_PATH, {"WORLD_SIZE=1"}, flags,
                       absl::StrCat(::testing::TempDir(), "recovery_flags_", bad.name, ".log"));
  EXPECT_EQ(worker.Wait(absl::Seconds(60)), 2) << worker.Log();
  EXPECT_NE(worker.Log().find(bad.named), std::string::npos) << worker.Log();
}

INSTANTIATE_TEST_SUITE_P(
    Flags, RecoveryFlagsTest,
    ::testing::Values(
        BadFlags{"no_dir", {"--checkpoint_every=5"}, "--checkpoint_dir: '' must be an absolute directory"},
        BadFlags{"relative_dir", {"--checkpoint_every=5", "--checkpoint_dir=ckpt"},
                 "--checkpoint_dir: 'ckpt' must be an absolute directory"},
        BadFlags{"negative_keep", {"--checkpoint_every=5", "--checkpoint_dir=/tmp", "--keep_checkpoints=-1"},
                 "--keep_checkpoints: -1 must be >= 0"},
        BadFlags{"negative_timeout", {"--peer_timeout_seconds=-1"},
                 "--peer_timeout_seconds: -1 must be >= 0"},
        BadFlags{"nan_timeout", {"--peer_timeout_seconds=nan"}, "--peer_timeout_seconds: nan"},
        BadFlags{"negative_server_wait", {"--server_wait_seconds=-3"},
                 "--server_wait_seconds: -3 must be >= 0"},
        BadFlags{"negative_streams", {"--streams_per_server=-1"},
                 "--streams_per_server: -1 must be between 0"},
        BadFlags{"too_many_streams", {"--streams_per_server=65"},
                 "--streams_per_server: 65 must be between 0"},
        BadFlags{"negative_same_host_streams", {"--same_host_streams_per_server=-2"},
                 "--same_host_streams_per_server: -2 must be between -1"},
        BadFlags{"too_many_same_host_streams", {"--same_host_streams_per_server=65"},
                 "--same_host_streams_per_server: 65 must be between -1"},
        BadFlags{"pause_phase", {"--test_pause=backward:3:/tmp/x"},
                 "--test_pause: 'backward:3:/tmp/x' names no phase"},
        BadFlags{"pause_parts", {"--test_pause=push:3"}, "--test_pause: 'push:3' has too few parts"}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace zerostate::testing
