// The engine's overlapped schedule as a backend sees it, on a real server
// with the CPU backend (the CUDA backend gets the same calls): a
// recording Backend in front of a CpuBackend logs every call.
//   - Every bucket a layer completes is started before the first of them
//     is finished (Backend::StartReduceScatter), and finished in order.
//   - Buckets are cut at train.bucket_elems: a layer of several blocks
//     gives several.
//   - Layer by layer: a synchronous step that is not a sync point leaves
//     its weights to the next forward, which lands before each layer
//     exactly the buckets below that layer's end that were not landed
//     yet, inside the forward (before the layer's need returns), not
//     after the step.
//   - A rank alone on its node stages in its own memory: no reduce-scatter
//     or all-gather, the same bits.
//   - Non-finite gradients without fp16 skip the step (the trainer
//     engine's one rule, as zerostate.torch's test_nan_gradient checks).
//   - A Step the servers refuse once the gathers of its version are out
//     (the servers alive) ends the step at once, whole, layer by layer
//     or delayed: the gathers are cancelled, not waited out.
// The weights are checked bit for bit by train_test.cc; this checks when
// things happen.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/convert.h"
#include "common/init.h"
#include "google/protobuf/text_format.h"

#include "tests/testing/server_process.h"
#include "trainer/bucket_plan.h"
#include "worker/config.h"
#include "worker/cpu_backend.h"
#include "worker/engine.h"
#include "worker/job.h"
#include "worker/local_group.h"
#include "worker/teacher_data.h"

namespace zerostate::worker {
namespace {

// One backend call: what it was and its range (need: [0, end)).
struct Call {
  enum Kind { kStart, kFinish, kAllGather, kNeed, kNeeded, kReady } kind;
  Range range;
};

// Forwards every call to `inner`, logging it first.
class RecordingBackend : public Backend {
 public:
  explicit RecordingBackend(Backend* inner) : inner_(inner) {}
  std::vector<Call> calls;
  bool in_place = false;  // offer the inner backend's own memory as the staging

  float* GradsInPlace() override { return in_place ? inner_->GradsInPlace() : nullptr; }
  float* ParamsInPlace() override { return in_place ? inner_->ParamsInPlace() : nullptr; }

  uint32_t local_rank() const override { return inner_->local_rank(); }
  uint32_t local_size() const override { return inner_->local_size(); }
  absl::Status ZeroGrads() override { return inner_->ZeroGrads(); }
  v1::DType grad_staging() const override { return inner_->grad_staging(); }
  v1::DType weight_staging() const override { return inner_->weight_staging(); }
  absl::StatusOr<float> ForwardBackward(const float* x, const float* y, uint32_t batch,
                                        float loss_scale, const GradsReadyFn& ready) override {
    GradsReadyFn logged;
    if (ready) {
      logged = [this, &ready](uint64_t begin) {
        calls.push_back({Call::kReady, Range{begin, begin}});
        ready(begin);
      };
    }
    return inner_->ForwardBackward(x, y, batch, loss_scale, logged);
  }
  bool SetWeightsNeeded(WeightsNeededFn need) override {
    if (!need) return inner_->SetWeightsNeeded(nullptr);
    return inner_->SetWeightsNeeded([this, need = std::move(need)](uint64_t end) {
      calls.push_back({Call::kNeed, Range{0, end}});
      need(end);
      calls.push_back({Call::kNeeded, Range{0, end}});
    });
  }
  absl::Status StartReduceScatter(Range bucket, void* host_out) override {
    calls.push_back({Call::kStart, bucket});
    return inner_->StartReduceScatter(bucket, host_out);
  }
  absl::Status FinishReduceScatter() override {
    calls.push_back({Call::kFinish, Range{}});
    return inner_->FinishReduceScatter();
  }
  absl::Status AllGather(Range bucket, const void* host_in) override {
    calls.push_back({Call::kAllGather, bucket});
    return inner_->AllGather(bucket, host_in);
  }
  absl::Status AllGathersRead() override { return inner_->AllGathersRead(); }
  absl::StatusOr<HostBuffer> AllocHost(uint64_t elems) override { return inner_->AllocHost(elems); }
  absl::Status ReadParams(Range elems, float* host) override { return inner_->ReadParams(elems, host); }
  absl::StatusOr<bool> NodeAnyFailed(bool failed) override { return inner_->NodeAnyFailed(failed); }

 private:
  Backend* const inner_;
};

// Like the CUDA backend for a BF16 job, on the host: the host side of the
// collectives is BF16 (grad_staging, weight_staging), converted as the
// client converts (common/convert.h), around `inner` (a CPU backend, whose
// reduce-scatter is done when it starts).
class Bf16StagingBackend : public RecordingBackend {
 public:
  explicit Bf16StagingBackend(Backend* inner) : RecordingBackend(inner) {}
  v1::DType grad_staging() const override { return v1::DTYPE_BF16; }
  v1::DType weight_staging() const override { return v1::DTYPE_BF16; }
  absl::Status StartReduceScatter(Range bucket, void* host_out) override {
    std::vector<float> sum(trainer::LocalShare(bucket, local_size(), local_rank()).size());
    absl::Status s = RecordingBackend::StartReduceScatter(bucket, sum.data());
    auto* out = static_cast<uint16_t*>(host_out);
    for (size_t i = 0; i < sum.size(); ++i) out[i] = FloatToBf16(sum[i]);
    return s;
  }
  absl::Status AllGather(Range bucket, const void* host_in) override {
    std::vector<float> weights(trainer::LocalShare(bucket, local_size(), local_rank()).size());
    const auto* in = static_cast<const uint16_t*>(host_in);
    for (size_t i = 0; i < weights.size(); ++i) weights[i] = Bf16ToFloat(in[i]);
    return RecordingBackend::AllGather(bucket, weights.data());
  }
};

constexpr const char* kConfig = R"pb(
  train {
    model { input_dim: 12 hidden: [40, 24] output_dim: 4 data_seed: 3 }
    micro_batch_size: 4
    steps: 3
    block_elems: 256
    bucket_elems: 1
  }
)pb";

// One server; each test opens jobs on it, one rank each.
class EngineScheduleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::ServerProcessOptions options;
    options.binary = ZEROSTATE_SERVER_PATH;
    options.args = {"--threads=1", "--metrics_listen="};
    auto server = testing::ServerProcess::Start(options, 0);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    client::ClientOptions client_options;
    client_options.servers = {server_->address()};
    client_options.plaintext = true;
    client_options.job_token = "engine-schedule-test-token-0123456789abcdef";
    auto client = client::Client::Connect(client_options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  // kConfig merged with `extra` (text format), as job `job_id`.
  static v1::TrainConfig Train(const std::string& job_id, const std::string& extra = "") {
    auto parsed = ParseTextConfig(kConfig);
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_TRUE(google::protobuf::TextFormat::MergeFromString(extra, &*parsed)) << extra;
    parsed->mutable_train()->set_job_id(job_id);
    auto config = NormalizeConfig(*parsed, 1);
    EXPECT_TRUE(config.ok()) << config.status();
    return config->train();
  }

  // A registered job and its CPU backend (a group of one rank).
  struct Rank {
    OpenedJob opened;
    std::vector<uint64_t> ready;
    std::unique_ptr<LocalGroup> group;
    std::unique_ptr<CpuBackend> cpu;
  };
  Rank Open(const v1::TrainConfig& train, client::Client* client = nullptr) {
    Rank r;
    auto model = std::make_unique<Mlp>(train.model());
    client::Client* to = client != nullptr ? client : client_.get();
    auto opened = OpenJob(to, BuildJobSpec(train, *model, 1), Topology{}, train.job_id());
    EXPECT_TRUE(opened.ok()) << opened.status();
    if (!opened.ok()) return r;
    r.opened = *std::move(opened);
    const Layout& layout = r.opened.job->layout();
    model->Bind(layout);
    r.ready = model->ReadyPoints();
    r.group = MakeThreadGroup(1, layout.total_elems);
    r.cpu = std::make_unique<CpuBackend>(r.group.get(), 0, std::move(model));
    return r;
  }

  // Runs `train.steps()` steps of `engine` (its weights loaded) on
  // `backend`, calling `check` after each with the step and its report.
  static void Train(const v1::TrainConfig& train, Engine& engine, Backend& backend,
                    const std::function<void(uint64_t, const StepReport&)>& check) {
    engine.SetSyncPoints([&](uint64_t version) { return version == train.steps(); });
    TeacherData data(train.model());
    const uint32_t n = train.micro_batch_size();
    std::vector<float> x(size_t{n} * data.input_dim()), y(size_t{n} * data.output_dim());
    for (uint64_t step = 0; step < train.steps(); ++step) {
      MicroBatchFn micro = [&](uint32_t, float scale, const GradsReadyFn& r) {
        data.Fill(step * n, n, x.data(), y.data());
        return backend.ForwardBackward(x.data(), y.data(), n, scale, r);
      };
      auto report = engine.Step(step, micro);
      ASSERT_TRUE(report.ok()) << "step " << step << ": " << report.status();
      check(step, *report);
    }
  }

  std::unique_ptr<testing::ServerProcess> server_;  // killed last
  std::unique_ptr<client::Client> client_;
};

TEST_F(EngineScheduleTest, BucketsStartTogetherAndWeightsLandLayerByLayer) {
  const v1::TrainConfig train = Train("engine-schedule");
  Rank rank = Open(train);
  ASSERT_NE(rank.cpu, nullptr);
  client::JobClient* job = rank.opened.job.get();
  const std::vector<uint64_t>& ready = rank.ready;
  const std::vector<Range> buckets = trainer::BackwardBuckets(job->layout(), ready, 1);
  // Not vacuous: some layer has several buckets.
  ASSERT_GT(buckets.size(), ready.size());
  RecordingBackend backend(rank.cpu.get());
  Engine engine(job, &backend, train, Topology{}, ready);
  ASSERT_TRUE(engine.LoadWeights(0).ok());
  backend.calls.clear();
  Train(train, engine, backend, [&](uint64_t step, const StepReport& report) {
    const std::vector<Call> calls = std::exchange(backend.calls, {});

    // Reduce-scatters: after each layer's ready, every bucket from that
    // point on not started yet is started, then all finished, in order.
    std::vector<Range> started;
    size_t most_at_once = 0;  // a layer's end may lie in the block of the layer before it
    for (size_t i = 0; i < calls.size(); ++i) {
      if (calls[i].kind != Call::kReady) continue;
      size_t j = i + 1, starts = 0;
      for (; j < calls.size() && calls[j].kind == Call::kStart; ++j, ++starts) {
        EXPECT_GE(calls[j].range.begin, calls[i].range.begin) << "step " << step;
        started.push_back(calls[j].range);
      }
      most_at_once = std::max(most_at_once, starts);
      for (size_t k = 0; k < starts; ++k, ++j) {
        ASSERT_LT(j, calls.size());
        EXPECT_EQ(calls[j].kind, Call::kFinish) << "step " << step << ": call " << j;
      }
    }
    EXPECT_EQ(started, buckets) << "step " << step << ": every bucket once, last layer first";
    EXPECT_GE(most_at_once, 2u) << "step " << step << ": no layer had several buckets in flight";

    // Landing: step 0 runs on the loaded weights; steps 1 and 2 land the
    // version before them in their forward (before its first ready), layer
    // by layer, because steps 0 and 1 were not sync points. Step 2's
    // version 3 is one: it lands whole at the end of step 2.
    std::vector<Range> landed, after;
    std::vector<uint64_t> needs;
    bool in_need = false, forward = true;
    for (const Call& c : calls) {
      if (c.kind == Call::kReady) forward = false;
      if (c.kind == Call::kNeed) {
        in_need = true;
        needs.push_back(c.range.end);
      } else if (c.kind == Call::kNeeded) {
        in_need = false;
        // Everything below the layer's end has landed, nothing above it.
        for (const Range& b : buckets) {
          const bool down = std::find(landed.begin(), landed.end(), b) != landed.end();
          if (step > 0) {
            EXPECT_EQ(down, b.begin < c.range.end) << "step " << step << " bucket " << b.begin;
          }
        }
      } else if (c.kind == Call::kAllGather && forward) {
        EXPECT_TRUE(in_need) << "step " << step << ": bucket " << c.range.begin
                             << " landed in the forward outside a layer's need";
        landed.push_back(c.range);
      } else if (c.kind == Call::kAllGather) {
        after.push_back(c.range);
      }
    }
    // The MLP asks for its weights every 64 rows of a layer, then for the
    // bias: at least one need per layer, rising through the model.
    EXPECT_GE(needs.size(), ready.size()) << "step " << step << ": a need per layer at least";
    EXPECT_TRUE(std::is_sorted(needs.begin(), needs.end())) << "step " << step;
    const std::vector<Range> first_layer_first(buckets.rbegin(), buckets.rend());
    EXPECT_EQ(landed, step == 0 ? std::vector<Range>{} : first_layer_first) << "step " << step;
    const bool last = step + 1 == train.steps();
    EXPECT_EQ(after, last ? buckets : std::vector<Range>{}) << "step " << step;
    EXPECT_EQ(engine.in_flight(), !last) << "step " << step;
    EXPECT_FALSE(report.delayed);
  });
  EXPECT_FALSE(engine.in_flight());
}

// A backend whose host side is BF16 (the CUDA backend's for a BF16 job)
// gives the weights of the client's own conversion bit for bit: the
// engine pushes and gathers its staging as BF16, at the right offsets.
TEST_F(EngineScheduleTest, Bf16StagingGivesTheWeightsOfTheClientsConversion) {
  std::vector<float> master[2];
  for (int staged = 0; staged < 2; ++staged) {
    const v1::TrainConfig train = Train(absl::StrCat("engine-bf16-", staged),
                                        "train { grad_dtype: DTYPE_BF16 weight_dtype: DTYPE_BF16 }");
    Rank rank = Open(train);
    ASSERT_NE(rank.cpu, nullptr);
    Bf16StagingBackend bf16(rank.cpu.get());
    RecordingBackend fp32(rank.cpu.get());
    Backend& backend = staged ? static_cast<Backend&>(bf16) : fp32;
    Engine engine(rank.opened.job.get(), &backend, train, Topology{}, rank.ready);
    ASSERT_TRUE(engine.LoadWeights(0).ok());
    Train(train, engine, backend, [](uint64_t, const StepReport&) {});
    if (HasFatalFailure()) return;
    master[staged].resize(rank.opened.job->layout().total_elems);
    ASSERT_TRUE(rank.opened.job->GatherMaster(train.steps(), Range{0, master[staged].size()},
                                              master[staged].data()).ok());
  }
  EXPECT_EQ(std::memcmp(master[0].data(), master[1].data(), master[0].size() * sizeof(float)), 0);
  // Not vacuous: training moved the weights off their seeded start.
  const v1::TrainConfig train = Train("unused");
  Mlp model(train.model());
  auto spec = NormalizeJobSpec(BuildJobSpec(train, model, 1));
  ASSERT_TRUE(spec.ok());
  std::vector<float> initial(master[0].size());
  FillInitialWeights(LayoutOf(*spec), train.seed(), Range{0, initial.size()}, initial.data());
  EXPECT_NE(initial, master[0]);
}

// A rank alone on its node pushes straight from its gradients and gathers
// straight into its parameters (Backend::GradsInPlace, ParamsInPlace): no
// reduce-scatter or all-gather copies, and the weights and losses of the
// run through the staging, bit for bit: synchronous, layer by layer and
// whole, and with the delayed update, whose gathers still go through the
// staging (its backward reads the version before while they land).
TEST_F(EngineScheduleTest, ARankAloneStagesInItsOwnMemoryBitIdenticalToTheStaging) {
  const char* const kModes[] = {"", "train { whole_landing: true }",
                                "train { delayed_update { enabled: true warmup_steps: 1 } steps: 4 }"};
  for (int mode = 0; mode < 3; ++mode) {
    const bool delayed = mode == 2;
    std::vector<float> master[2], losses[2];
    size_t exchanges[2] = {0, 0}, all_gathers[2] = {0, 0};
    for (int in_place = 0; in_place < 2; ++in_place) {
      const v1::TrainConfig train = Train(absl::StrCat("engine-in-place-", mode, "-", in_place), kModes[mode]);
      Rank rank = Open(train);
      ASSERT_NE(rank.cpu, nullptr);
      RecordingBackend backend(rank.cpu.get());
      backend.in_place = in_place == 1;
      Engine engine(rank.opened.job.get(), &backend, train, Topology{}, rank.ready);
      ASSERT_TRUE(engine.LoadWeights(0).ok());
      Train(train, engine, backend,
            [&](uint64_t, const StepReport& report) { losses[in_place].push_back(report.loss); });
      if (HasFatalFailure()) return;
      ASSERT_TRUE(engine.Drain().ok());
      for (const Call& c : backend.calls) {
        exchanges[in_place] += c.kind == Call::kStart || c.kind == Call::kFinish;
        all_gathers[in_place] += c.kind == Call::kAllGather;
      }
      master[in_place].resize(rank.opened.job->layout().total_elems);
      ASSERT_TRUE(rank.opened.job->GatherMaster(train.steps(), Range{0, master[in_place].size()},
                                                master[in_place].data()).ok());
    }
    SCOPED_TRACE(kModes[mode]);
    EXPECT_EQ(std::memcmp(master[0].data(), master[1].data(), master[0].size() * sizeof(float)), 0);
    EXPECT_EQ(losses[0], losses[1]);
    EXPECT_GT(exchanges[0], 0u);
    EXPECT_EQ(exchanges[1], 0u);
    EXPECT_GT(all_gathers[0], 0u);
    EXPECT_EQ(all_gathers[1], delayed ? all_gathers[0] : 0u);
  }
}

// Non-finite gradients without fp16 skip the step, as zerostate.torch's
// engine does (trainer/engine/coordinator.h): the version moves on, the
// master weights do not, and the run goes on; synchronous and with the
// delayed update's Step in flight.
TEST_F(EngineScheduleTest, NonFiniteGradientsWithoutFp16SkipTheStep) {
  const char* const kModes[] = {
      "train { precision: PRECISION_BF16 weight_dtype: DTYPE_BF16 }",
      "train { precision: PRECISION_BF16 weight_dtype: DTYPE_BF16 "
      "delayed_update { enabled: true warmup_steps: 1 } }"};
  for (int mode = 0; mode < 2; ++mode) {
    SCOPED_TRACE(kModes[mode]);
    const v1::TrainConfig train = Train(absl::StrCat("engine-nan-", mode), kModes[mode]);
    ASSERT_EQ(train.steps(), 3u);
    Rank rank = Open(train);
    ASSERT_NE(rank.cpu, nullptr);
    client::JobClient* job = rank.opened.job.get();
    Engine engine(job, rank.cpu.get(), train, Topology{}, rank.ready);
    ASSERT_TRUE(engine.LoadWeights(0).ok());
    engine.SetSyncPoints([&](uint64_t version) { return version == train.steps(); });
    TeacherData data(train.model());
    const uint32_t n = train.micro_batch_size();
    std::vector<float> x(size_t{n} * data.input_dim()), y(size_t{n} * data.output_dim());
    std::vector<std::vector<float>> master;  // by version, from 1
    for (uint64_t step = 0; step < train.steps(); ++step) {
      MicroBatchFn micro = [&](uint32_t, float scale, const GradsReadyFn& r) {
        data.Fill(step * n, n, x.data(), y.data());
        if (step == 1) std::fill(x.begin(), x.end(), std::nanf(""));
        return rank.cpu->ForwardBackward(x.data(), y.data(), n, scale, r);
      };
      auto report = engine.Step(step, micro);
      ASSERT_TRUE(report.ok()) << "step " << step << ": " << report.status();
      // The Steps of steps 0 and 1 run on into the next step (layer by
      // layer; delayed), so the masters tell what they did.
      master.emplace_back(job->layout().total_elems);
      ASSERT_TRUE(job->GatherMaster(step + 1, Range{0, master.back().size()}, master.back().data())
                      .ok());
    }
    ASSERT_TRUE(engine.Drain().ok());
    EXPECT_TRUE(master[0] == master[1]) << "step 1 was applied";
    EXPECT_FALSE(master[1] == master[2]) << "step 2 did not train";
    for (float w : master[2]) ASSERT_TRUE(std::isfinite(w));
  }
}

// Step 1's Step is refused by a server that is alive after the step's
// gathers of version 2 went out: another run replaced the job (deleted
// and registered again, at version 0) in the step's phase hook, so the
// coordinator's gradient statistics of step 1 are "too far ahead" and no
// Step brings version 2. The engine cancels its gathers (Engine::Failed):
// the step, or the Step in flight's verdict, fails at once with the
// servers' error, not after the gathers' deadline (20 s here), and the
// replacing job stays at version 0.
TEST_F(EngineScheduleTest, ARefusedStepEndsAtOnceWithItsGathersOut) {
  const char* const kModes[] = {"train { whole_landing: true }", "",
                                "train { delayed_update { enabled: true warmup_steps: 1 } }"};
  for (int mode = 0; mode < 3; ++mode) {
    SCOPED_TRACE(kModes[mode]);
    client::ClientOptions options;
    options.servers = {server_->address()};
    options.plaintext = true;
    options.job_token = "engine-schedule-test-token-0123456789abcdef";
    options.rpc_timeout = std::chrono::milliseconds(20000);
    options.max_attempts = 1;
    auto client = client::Client::Connect(options);
    ASSERT_TRUE(client.ok()) << client.status();
    const v1::TrainConfig train = Train(absl::StrCat("engine-refused-", mode), kModes[mode]);
    Rank rank = Open(train, client->get());
    ASSERT_NE(rank.cpu, nullptr);
    Engine engine(rank.opened.job.get(), rank.cpu.get(), train, Topology{}, rank.ready);
    ASSERT_TRUE(engine.LoadWeights(0).ok());
    engine.SetSyncPoints([&](uint64_t version) { return version == train.steps(); });
    std::unique_ptr<client::JobClient> replaced;
    engine.SetPhaseHook([&](Phase phase, uint64_t step) {
      if (phase != Phase::kStep || step != 1) return;
      ASSERT_TRUE(rank.opened.job->Delete().ok());
      auto again = (*client)->RegisterJob(rank.opened.job->spec());
      ASSERT_TRUE(again.ok()) << again.status();
      replaced = *std::move(again);
    });
    TeacherData data(train.model());
    const uint32_t n = train.micro_batch_size();
    std::vector<float> x(size_t{n} * data.input_dim()), y(size_t{n} * data.output_dim());
    absl::Time start;
    absl::Status failed;
    for (uint64_t step = 0; step < 2 && failed.ok(); ++step) {
      MicroBatchFn micro = [&](uint32_t, float scale, const GradsReadyFn& r) {
        data.Fill(step * n, n, x.data(), y.data());
        return rank.cpu->ForwardBackward(x.data(), y.data(), n, scale, r);
      };
      start = absl::Now();
      failed = engine.Step(step, micro).status();
    }
    if (failed.ok()) failed = engine.Drain();  // the Step in flight's verdict
    const absl::Duration took = absl::Now() - start;
    EXPECT_EQ(failed.code(), absl::StatusCode::kFailedPrecondition) << failed;
    EXPECT_NE(failed.message().find("step: 1 is too far ahead"), std::string::npos) << failed;
    EXPECT_LT(took, absl::Seconds(10)) << "the step waited on its gathers";
    EXPECT_FALSE(engine.in_flight());
    ASSERT_NE(replaced, nullptr);
    auto version = replaced->Version();
    ASSERT_TRUE(version.ok()) << version.status();
    EXPECT_EQ(*version, 0u);
  }
}

}  // namespace
}  // namespace zerostate::worker
