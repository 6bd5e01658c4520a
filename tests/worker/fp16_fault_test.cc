// fp16 runs (dynamic loss scaling that both skips steps and grows the
// scale within the run) under faults, as real processes (2 nodes of 2
// local ranks, 2 real zerostate-server processes):
//   - a worker killed mid-run and the job resumed by a new run: the
//     resumed run takes the loss scaler's state from the servers and ends
//     bit-identical to an uninterrupted run (a scaler restarted from its
//     initial scale would take other steps and end elsewhere);
//   - a server killed (server 1, then server 0 which holds the rendezvous):
//     the rollback completes and the run ends bit-identical. The ranks'
//     RPC deadline is set to 10 minutes, so a rank left waiting on a peer
//     through any deadline, e.g. a skip rendezvous the rollback never
//     joins, would end the run past the test's bound instead.
#include <fstream>

#include "tests/worker/kill_fixture.h"

namespace zerostate::testing {
namespace {

class Fp16FaultTest : public KillFixture {
 protected:
  // Past the kills after steps 30 and 31, with steps after them.
  Fp16FaultTest() { steps_ = 40; }

  // configs/mlp.textproto in fp16: an initial scale that overflows fp16
  // gradients, backoff with hysteresis 2, growth every 4 clean steps.
  std::string Fp16Config() {
    const std::string path = absl::StrCat(dir_, "fp16.textproto");
    std::ofstream out(path);
    out << "train { job_id: 'fp16' model { input_dim: 64 hidden: [256, 256, 128] output_dim: 16\n"
           "  activation: ACTIVATION_GELU data_seed: 7 }\n"
           "  micro_batch_size: 32 grad_accum_steps: 2 steps: 200\n"
           "  optimizer { kind: OPTIMIZER_ADAMW weight_decay: 0.01 }\n"
           "  lr { lr: 0.003 warmup_steps: 20 decay: LR_DECAY_COSINE min_lr: 0.0003 }\n"
           "  gradient_clipping: 1.0 precision: PRECISION_FP16 grad_dtype: DTYPE_FP16\n"
           "  weight_dtype: DTYPE_FP32 block_elems: 16384 seed: 42\n"
           "  loss_scaling { initial_scale: 16777216 growth_interval: 4 hysteresis: 2 } }\n"
           "cluster { rpc_timeout_ms: 600000 }\n";
    EXPECT_TRUE(out.good()) << path;
    return absl::StrCat("--config=", path);
  }

  // Runs `job` without faults; returns its final weights and checks that
  // the scaler both skipped and grew (so its state matters).
  std::string RunCleanFp16(const std::string& job) {
    auto nodes = StartNodes(job, {Fp16Config()});
    for (auto& n : nodes) EXPECT_EQ(n->Wait(kRunTimeout), 0) << n->Log();
    const std::string log = nodes[0]->Log();
    EXPECT_NE(log.find("(skipped: overflow)"), std::string::npos) << log;
    EXPECT_NE(log.find(absl::StrCat("step ", steps_ - 1, " loss")), std::string::npos) << log;
    return Weights(job);
  }
};

TEST_F(Fp16FaultTest, KilledWorkerResumedByANewRunEndsBitIdentical) {
  const std::string reference = RunCleanFp16("clean");
  ASSERT_FALSE(reference.empty());

  auto nodes = StartNodes("fp16kill", {Fp16Config(), "--peer_timeout_seconds=2"});
  ASSERT_TRUE(nodes[0]->AwaitLog("step 30 loss", kRunTimeout)) << nodes[0]->Log();
  nodes[1]->Kill();
  EXPECT_EQ(nodes[1]->Wait(kRunTimeout), -1);
  EXPECT_EQ(nodes[0]->Wait(kRunTimeout), 1) << nodes[0]->Log();
  EXPECT_EQ(nodes[0]->Log().find("loss: first"), std::string::npos) << "node 0 finished alone?";

  auto resumed = StartNodes("fp16kill", {Fp16Config()}, "resumed");
  for (auto& n : resumed) EXPECT_EQ(n->Wait(kRunTimeout), 0) << n->Log();
  const std::string log = resumed[0]->Log();
  EXPECT_EQ(log.find("step 0 loss"), std::string::npos) << "the new run started over: " << log;
  EXPECT_EQ(log.find("starts again from"), std::string::npos) << log;
  const std::string weights = Weights("fp16kill");
  EXPECT_EQ(weights.size(), reference.size());
  EXPECT_TRUE(weights == reference) << "the resumed fp16 run ended with other weights";
}

TEST_F(Fp16FaultTest, KilledServerIsRolledBackWithoutWaitingForADeadline) {
  const std::string reference = RunCleanFp16("clean");
  ASSERT_FALSE(reference.empty());
  for (int victim : {1, 0}) {
    SCOPED_TRACE(absl::StrCat("server ", victim, " killed"));
    const std::string job = absl::StrCat("fp16crash", victim);
    auto nodes = StartNodes(job, {Fp16Config(), "--checkpoint_every=5", CheckpointFlag()});
    CrashServerAfterStep(*nodes[0], 12, victim);
    CrashServerAfterStep(*nodes[0], 31, victim);
    for (auto& n : nodes) EXPECT_EQ(n->Wait(kRunTimeout), 0) << n->Log();
    const std::string log = nodes[0]->Log();
    const size_t first = log.find("restored");
    ASSERT_NE(first, std::string::npos) << log;
    EXPECT_NE(log.find("restored", first + 1), std::string::npos) << log;
    const std::string crashed = Weights(job);
    EXPECT_EQ(crashed.size(), reference.size());
    EXPECT_TRUE(crashed == reference) << "the rolled-back fp16 run ended with other weights";
  }
}

}  // namespace
}  // namespace zerostate::testing
