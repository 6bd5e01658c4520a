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
// The weights are checked bit for bit by train_test.cc; this checks when
// things happen.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tests/testing/server_process.h"
#include "worker/buckets.h"
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

  uint32_t local_rank() const override { return inner_->local_rank(); }
  uint32_t local_size() const override { return inner_->local_size(); }
  absl::Status ZeroGrads() override { return inner_->ZeroGrads(); }
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
  absl::Status StartReduceScatter(Range bucket, float* host_out) override {
    calls.push_back({Call::kStart, bucket});
    return inner_->StartReduceScatter(bucket, host_out);
  }
  absl::Status FinishReduceScatter() override {
    calls.push_back({Call::kFinish, Range{}});
    return inner_->FinishReduceScatter();
  }
  absl::Status AllGather(Range bucket, const float* host_in) override {
    calls.push_back({Call::kAllGather, bucket});
    return inner_->AllGather(bucket, host_in);
  }
  absl::StatusOr<HostBuffer> AllocHost(uint64_t elems) override { return inner_->AllocHost(elems); }
  absl::Status ReadParams(Range elems, float* host) override { return inner_->ReadParams(elems, host); }
  absl::StatusOr<bool> NodeAnyFailed(bool failed) override { return inner_->NodeAnyFailed(failed); }

 private:
  Backend* const inner_;
};

constexpr const char* kConfig = R"pb(
  train {
    job_id: "engine-schedule"
    model { input_dim: 12 hidden: [40, 24] output_dim: 4 data_seed: 3 }
    micro_batch_size: 4
    steps: 3
    block_elems: 256
    bucket_elems: 1
  }
)pb";

TEST(EngineScheduleTest, BucketsStartTogetherAndWeightsLandLayerByLayer) {
  auto parsed = ParseTextConfig(kConfig);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  auto config = NormalizeConfig(*parsed, 1);
  ASSERT_TRUE(config.ok()) << config.status();
  const v1::TrainConfig& train = config->train();

  testing::ServerProcessOptions options;
  options.binary = ZEROSTATE_SERVER_PATH;
  options.args = {"--threads=1", "--metrics_listen="};
  auto server = testing::ServerProcess::Start(options, 0);
  ASSERT_TRUE(server.ok()) << server.status();
  client::ClientOptions client_options;
  client_options.servers = {(*server)->address()};
  client_options.plaintext = true;
  client_options.job_token = "engine-schedule-test-token-0123456789abcdef";
  auto client = client::Client::Connect(client_options);
  ASSERT_TRUE(client.ok()) << client.status();

  auto model = std::make_unique<Mlp>(train.model());
  const Topology topo{0, 1, 0, 1};
  auto opened = OpenJob(client->get(), BuildJobSpec(train, *model, 1), topo, "engine-schedule");
  ASSERT_TRUE(opened.ok()) << opened.status();
  client::JobClient* job = opened->job.get();
  model->Bind(job->layout());
  const std::vector<uint64_t> ready = model->ReadyPoints();
  const std::vector<Range> buckets = BackwardBuckets(job->layout(), ready, 1);
  // Not vacuous: some layer has several buckets.
  ASSERT_GT(buckets.size(), ready.size());
  TeacherData data(train.model());
  const uint32_t n = train.micro_batch_size();
  std::vector<float> x(size_t{n} * data.input_dim()), y(size_t{n} * data.output_dim());

  auto group = MakeThreadGroup(1, job->layout().total_elems);
  CpuBackend cpu(group.get(), 0, std::move(model));
  RecordingBackend backend(&cpu);
  Engine engine(job, &backend, train, topo, ready);
  engine.SetSyncPoints([&](uint64_t version) { return version == train.steps(); });
  ASSERT_TRUE(engine.LoadWeights(0).ok());

  for (uint64_t step = 0; step < train.steps(); ++step) {
    backend.calls.clear();
    MicroBatchFn micro = [&](uint32_t, float scale, const GradsReadyFn& r) {
      data.Fill(step * n, n, x.data(), y.data());
      return backend.ForwardBackward(x.data(), y.data(), n, scale, r);
    };
    auto report = engine.Step(step, micro);
    ASSERT_TRUE(report.ok()) << "step " << step << ": " << report.status();
    const std::vector<Call>& calls = backend.calls;

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
          if (step > 0) EXPECT_EQ(down, b.begin < c.range.end) << "step " << step << " bucket " << b.begin;
        }
      } else if (c.kind == Call::kAllGather && forward) {
        EXPECT_TRUE(in_need) << "step " << step << ": bucket " << c.range.begin
                             << " landed in the forward outside a layer's need";
        landed.push_back(c.range);
      } else if (c.kind == Call::kAllGather) {
        after.push_back(c.range);
      }
    }
    EXPECT_EQ(needs.size(), ready.size()) << "step " << step << ": one need per layer";
    const std::vector<Range> first_layer_first(buckets.rbegin(), buckets.rend());
    EXPECT_EQ(landed, step == 0 ? std::vector<Range>{} : first_layer_first) << "step " << step;
    const bool last = step + 1 == train.steps();
    EXPECT_EQ(after, last ? buckets : std::vector<Range>{}) << "step " << step;
    EXPECT_EQ(engine.in_flight(), !last) << "step " << step;
    EXPECT_FALSE(report->delayed);
  }
  EXPECT_FALSE(engine.in_flight());
}

}  // namespace
}  // namespace zerostate::worker
