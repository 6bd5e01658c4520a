// A training run through real zerostate-server processes (2 nodes x 2
// local ranks as threads, CPU backend) against the reference loop in one
// process with no service (tests/worker/reference_loop.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "google/protobuf/text_format.h"
#include "prometheus/registry.h"
#include "tests/testing/server_process.h"
#include "common/init.h"
#include "tests/worker/reference_loop.h"
#include "worker/job.h"
#include "worker/config.h"
#include "worker/trainer.h"

namespace zerostate::worker {
namespace {

struct Case {
  const char* name;
  int servers;
  const char* config;  // text format, merged into kBase
  bool expect_skips = false;  // some steps skipped (fp16 overflow), some applied
};

constexpr const char* kBase = R"pb(
  train {
    model { input_dim: 12 hidden: [40, 24] output_dim: 4 data_seed: 3 }
    micro_batch_size: 4
    grad_accum_steps: 2
    steps: 8
    optimizer { kind: OPTIMIZER_ADAMW weight_decay: 0.01 }
    lr { lr: 0.01 warmup_steps: 2 decay: LR_DECAY_COSINE }
    block_elems: 256
    seed: 5
  }
)pb";

class TrainTest : public ::testing::TestWithParam<Case> {};

// Trains through the service; returns the master weights at the run's last
// version, and rank 0's loss per step in `losses` if given. Each rank's
// client registers its metrics in `metrics` if given; `shared_staging`:
// RankRun's.
absl::StatusOr<std::vector<float>> TrainThroughService(
    const v1::WorkerConfig& config, const std::vector<std::string>& servers,
    std::vector<float>* losses = nullptr,
    std::shared_ptr<prometheus::Registry> metrics = nullptr, bool shared_staging = true) {
  client::ClientOptions options;
  options.servers = servers;
  options.metrics = metrics;
  options.plaintext = true;  // loopback test servers
  options.job_token = "train-test-token-0123456789abcdef01234567";  // shared by every rank
  const uint64_t elems = FlatElems(config);
  std::unique_ptr<LocalGroup> groups[2] = {MakeThreadGroup(2, elems), MakeThreadGroup(2, elems)};
  std::vector<absl::Status> status(4);
  std::vector<std::thread> ranks;
  for (uint32_t r = 0; r < 4; ++r) {
    ranks.emplace_back([&, r] {
      auto client = client::Client::Connect(options);  // one per rank, as worker/engine.h asks
      if (!client.ok()) {
        status[r] = client.status();
        return;
      }
      RankRun run;
      run.config = config;
      run.topo = Topology{r / 2, 2, r % 2, 2};
      run.client = client->get();
      run.group = groups[r / 2].get();
      run.shared_staging = shared_staging;
      auto result = TrainRank(run);
      status[r] = result.status();
      if (result.ok() && r == 0 && losses != nullptr) *losses = result->losses;
    });
  }
  for (auto& t : ranks) t.join();
  for (const auto& s : status) {
    if (!s.ok()) return s;
  }
  options.metrics = nullptr;  // the check below counts in no run's figures
  auto client = client::Client::Connect(options);
  if (!client.ok()) return client.status();
  auto job = (*client)->AttachJob(config.train().job_id());
  if (!job.ok()) return job.status();
  // Every step applied once: the job is exactly at the run's last version.
  auto version = (*job)->Version();
  if (!version.ok()) return version.status();
  if (*version != config.train().steps()) {
    return absl::InternalError(absl::StrCat("job at version ", *version, ", expected ",
                                            config.train().steps()));
  }
  std::vector<float> master((*job)->layout().total_elems);
  auto s = (*job)->GatherMaster(config.train().steps(), Range{0, master.size()}, master.data());
  if (!s.ok()) return s;
  return master;
}

// Bit-for-bit, naming the first mismatches.
void ExpectBitIdentical(const std::vector<float>& service, const std::vector<float>& reference) {
  ASSERT_EQ(service.size(), reference.size());
  int mismatches = 0;
  for (size_t i = 0; i < reference.size() && mismatches < 10; ++i) {
    if (std::memcmp(&service[i], &reference[i], sizeof(float)) != 0) {
      ADD_FAILURE() << "element " << i << ": service " << service[i] << " reference " << reference[i];
      ++mismatches;
    }
  }
}

TEST_P(TrainTest, MasterWeightsMatchTheReferenceLoopBitForBit) {
  const Case& c = GetParam();
  auto parsed = ParseTextConfig(kBase);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_TRUE(google::protobuf::TextFormat::MergeFromString(c.config, &*parsed)) << c.config;
  parsed->mutable_train()->set_job_id(c.name);
  auto config = NormalizeConfig(*parsed, 4);
  ASSERT_TRUE(config.ok()) << config.status();

  testing::ServerProcessOptions options;
  options.binary = ZEROSTATE_SERVER_PATH;
  options.args = {"--threads=2", "--metrics_listen="};
  auto cluster = testing::ServerCluster::Start(c.servers, options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto master = TrainThroughService(*config, (*cluster)->addresses());
  ASSERT_TRUE(master.ok()) << master.status();

  ReferenceResult ref = RunReference(*config, Topology{0, 2, 0, 2});
  ASSERT_EQ(master->size(), ref.master.size());
  // Not vacuous: training moved the weights, and the skip path ran if asked.
  std::vector<float> initial(ref.master.size());
  Mlp model(config->train().model());
  FillInitialWeights(LayoutOf(*NormalizeJobSpec(BuildJobSpec(config->train(), model, 2))),
                     config->train().seed(), Range{0, initial.size()}, initial.data());
  EXPECT_NE(initial, ref.master);
  const auto skips = std::count(ref.skipped.begin(), ref.skipped.end(), true);
  if (c.expect_skips) {
    EXPECT_GT(skips, 0) << "no overflow: raise initial_scale";
    EXPECT_LT(skips, static_cast<long>(ref.skipped.size())) << "every step overflowed";
  } else {
    EXPECT_EQ(skips, 0);
  }
  ExpectBitIdentical(*master, ref.master);
  EXPECT_TRUE((*cluster)->StopAll().ok());
}

INSTANTIATE_TEST_SUITE_P(
    Runs, TrainTest,
    ::testing::Values(Case{"fp32_one_server", 1, ""},
                      Case{"fp32_two_servers", 2, ""},
                      Case{"bf16_two_servers", 2,
                           "train { precision: PRECISION_BF16 weight_dtype: DTYPE_BF16 }"},
                      // 2^20 overflows fp16 on the wire at first: skipped steps and backoff.
                      Case{"fp16_loss_scaling", 2,
                           "train { precision: PRECISION_FP16 weight_dtype: DTYPE_FP16 "
                           "loss_scaling { initial_scale: 1048576 growth_interval: 3 } }",
                           true},
                      // Buckets of one block: several start at each layer's
                      // end and are finished in order (Backend::
                      // StartReduceScatter), and the next forward lands a
                      // layer's weights bucket by bucket.
                      Case{"fp32_one_block_buckets_two_servers", 2, "train { bucket_elems: 1 }"},
                      Case{"fp32_whole_landing_one_server", 1, "train { whole_landing: true }"},
                      Case{"sgd_clipping_one_server", 1,
                           "train { optimizer { kind: OPTIMIZER_SGD_MOMENTUM } gradient_clipping: 0.05 }"},
                      // The speculative step (the servers step each block
                      // with the Step sent ahead): overflows restore it,
                      // clipping redoes it, the result is the reference's.
                      Case{"speculative_fp16_loss_scaling", 2,
                           "train { speculative_step: true precision: PRECISION_FP16 "
                           "weight_dtype: DTYPE_FP16 "
                           "loss_scaling { initial_scale: 1048576 growth_interval: 3 } }",
                           true},
                      Case{"speculative_clipping_two_servers", 2,
                           "train { speculative_step: true gradient_clipping: 0.05 }"},
                      // Delayed update: the reference runs steps from max(warmup, 1) on
                      // the version before, so a step applied twice or on the wrong
                      // weights changes the bits.
                      Case{"delayed_update_two_servers", 2,
                           "train { delayed_update { enabled: true warmup_steps: 3 } }"},
                      Case{"delayed_update_one_block_buckets", 1,
                           "train { delayed_update { enabled: true warmup_steps: 2 } bucket_elems: 1 }"},
                      Case{"delayed_update_no_warmup_clipping_bf16", 1,
                           "train { delayed_update { enabled: true } gradient_clipping: 0.05 "
                           "precision: PRECISION_BF16 weight_dtype: DTYPE_BF16 }"}),
    [](const auto& info) { return std::string(info.param.name); });

// The client's zero-copy bytes of `op` ("push", "gather") over every
// server and rank.
double ZeroCopyBytes(prometheus::Registry& r, const std::string& op) {
  double total = 0;
  for (const auto& family : r.Collect()) {
    if (family.name != "zerostate_client_zero_copy_bytes_total") continue;
    for (const auto& m : family.metric) {
      for (const auto& label : m.label) {
        if (label.name == "op" && label.value == op) total += m.counter.value;
      }
    }
  }
  return total;
}

// The engine's staging in the client's shared buffers (the default): on
// the same-host plane the servers fold every push straight out of it and
// write every gathered piece straight into it, the client copying no
// byte; the run is bit-identical to one whose staging is the backend's
// own memory, which the client copies (zero bytes in place).
TEST(SharedStagingTest, ServersReadAndWriteTheStagingInPlaceBitIdenticalToCopies) {
  auto parsed = ParseTextConfig(kBase);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  testing::ServerProcessOptions options;
  options.binary = ZEROSTATE_SERVER_PATH;
  options.args = {"--threads=2", "--metrics_listen="};
  auto cluster = testing::ServerCluster::Start(2, options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  std::vector<float> master[2], losses[2];
  double pushed[2], gathered[2];
  for (int shared = 0; shared < 2; ++shared) {
    parsed->mutable_train()->set_job_id(shared ? "shared_staging" : "copied_staging");
    auto config = NormalizeConfig(*parsed, 4);
    ASSERT_TRUE(config.ok()) << config.status();
    auto metrics = std::make_shared<prometheus::Registry>();
    auto m = TrainThroughService(*config, (*cluster)->addresses(), &losses[shared], metrics,
                                 shared == 1);
    ASSERT_TRUE(m.ok()) << m.status();
    master[shared] = *std::move(m);
    pushed[shared] = ZeroCopyBytes(*metrics, "push");
    gathered[shared] = ZeroCopyBytes(*metrics, "gather");
  }
  ExpectBitIdentical(master[1], master[0]);
  EXPECT_EQ(losses[1], losses[0]);
  EXPECT_EQ(pushed[0], 0);
  EXPECT_EQ(gathered[0], 0);
  // fp32 on the wire and in the staging: every push of every step, from
  // each node's two ranks (their shares cover the flat space once), and
  // every gather (the first weights, then each step's) went in place.
  const auto flat = static_cast<double>(FlatElems(*NormalizeConfig(*parsed, 4)));
  const double steps = parsed->train().steps();
  EXPECT_EQ(pushed[1], steps * 2 * flat * sizeof(float));
  EXPECT_EQ(gathered[1], (steps + 1) * 2 * flat * sizeof(float));
  EXPECT_TRUE((*cluster)->StopAll().ok());
}

// A second run (new run id) resumes the job where the servers hold it and
// ends where one uninterrupted run would.
TEST(TrainResumeTest, NewRunResumesFromTheServersVersion) {
  auto config = NormalizeConfig(*ParseTextConfig(kBase), 4);
  ASSERT_TRUE(config.ok()) << config.status();
  config->mutable_train()->set_job_id("resume");
  testing::ServerProcessOptions options;
  options.binary = ZEROSTATE_SERVER_PATH;
  options.args = {"--threads=2", "--metrics_listen="};
  auto cluster = testing::ServerCluster::Start(2, options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  v1::WorkerConfig first = *config;
  first.mutable_train()->set_steps(3);
  ASSERT_TRUE(TrainThroughService(first, (*cluster)->addresses()).ok());
  v1::WorkerConfig second = *config;
  second.mutable_cluster()->set_run_id("second");
  auto master = TrainThroughService(second, (*cluster)->addresses());
  ASSERT_TRUE(master.ok()) << master.status();
  ExpectBitIdentical(*master, RunReference(*config, Topology{0, 2, 0, 2}).master);
  EXPECT_TRUE((*cluster)->StopAll().ok());
}

// Delayed update: the warm-up steps are the synchronous run's, bit for bit
// (losses and, after them, the weights); from the first delayed step on
// the run differs from the synchronous one and matches the delayed
// reference (above). Both end at the same version.
TEST(DelayedUpdateTest, WarmUpStepsAreTheSynchronousRunsBitForBit) {
  auto config = NormalizeConfig(*ParseTextConfig(kBase), 4);
  ASSERT_TRUE(config.ok()) << config.status();
  testing::ServerProcessOptions options;
  options.binary = ZEROSTATE_SERVER_PATH;
  options.args = {"--threads=2", "--metrics_listen="};
  auto cluster = testing::ServerCluster::Start(1, options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  constexpr uint32_t kWarmup = 3;
  v1::WorkerConfig sync = *config;
  sync.mutable_train()->set_job_id("sync");
  v1::WorkerConfig delayed = *config;
  delayed.mutable_train()->set_job_id("delayed");
  delayed.mutable_train()->mutable_delayed_update()->set_enabled(true);
  delayed.mutable_train()->mutable_delayed_update()->set_warmup_steps(kWarmup);
  std::vector<float> sync_losses, delayed_losses;
  auto sync_master = TrainThroughService(sync, (*cluster)->addresses(), &sync_losses);
  ASSERT_TRUE(sync_master.ok()) << sync_master.status();
  auto delayed_master = TrainThroughService(delayed, (*cluster)->addresses(), &delayed_losses);
  ASSERT_TRUE(delayed_master.ok()) << delayed_master.status();
  ASSERT_EQ(sync_losses.size(), config->train().steps());
  ASSERT_EQ(delayed_losses.size(), config->train().steps());
  // Step kWarmup is the first on stale weights: its loss differs.
  for (uint32_t s = 0; s <= kWarmup; ++s) {
    EXPECT_EQ(std::memcmp(&sync_losses[s], &delayed_losses[s], sizeof(float)) == 0, s < kWarmup)
        << "step " << s << ": sync " << sync_losses[s] << " delayed " << delayed_losses[s];
  }
  EXPECT_NE(*sync_master, *delayed_master);
  ExpectBitIdentical(*sync_master, RunReference(sync, Topology{0, 2, 0, 2}).master);
  ExpectBitIdentical(*delayed_master, RunReference(delayed, Topology{0, 2, 0, 2}).master);
  EXPECT_TRUE((*cluster)->StopAll().ok());
}

}  // namespace
}  // namespace zerostate::worker
