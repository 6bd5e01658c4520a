#include "tests/worker/reference_loop.h"

#include <algorithm>
#include <cstdlib>
#include <memory>

#include "common/convert.h"
#include "common/init.h"
#include "server/core/optimizer/optimizer.h"
#include "trainer/policy.h"
#include "worker/job.h"
#include "worker/mlp.h"
#include "worker/teacher_data.h"

namespace zerostate::worker {
namespace {

// 64-byte aligned, zeroed memory (StepBlock's requirement).
struct Aligned {
  explicit Aligned(size_t bytes)
      : p(static_cast<char*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64))) {
    std::fill_n(p.get(), (bytes + 63) / 64 * 64 + 64, char{0});
  }
  struct Free {
    void operator()(char* q) const { std::free(q); }
  };
  std::unique_ptr<char, Free> p;
  float* f() const { return reinterpret_cast<float*>(p.get()); }
};

struct State {
  Layout layout;
  v1::JobSpec spec;
  Aligned master, m, v, acc, lowp;
  std::vector<float> working;
  State(const Layout& l, const v1::JobSpec& s)
      : layout(l), spec(s), master(l.total_elems * 4), m(l.total_elems * 4), v(l.total_elems * 4),
        acc(l.total_elems * 4), lowp(l.total_elems * 4), working(l.total_elems) {}

  void RefreshWorking() {
    if (spec.weight_dtype() == v1::DTYPE_FP32) {
      std::copy_n(master.f(), layout.used_elems, working.data());
    } else {
      DecodeFloats(lowp.p.get(), layout.used_elems, spec.weight_dtype(), working.data());
    }
  }
};

// The node's gradient: ranks in order, each over its micro-batches.
std::vector<float> NodeGradient(const v1::TrainConfig& t, const Topology& topo, uint32_t node,
                                uint64_t step, float scale, Mlp& model, const TeacherData& data,
                                const std::vector<float>& params, float* loss_rank0) {
  const uint32_t n = t.micro_batch_size();
  std::vector<float> x(size_t{n} * data.input_dim()), y(size_t{n} * data.output_dim());
  std::vector<float> sum(params.size(), 0.0f), g(params.size());
  for (uint32_t l = 0; l < topo.local_size; ++l) {
    const uint32_t rank = node * topo.local_size + l;
    std::fill(g.begin(), g.end(), 0.0f);
    float loss = 0;
    for (uint32_t mb = 0; mb < t.grad_accum_steps(); ++mb) {
      data.Fill(SampleIndex(step, mb, rank, 0, t.grad_accum_steps(), topo.world(), n), n, x.data(), y.data());
      loss += model.ForwardBackward(params.data(), x.data(), y.data(), n, scale, g.data(), nullptr) /
              static_cast<float>(t.grad_accum_steps());
    }
    if (rank == 0) *loss_rank0 = loss;
    if (l == 0) sum = g;
    else for (size_t i = 0; i < g.size(); ++i) sum[i] += g[i];
  }
  return sum;
}

// `applied`: the steps applied before this one (skipped ones do not count).
void ApplyStep(State& s, uint64_t applied, float lr, float grad_scale) {
  server::StepParams p;
  p.config = s.spec.optimizer();
  p.lr = lr;
  p.grad_scale = grad_scale == 0 ? 1.0f : grad_scale;
  p.t = applied + 1;
  const uint64_t b = s.layout.block_elems;
  const size_t lowp_size = DTypeSize(s.spec.weight_dtype());
  for (uint64_t begin = 0; begin < s.layout.used_elems; begin += b) {
    server::BlockRefs r;
    r.param = s.master.f() + begin;
    r.m = s.m.f() + begin;
    r.v = s.v.f() + begin;
    r.grad = s.acc.f() + begin;
    r.lowp_dtype = s.spec.weight_dtype();
    r.lowp = r.lowp_dtype == v1::DTYPE_FP32 ? nullptr : s.lowp.p.get() + begin * lowp_size;
    r.n = std::min(b, s.layout.used_elems - begin);
    server::StepBlock(p, r);
  }
}

server::GradStats SumStats(const State& s) {
  server::GradStats total;
  const uint64_t b = s.layout.block_elems;
  for (uint64_t begin = 0; begin < s.layout.used_elems; begin += b) {
    auto st = server::ComputeGradStats(s.acc.f() + begin, std::min(b, s.layout.used_elems - begin));
    total.sum_squares += st.sum_squares;
    total.nonfinite += st.nonfinite;
  }
  return total;
}

}  // namespace

ReferenceResult RunReference(const v1::WorkerConfig& config, const Topology& topo) {
  const v1::TrainConfig& t = config.train();
  Mlp model(t.model());
  v1::JobSpec spec = *NormalizeJobSpec(BuildJobSpec(t, model, topo.num_nodes));
  State s(LayoutOf(spec), spec);
  model.Bind(s.layout);
  FillInitialWeights(s.layout, spec.seed(), Range{0, s.layout.total_elems}, s.master.f());
  if (spec.weight_dtype() != v1::DTYPE_FP32) {
    EncodeFloats(s.master.f(), s.layout.used_elems, spec.weight_dtype(), s.lowp.p.get());
  }
  s.RefreshWorking();
  TeacherData data(t.model());
  trainer::Policy policy(t);  // the step policy both drivers use
  ReferenceResult out;
  std::vector<char> wire(s.layout.total_elems * 4);
  uint64_t applied = 0;
  // Delayed update: steps from max(warmup_steps, 1) on run on the weights
  // of the version before.
  const uint64_t first_delayed =
      t.delayed_update().enabled() ? std::max<uint64_t>(t.delayed_update().warmup_steps(), 1)
                                   : t.steps();
  std::vector<float> previous = s.working;
  for (uint64_t step = 0; step < t.steps(); ++step) {
    std::fill_n(s.acc.f(), s.layout.total_elems, 0.0f);
    float loss0 = 0;
    const std::vector<float>& weights = step >= first_delayed ? previous : s.working;
    for (uint32_t node = 0; node < topo.num_nodes; ++node) {
      auto g = NodeGradient(t, topo, node, step, policy.loss_scale(), model, data, weights, &loss0);
      EncodeFloats(g.data(), s.layout.used_elems, spec.grad_dtype(), wire.data());
      AccumulateFloats(wire.data(), s.layout.used_elems, spec.grad_dtype(), s.acc.f());
    }
    auto stats = SumStats(s);
    trainer::StepDecision d =
        policy
            .Decide(step, stats.sum_squares, stats.nonfinite,
                    static_cast<double>(topo.world()) * t.grad_accum_steps())
            .value();
    if (!d.skip) ApplyStep(s, applied++, d.lr, d.grad_scale);
    previous = s.working;
    s.RefreshWorking();
    out.skipped.push_back(d.skip);
    out.loss_rank0.push_back(loss0);
  }
  out.master.assign(s.master.f(), s.master.f() + s.layout.total_elems);
  return out;
}

}  // namespace zerostate::worker
