// The CUDA backend against the CPU model (worker/mlp.h) on one GPU, its
// errors, and the node vote (NodeAnyFailed) on one and two GPUs. Without a
// GPU only NoGpuNamesTheFailingCall runs; the others skip, so CI (CUDA
// installed, no GPU) builds and runs this file.
#include "worker/cuda/cuda_backend.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "common/convert.h"
#include "common/init.h"
#include "trainer/bucket_plan.h"
#include "worker/mlp.h"
#include "worker/teacher_data.h"

namespace zerostate::worker::cuda {
namespace {

constexpr uint32_t kBatch = 4;

// A small GELU MLP, its layout and seeded weights with non-zero biases.
struct Model {
  v1::MlpConfig config;
  Layout layout;
  std::vector<float> params;
  Model() {
    config.set_input_dim(5);
    config.add_hidden(7);
    config.add_hidden(6);
    config.set_output_dim(3);
    config.set_activation(v1::ACTIVATION_GELU);
    config.set_data_seed(3);
    v1::JobSpec spec;
    spec.set_job_id("cuda-test");
    for (auto& t : Mlp(config).Tensors()) *spec.add_tensors() = t;
    spec.set_block_elems(128);
    spec.mutable_optimizer()->set_kind(v1::OPTIMIZER_ADAMW);
    spec.set_num_nodes(1);
    spec.set_grad_dtype(v1::DTYPE_FP32);
    spec.set_weight_dtype(v1::DTYPE_FP32);
    layout = LayoutOf(*NormalizeJobSpec(spec));
    params.resize(layout.total_elems);
    FillInitialWeights(layout, 9, Range{0, layout.total_elems}, params.data());
    for (const auto& t : layout.tensors) {
      if (t.shape.size() == 1) for (uint64_t i = 0; i < t.numel; ++i) params[t.offset + i] = 0.05f * (i % 3);
    }
  }
  CudaBackendOptions Options(std::string nccl_id, uint32_t local_rank = 0, uint32_t local_size = 1) const {
    CudaBackendOptions o;
    o.model = config;
    o.layout = layout;
    o.local_rank = local_rank;
    o.local_size = local_size;
    o.max_batch = kBatch;
    o.nccl_id = std::move(nccl_id);
    return o;
  }
};

bool HasGpu() { return DeviceCount() > 0; }

#define SKIP_WITHOUT_GPU() \
  if (!HasGpu()) GTEST_SKIP() << "no CUDA device (DeviceCount() is 0)"

TEST(CudaBackendTest, NoGpuNamesTheFailingCall) {
  if (HasGpu()) GTEST_SKIP() << "a CUDA device is present; this checks the error without one";
  Model m;
  auto backend = MakeCudaBackend(m.Options(std::string(128, '\0')));
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(backend.status().message().find("cudaSetDevice"), std::string::npos) << backend.status();
}

TEST(CudaBackendTest, BadNcclIdIsInvalidArgument) {
  SKIP_WITHOUT_GPU();
  Model m;
  auto backend = MakeCudaBackend(m.Options("short"));
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(backend.status().message().find("nccl_id: 5 bytes"), std::string::npos) << backend.status();
}

// One rank: the gradient the reduce-scatter returns and the loss match the
// CPU model within float tolerance (cuBLAS sums in its own order), the
// layers are reported last to first at the same offsets, and a batch over
// max_batch is refused without touching the parameters or gradients.
TEST(CudaBackendTest, OneRankMatchesCpuModel) {
  SKIP_WITHOUT_GPU();
  Model m;
  auto id = NewNcclId();
  ASSERT_TRUE(id.ok()) << id.status();
  auto backend = MakeCudaBackend(m.Options(*id));
  ASSERT_TRUE(backend.ok()) << backend.status();
  Backend& gpu = **backend;
  const Range all{0, m.layout.total_elems};

  auto staging = gpu.AllocHost(m.layout.total_elems);
  ASSERT_TRUE(staging.ok()) << staging.status();
  std::copy(m.params.begin(), m.params.end(), staging->get());
  ASSERT_TRUE(gpu.AllGather(all, staging->get()).ok());
  std::vector<float> read(m.layout.total_elems);
  ASSERT_TRUE(gpu.ReadParams(all, read.data()).ok());
  ASSERT_EQ(read, m.params);

  std::vector<float> x(kBatch * m.config.input_dim()), y(kBatch * m.config.output_dim());
  TeacherData(m.config).Fill(0, kBatch, x.data(), y.data());
  Mlp cpu(m.config);
  cpu.Bind(m.layout);
  std::vector<float> cpu_grads(m.layout.total_elems, 0.0f);
  std::vector<uint64_t> cpu_ready, gpu_ready;
  const float cpu_loss = cpu.ForwardBackward(m.params.data(), x.data(), y.data(), kBatch, 2.0f,
                                             cpu_grads.data(), [&](uint64_t o) { cpu_ready.push_back(o); });

  ASSERT_TRUE(gpu.ZeroGrads().ok());
  auto loss = gpu.ForwardBackward(x.data(), y.data(), kBatch, 2.0f, [&](uint64_t o) { gpu_ready.push_back(o); });
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_NEAR(*loss, cpu_loss, 1e-5f * std::abs(cpu_loss));
  EXPECT_EQ(gpu_ready, cpu_ready);

  auto over = gpu.ForwardBackward(x.data(), y.data(), kBatch + 1, 2.0f, nullptr);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(over.status().message().find("batch 5 > max_batch 4"), std::string::npos) << over.status();

  ASSERT_TRUE(gpu.ReduceScatter(all, staging->get()).ok());
  float scale = 0;
  for (float g : cpu_grads) scale = std::max(scale, std::abs(g));
  ASSERT_GT(scale, 0.0f);
  for (uint64_t i = 0; i < m.layout.total_elems; ++i) {
    ASSERT_NEAR(staging->get()[i], cpu_grads[i], 1e-5f * scale) << "gradient element " << i;
  }
  ASSERT_TRUE(gpu.ReadParams(all, read.data()).ok());
  EXPECT_EQ(read, m.params);
}

// The engine's overlapped schedule against the whole one on the same GPU,
// bit for bit: weights landed bucket by bucket from inside the forward
// (SetWeightsNeeded, before each layer, with the layer's end) and every
// bucket's reduce-scatter started as its layer is reported and finished
// only after ForwardBackward returned (several in flight), against all
// weights landed first and each bucket reduced on its own.
TEST(CudaBackendTest, LayerLandingAndStartedReduceScattersMatchTheWholeSchedule) {
  SKIP_WITHOUT_GPU();
  Model m;
  Mlp cpu(m.config);
  cpu.Bind(m.layout);
  // One block each.
  const std::vector<Range> buckets = trainer::BackwardBuckets(m.layout, cpu.ReadyPoints(), 1);
  ASSERT_GT(buckets.size(), 2u);
  std::vector<float> x(kBatch * m.config.input_dim()), y(kBatch * m.config.output_dim());
  TeacherData(m.config).Fill(0, kBatch, x.data(), y.data());
  const uint64_t n = m.layout.total_elems;

  auto id = NewNcclId();
  ASSERT_TRUE(id.ok()) << id.status();
  auto whole = MakeCudaBackend(m.Options(*id));
  ASSERT_TRUE(whole.ok()) << whole.status();
  auto weights = (*whole)->AllocHost(n), whole_grads = (*whole)->AllocHost(n);
  ASSERT_TRUE(weights.ok() && whole_grads.ok());
  std::copy(m.params.begin(), m.params.end(), weights->get());
  ASSERT_TRUE((*whole)->AllGather(Range{0, n}, weights->get()).ok());
  ASSERT_TRUE((*whole)->ZeroGrads().ok());
  auto whole_loss = (*whole)->ForwardBackward(x.data(), y.data(), kBatch, 2.0f, nullptr);
  ASSERT_TRUE(whole_loss.ok()) << whole_loss.status();
  for (Range b : buckets) ASSERT_TRUE((*whole)->ReduceScatter(b, whole_grads->get() + b.begin).ok());

  auto id2 = NewNcclId();
  ASSERT_TRUE(id2.ok()) << id2.status();
  auto layered = MakeCudaBackend(m.Options(*id2));
  ASSERT_TRUE(layered.ok()) << layered.status();
  Backend& gpu = **layered;
  auto grads = gpu.AllocHost(n);
  ASSERT_TRUE(grads.ok());
  std::vector<uint64_t> needed;
  size_t landed = buckets.size();  // buckets are in descending order: land from the back
  ASSERT_TRUE(gpu.SetWeightsNeeded([&](uint64_t end) {
    needed.push_back(end);
    while (landed > 0 && buckets[landed - 1].begin < end) {
      --landed;
      ASSERT_TRUE(gpu.AllGather(buckets[landed], weights->get() + buckets[landed].begin).ok());
    }
  }));
  size_t started = 0;
  ASSERT_TRUE(gpu.ZeroGrads().ok());
  auto loss = gpu.ForwardBackward(x.data(), y.data(), kBatch, 2.0f, [&](uint64_t ready_begin) {
    for (; started < buckets.size() && buckets[started].begin >= ready_begin; ++started) {
      ASSERT_TRUE(gpu.StartReduceScatter(buckets[started], grads->get() + buckets[started].begin).ok());
    }
  });
  ASSERT_TRUE(loss.ok()) << loss.status();
  ASSERT_EQ(started, buckets.size());
  for (size_t i = 0; i < started; ++i) ASSERT_TRUE(gpu.FinishReduceScatter().ok()) << "bucket " << i;
  EXPECT_EQ(gpu.FinishReduceScatter().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(landed, 0u);
  ASSERT_EQ(needed.size(), static_cast<size_t>(cpu.num_layers()));
  // The last layer needs the weights up to its bias's end, which lies in
  // the last block (used_elems counts the layout's padding too).
  EXPECT_GT(needed.back(), buckets.front().begin);
  EXPECT_LE(needed.back(), m.layout.used_elems);

  EXPECT_EQ(std::memcmp(&*loss, &*whole_loss, sizeof(float)), 0) << *loss << " vs " << *whole_loss;
  const uint64_t used = m.layout.used_elems;
  EXPECT_EQ(std::memcmp(grads->get(), whole_grads->get(), used * sizeof(float)), 0);
  std::vector<float> read(n);
  ASSERT_TRUE(gpu.ReadParams(Range{0, n}, read.data()).ok());
  EXPECT_EQ(std::memcmp(read.data(), m.params.data(), used * sizeof(float)), 0);
  gpu.SetWeightsNeeded(nullptr);
}

// A job with BF16 on the wire: the backend's host side is BF16, converted
// on the device bit for bit as the client converts (common/convert.h):
// weights widened exactly, the gradient rounded as FloatToBf16 rounds the
// FP32 backend's gradient on the same weights.
TEST(CudaBackendTest, Bf16StagingIsTheClientsConversion) {
  SKIP_WITHOUT_GPU();
  Model m;
  const uint64_t n = m.layout.total_elems;
  std::vector<uint16_t> weights16(n);
  std::vector<float> widened(n);
  for (uint64_t i = 0; i < n; ++i) {
    weights16[i] = FloatToBf16(m.params[i]);
    widened[i] = Bf16ToFloat(weights16[i]);
  }
  std::vector<float> x(kBatch * m.config.input_dim()), y(kBatch * m.config.output_dim());
  TeacherData(m.config).Fill(0, kBatch, x.data(), y.data());

  auto id = NewNcclId();
  ASSERT_TRUE(id.ok()) << id.status();
  auto fp32 = MakeCudaBackend(m.Options(*id));
  ASSERT_TRUE(fp32.ok()) << fp32.status();
  EXPECT_EQ((*fp32)->grad_staging(), v1::DTYPE_FP32);
  auto host32 = (*fp32)->AllocHost(n);
  ASSERT_TRUE(host32.ok());
  std::copy(widened.begin(), widened.end(), host32->get());
  ASSERT_TRUE((*fp32)->AllGather(Range{0, n}, host32->get()).ok());
  ASSERT_TRUE((*fp32)->ZeroGrads().ok());
  ASSERT_TRUE((*fp32)->ForwardBackward(x.data(), y.data(), kBatch, 2.0f, nullptr).ok());
  ASSERT_TRUE((*fp32)->ReduceScatter(Range{0, n}, host32->get()).ok());

  auto id2 = NewNcclId();
  ASSERT_TRUE(id2.ok()) << id2.status();
  CudaBackendOptions o = m.Options(*id2);
  o.grad_dtype = v1::DTYPE_BF16;
  o.weight_dtype = v1::DTYPE_BF16;
  auto bf16 = MakeCudaBackend(o);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  EXPECT_EQ((*bf16)->grad_staging(), v1::DTYPE_BF16);
  EXPECT_EQ((*bf16)->weight_staging(), v1::DTYPE_BF16);
  auto host16 = (*bf16)->AllocHost(n);
  ASSERT_TRUE(host16.ok());
  auto* staged = reinterpret_cast<uint16_t*>(host16->get());
  std::copy(weights16.begin(), weights16.end(), staged);
  ASSERT_TRUE((*bf16)->AllGather(Range{0, n}, staged).ok());
  std::vector<float> read(n);
  ASSERT_TRUE((*bf16)->ReadParams(Range{0, n}, read.data()).ok());
  EXPECT_EQ(std::memcmp(read.data(), widened.data(), n * sizeof(float)), 0);
  ASSERT_TRUE((*bf16)->ZeroGrads().ok());
  ASSERT_TRUE((*bf16)->ForwardBackward(x.data(), y.data(), kBatch, 2.0f, nullptr).ok());
  ASSERT_TRUE((*bf16)->ReduceScatter(Range{0, n}, staged).ok());
  int nonzero = 0;
  for (uint64_t i = 0; i < m.layout.used_elems; ++i) {
    ASSERT_EQ(staged[i], FloatToBf16(host32->get()[i])) << "gradient element " << i << " " << host32->get()[i];
    nonzero += host32->get()[i] != 0.0f;
  }
  EXPECT_GT(nonzero, 0);
}

// Memory the caller allocated (the client's shared buffers are mmaps of a
// memfd), pinned in place by AdoptHost: the collectives copy to and from
// it as from AllocHost's, and the caller's hold on it is given back (and
// the memory unregistered) when the HostBuffer goes.
TEST(CudaBackendTest, AdoptedHostMemoryStagesAsAllocHostsDoes) {
  SKIP_WITHOUT_GPU();
  Model m;
  const uint64_t n = m.layout.total_elems;
  std::vector<float> x(kBatch * m.config.input_dim()), y(kBatch * m.config.output_dim());
  TeacherData(m.config).Fill(0, kBatch, x.data(), y.data());
  auto id = NewNcclId();
  ASSERT_TRUE(id.ok()) << id.status();
  auto gpu = MakeCudaBackend(m.Options(*id));
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const size_t bytes = (n * sizeof(float) + 4095) / 4096 * 4096;
  void* mapped = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mapped, MAP_FAILED);
  auto keep = std::shared_ptr<void>(mapped, [bytes](void* p) { munmap(p, bytes); });
  std::weak_ptr<void> held = keep;
  auto adopted = (*gpu)->AdoptHost(mapped, bytes, std::move(keep));
  ASSERT_TRUE(adopted.ok()) << adopted.status();
  auto pinned = (*gpu)->AllocHost(n);
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  std::copy(m.params.begin(), m.params.end(), adopted->get());
  ASSERT_TRUE((*gpu)->AllGather(Range{0, n}, adopted->get()).ok());
  ASSERT_TRUE((*gpu)->AllGathersRead().ok());
  std::vector<float> read(n);
  ASSERT_TRUE((*gpu)->ReadParams(Range{0, n}, read.data()).ok());
  EXPECT_EQ(std::memcmp(read.data(), m.params.data(), n * sizeof(float)), 0);
  ASSERT_TRUE((*gpu)->ZeroGrads().ok());
  ASSERT_TRUE((*gpu)->ForwardBackward(x.data(), y.data(), kBatch, 2.0f, nullptr).ok());
  ASSERT_TRUE((*gpu)->ReduceScatter(Range{0, n}, adopted->get()).ok());
  ASSERT_TRUE((*gpu)->ReduceScatter(Range{0, n}, pinned->get()).ok());
  EXPECT_EQ(std::memcmp(adopted->get(), pinned->get(), n * sizeof(float)), 0);
  EXPECT_TRUE(std::any_of(pinned->get(), pinned->get() + m.layout.used_elems,
                          [](float g) { return g != 0.0f; }));
  EXPECT_FALSE(held.expired());
  adopted->reset();
  EXPECT_TRUE(held.expired());
}

TEST(CudaBackendTest, OneRankVotePassesItsOwnFlag) {
  SKIP_WITHOUT_GPU();
  Model m;
  auto id = NewNcclId();
  ASSERT_TRUE(id.ok()) << id.status();
  auto backend = MakeCudaBackend(m.Options(*id));
  ASSERT_TRUE(backend.ok()) << backend.status();
  for (bool failed : {false, true, false}) {
    auto any = (*backend)->NodeAnyFailed(failed);
    ASSERT_TRUE(any.ok()) << any.status();
    EXPECT_EQ(*any, failed);
  }
}

// Local ranks 0 and 1 of one node on GPUs 0 and 1, each a thread that owns
// its backend from creation (NCCL's init is collective) to destruction.
// Every rank votes rounds[i][rank] in round i; returns [rank][round].
std::array<std::vector<absl::StatusOr<bool>>, 2> VoteOnTwoGpus(const Model& m,
                                                               const std::vector<std::array<bool, 2>>& rounds) {
  std::array<std::vector<absl::StatusOr<bool>>, 2> answers;
  auto id = NewNcclId();
  if (!id.ok()) {
    answers[0].push_back(id.status());
    return answers;
  }
  std::vector<std::thread> ranks;
  for (uint32_t r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      CudaBackendOptions o = m.Options(*id, r, 2);
      o.device = static_cast<int>(r);
      auto backend = MakeCudaBackend(o);
      if (!backend.ok()) {
        answers[r].push_back(backend.status());
        return;
      }
      for (const auto& round : rounds) answers[r].push_back((*backend)->NodeAnyFailed(round[r]));
    });
  }
  for (std::thread& t : ranks) t.join();
  return answers;
}

// Both ranks get the same answer: any rank's failure fails the node, and
// the vote does not stick to a later round.
TEST(CudaBackendTest, TwoRanksAgreeOnAnyFailure) {
  if (DeviceCount() < 2) GTEST_SKIP() << "needs 2 CUDA devices, DeviceCount() is " << DeviceCount();
  Model m;
  const std::vector<std::array<bool, 2>> rounds = {{false, false}, {true, false}, {false, true},
                                                   {true, true}, {false, false}};
  const std::vector<bool> expected = {false, true, true, true, false};
  auto answers = VoteOnTwoGpus(m, rounds);
  for (uint32_t r = 0; r < 2; ++r) {
    ASSERT_EQ(answers[r].size(), rounds.size()) << "rank " << r << ": "
                                                << (answers[r].empty() ? absl::OkStatus() : answers[r][0].status());
    for (size_t i = 0; i < rounds.size(); ++i) {
      ASSERT_TRUE(answers[r][i].ok()) << "rank " << r << " round " << i << ": " << answers[r][i].status();
      EXPECT_EQ(*answers[r][i], expected[i]) << "rank " << r << " round " << i << " voted " << rounds[i][0]
                                             << "/" << rounds[i][1];
    }
  }
}

}  // namespace
}  // namespace zerostate::worker::cuda
