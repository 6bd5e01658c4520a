// Tensor groups through a job, driven without a network: each tensor steps
// with its group's hyper-parameters across block boundaries inside a tensor
// and groups that change mid-block (bit-exact against StepBlock of each
// tensor alone with the group's parameters), every bad group spec is refused
// with INVALID_ARGUMENT and leaves nothing registered, re-registration
// compares normalized groups, and the groups survive a checkpoint.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/init.h"
#include "server/core/aligned_buffer.h"
#include "server/core/checkpoint/checkpoint_writer.h"
#include "server/core/checkpoint/ckpt_tool.h"
#include "server/core/job_registry.h"
#include "server/core/optimizer/optimizer.h"
#include "tests/server/gather_weights.h"

namespace zerostate::server {
namespace {

constexpr uint32_t kBlock = 256;
constexpr char kToken[] = "job-groups-test-token-0123456789abcdef012";
constexpr float kLr = 1e-2f;

// w [0, 500) spans blocks 0 and 1 in no group; block 2 holds b and norm
// (groups[0], no weight decay) then w2 (groups[1], lr x 0.5, own betas),
// which goes on into block 3.
v1::RegisterJobRequest GroupedRequest(v1::OptimizerKind kind) {
  v1::RegisterJobRequest req;
  v1::JobSpec* spec = req.mutable_spec();
  spec->set_job_id("job");
  for (auto [name, d0, d1] : {std::tuple{"w", 5, 100}, std::tuple{"b", 37, 1},
                              std::tuple{"norm", 64, 1}, std::tuple{"w2", 3, 100}}) {
    v1::TensorSpec* t = spec->add_tensors();
    t->set_name(name);
    t->add_shape(d0);
    if (d1 > 1) t->add_shape(d1);
  }
  spec->mutable_optimizer()->set_kind(kind);
  spec->mutable_optimizer()->set_weight_decay(0.1f);
  v1::TensorGroup* no_decay = spec->add_groups();
  no_decay->add_tensors("b");
  no_decay->add_tensors("norm");
  no_decay->set_weight_decay(0);
  v1::TensorGroup* slow = spec->add_groups();
  slow->add_tensors("w2");
  slow->set_lr_scale(0.5f);
  if (kind != v1::OPTIMIZER_SGD_MOMENTUM) {
    slow->set_beta1(0.8f);
    slow->set_beta2(0.95f);
  }
  spec->set_num_nodes(1);
  spec->set_grad_dtype(v1::DTYPE_FP32);
  spec->set_weight_dtype(v1::DTYPE_BF16);
  spec->set_block_elems(kBlock);
  spec->set_seed(5);
  req.add_servers("a:1");
  return req;
}

// Pushes one node's gradient for `step` block by block and steps.
void PushAndStep(Job& job, uint64_t step, const std::vector<float>& g, ThreadPool& pool) {
  for (uint64_t b = 0; b < job.layout().num_blocks(); ++b) {
    v1::Chunk c;
    c.set_job_id("job");
    c.set_step(step);
    c.set_block(b);
    c.set_dtype(v1::DTYPE_FP32);
    c.set_data(std::string(reinterpret_cast<const char*>(g.data() + b * kBlock), kBlock * 4));
    ASSERT_TRUE(job.pushes().Push(c).ok());
  }
  v1::StepRequest req;
  req.set_job_id("job");
  req.set_step(step);
  req.set_lr(kLr);
  ASSERT_TRUE(job.step().Step(req, absl::Now() + absl::Seconds(5), pool).ok());
}

std::vector<float> Gradient(const Layout& layout, uint64_t step) {
  std::mt19937 rng(100 + step);
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> g(layout.total_elems);  // padding stays zero
  for (const TensorSlot& t : layout.tensors) {
    for (uint64_t i = t.offset; i < t.offset + t.numel; ++i) g[i] = d(rng);
  }
  return g;
}

// The parameters torch's param_groups give the tensor's group, written out
// here rather than taken from GroupStepParams.
StepParams ParamsOfTensor(const v1::JobSpec& spec, const std::string& name, uint64_t t) {
  StepParams p;
  p.config = spec.optimizer();
  p.lr = kLr;
  p.t = t;
  auto in = [&](int g) {
    for (const std::string& n : spec.groups(g).tensors()) {
      if (n == name) return true;
    }
    return false;
  };
  if (in(0)) p.config.set_weight_decay(0);
  if (in(1)) {
    p.lr = static_cast<float>(double{kLr} * 0.5);
    if (p.config.kind() != v1::OPTIMIZER_SGD_MOMENTUM) {
      p.config.set_beta1(0.8f);
      p.config.set_beta2(0.95f);
    }
  }
  return p;
}

TEST(JobGroupsTest, EachTensorStepsWithItsGroupAcrossBlocks) {
  for (v1::OptimizerKind kind : {v1::OPTIMIZER_ADAMW, v1::OPTIMIZER_ADAM,
                                 v1::OPTIMIZER_SGD_MOMENTUM, v1::OPTIMIZER_LION}) {
    JobRegistry registry(1 << 30);
    ThreadPool pool(2);
    auto reg = registry.Register(GroupedRequest(kind), kToken);
    ASSERT_TRUE(reg.ok()) << reg.status();
    Job& job = *reg->job;
    const Layout& layout = job.layout();
    ASSERT_EQ(layout.num_blocks(), 4u);
    // Reference state, one tensor at a time as one buffer of its own.
    std::vector<float> init(layout.total_elems);
    FillInitialWeights(layout, 5, Range{0, init.size()}, init.data());
    struct Ref {
      AlignedBuffer<float> p, m, v, g;
    };
    std::vector<Ref> refs;
    for (const TensorSlot& t : layout.tensors) {
      Ref r{AlignedBuffer<float>(t.numel), AlignedBuffer<float>(t.numel),
            AlignedBuffer<float>(t.numel), AlignedBuffer<float>(t.numel)};
      std::memcpy(r.p.data(), init.data() + t.offset, t.numel * 4);
      std::fill(r.m.data(), r.m.data() + t.numel, 0.0f);
      std::fill(r.v.data(), r.v.data() + t.numel, 0.0f);
      refs.push_back(std::move(r));
    }
    for (uint64_t step = 0; step < 3; ++step) {
      const std::vector<float> g = Gradient(layout, step);
      PushAndStep(job, step, g, pool);
      for (size_t k = 0; k < layout.tensors.size(); ++k) {
        const TensorSlot& t = layout.tensors[k];
        std::memcpy(refs[k].g.data(), g.data() + t.offset, t.numel * 4);
        BlockRefs b{refs[k].p.data(), refs[k].m.data(), refs[k].v.data(), refs[k].g.data(),
                    nullptr, v1::DTYPE_FP32, t.numel};
        StepBlock(ParamsOfTensor(job.spec(), t.name, step + 1), b);
      }
    }
    const std::vector<float> got = GatherWeights(job, 3);
    ASSERT_EQ(got.size(), layout.total_elems);
    for (size_t k = 0; k < layout.tensors.size(); ++k) {
      const TensorSlot& t = layout.tensors[k];
      EXPECT_EQ(std::memcmp(got.data() + t.offset, refs[k].p.data(), t.numel * 4), 0)
          << v1::OptimizerKind_Name(kind) << " tensor " << t.name;
    }
    // Padding stays zero whichever group's run it joined.
    for (uint64_t i = layout.used_elems; i < layout.total_elems; ++i) ASSERT_EQ(got[i], 0.0f);
    for (uint64_t i = 500; i < 512; ++i) ASSERT_EQ(got[i], 0.0f) << i;
  }
}

void ExpectInvalid(const std::function<void(v1::JobSpec*)>& change, const std::string& field,
                   const std::string& what, v1::OptimizerKind kind = v1::OPTIMIZER_ADAMW) {
  JobRegistry registry(1 << 30);
  v1::RegisterJobRequest req = GroupedRequest(kind);
  change(req.mutable_spec());
  auto r = registry.Register(req, kToken);
  ASSERT_FALSE(r.ok()) << "accepted a bad " << field;
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_NE(r.status().message().find(field + ": "), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status();
  EXPECT_EQ(registry.size(), 0u) << field;
  EXPECT_EQ(registry.ram_used(), 0u) << field;
  EXPECT_EQ(registry.Get("job").status().code(), absl::StatusCode::kNotFound) << field;
}

TEST(JobGroupsTest, EachBadGroupIsRefusedAndNothingIsRegistered) {
  const float nan = std::nanf(""), inf = INFINITY;
  using S = v1::JobSpec*;
  ExpectInvalid([](S s) { s->mutable_groups(1)->add_tensors("bias"); }, "groups[1].tensors[1]",
                "no tensor is named 'bias'");
  ExpectInvalid([](S s) { s->mutable_groups(1)->add_tensors("b"); }, "groups[1].tensors[1]",
                "tensor 'b' is already in groups[0]");
  ExpectInvalid([](S s) { s->mutable_groups(0)->add_tensors("norm"); }, "groups[0].tensors[2]",
                "already in groups[0]");
  for (float wd : {-0.1f, nan, inf}) {
    ExpectInvalid([wd](S s) { s->mutable_groups(0)->set_weight_decay(wd); },
                  "groups[0].weight_decay", "must be finite and >= 0");
  }
  for (float scale : {0.0f, -1.0f, nan, inf}) {
    ExpectInvalid([scale](S s) { s->mutable_groups(1)->set_lr_scale(scale); },
                  "groups[1].lr_scale", "must be finite and > 0");
  }
  for (float beta : {1.0f, -0.1f, nan, inf}) {
    ExpectInvalid([beta](S s) { s->mutable_groups(1)->set_beta1(beta); }, "groups[1].beta1",
                  "is not in [0, 1)");
    ExpectInvalid([beta](S s) { s->mutable_groups(0)->set_beta2(beta); }, "groups[0].beta2",
                  "is not in [0, 1)");
  }
  ExpectInvalid([](S s) { s->mutable_groups(0)->set_beta1(0.9f); }, "groups[0].beta1",
                "SGD_MOMENTUM has no betas", v1::OPTIMIZER_SGD_MOMENTUM);
  ExpectInvalid([](S s) { s->mutable_groups(1)->set_beta2(0.9f); }, "groups[1].beta2",
                "SGD_MOMENTUM has no betas", v1::OPTIMIZER_SGD_MOMENTUM);
  ExpectInvalid([](S s) { for (int i = 0; i < 3; ++i) s->add_groups(); }, "groups",
                "5 groups for 4 tensors");
}

TEST(JobGroupsTest, ReRegistrationComparesNormalizedGroups) {
  JobRegistry registry(1 << 30);
  ASSERT_TRUE(registry.Register(GroupedRequest(v1::OPTIMIZER_ADAMW), kToken).ok());
  const v1::JobSpec& spec = (*registry.Get("job"))->spec();
  EXPECT_EQ(spec.groups(0).lr_scale(), 1.0f);  // filled in
  EXPECT_EQ(spec.groups(0).beta1(), spec.optimizer().beta1());
  EXPECT_EQ(spec.groups(1).weight_decay(), 0.1f);
  // The same groups with their defaults spelled out are the same job.
  v1::RegisterJobRequest same = GroupedRequest(v1::OPTIMIZER_ADAMW);
  same.mutable_spec()->mutable_groups(0)->set_lr_scale(1);
  same.mutable_spec()->mutable_groups(1)->set_weight_decay(0.1f);
  auto again = registry.Register(same, kToken);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->created);
  v1::RegisterJobRequest other = GroupedRequest(v1::OPTIMIZER_ADAMW);
  other.mutable_spec()->mutable_groups(0)->set_weight_decay(0.01f);
  auto changed = registry.Register(other, kToken);
  EXPECT_EQ(changed.status().code(), absl::StatusCode::kAlreadyExists) << changed.status();
  EXPECT_NE(changed.status().message().find("groups[0].weight_decay"), std::string::npos)
      << changed.status();
  v1::RegisterJobRequest none = GroupedRequest(v1::OPTIMIZER_ADAMW);
  none.mutable_spec()->clear_groups();
  auto dropped = registry.Register(none, kToken);
  EXPECT_EQ(dropped.status().code(), absl::StatusCode::kAlreadyExists) << dropped.status();
  EXPECT_NE(dropped.status().message().find("groups"), std::string::npos) << dropped.status();
}

TEST(JobGroupsTest, GroupsSurviveACheckpointAndRestore) {
  char tmpl[] = "/tmp/zs-groups-XXXXXX";
  const std::string root = mkdtemp(tmpl);
  ThreadPool pool(2);
  JobRegistry a(1 << 30), b(1 << 30);
  auto reg = a.Register(GroupedRequest(v1::OPTIMIZER_ADAMW), kToken);
  ASSERT_TRUE(reg.ok()) << reg.status();
  Job& job_a = *reg->job;
  PushAndStep(job_a, 0, Gradient(job_a.layout(), 0), pool);
  PushAndStep(job_a, 1, Gradient(job_a.layout(), 1), pool);
  auto written = WriteCheckpoint(job_a, 2, root, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(written.ok()) << written.status();
  v1::RestoreRequest req;
  req.set_path(written->dir);
  req.add_servers("a:1");
  auto restored = b.Restore(req, kToken);
  ASSERT_TRUE(restored.ok()) << restored.status();
  Job& job_b = *restored->job;
  EXPECT_EQ(FirstDifference(job_b.spec(), job_a.spec()), "");
  ASSERT_EQ(job_b.spec().groups_size(), 2);
  std::ostringstream inspected;  // `zerostate ckpt inspect` shows them
  ASSERT_TRUE(InspectCheckpoint(written->dir, inspected).ok());
  EXPECT_NE(inspected.str().find("groups[1] weight_decay: 0.1 lr_scale: 0.5 beta1: 0.8 "
                                 "beta2: 0.95, 1 tensors\n"),
            std::string::npos)
      << inspected.str();
  EXPECT_NE(inspected.str().find("  w2 [3, 100] at 640 in groups[1]\n"), std::string::npos)
      << inspected.str();
  // The groups step the restored job: a job that lost them (all tensors at
  // weight decay 0.1 and the full lr) would part from `a` here.
  PushAndStep(job_a, 2, Gradient(job_a.layout(), 2), pool);
  PushAndStep(job_b, 2, Gradient(job_b.layout(), 2), pool);
  EXPECT_EQ(GatherWeights(job_b, 3), GatherWeights(job_a, 3));
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace zerostate::server
