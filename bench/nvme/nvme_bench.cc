// nvme_bench: the NVMe tier's optimizer step against the disk's limit, both
// measured in one run on the same disk.
//
//   (a) the limit: a plain io_uring loop writes, then reads, a file as large
//       as the optimizer state sequentially with O_DIRECT, in requests of one
//       block slot (the tier's I/O size), --queue_depth in flight;
//   (b) the step: AdamW (the fused kernel, StepBlock) through
//       NvmeTier::Update with the state (param, m, v) on that disk and a RAM
//       cache of a tenth of the state.
// (a) and (b) take turns --steps times; each figure is the best of those.
//
// A step moves R bytes in and W bytes out; the disk allows it in
// R / read_limit + W / write_limit seconds. The ratio is that time over the
// measured one (1.0: the disk is the only limit). Prints params/s and GB/s;
// --json prints one object per line instead:
//   {"figure":..., "value":..., "unit":..., "limit":..., "ratio":...}
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "server/core/io/io_buffer.h"
#include "server/core/io/uring_env.h"
#include "server/core/optimizer/optimizer.h"
#include "server/core/checkpoint/checkpoint_writer.h"
#include "server/core/job_registry.h"
#include "server/core/tier/nvme_tier.h"

namespace zerostate::server {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string dir = "/tmp";
  uint64_t params = uint64_t{48} << 20;
  uint64_t block_elems = 262144;
  uint64_t queue_depth = 8;
  uint64_t steps = 3;
  bool json = false;
};

bool Usage(const std::string& what) {
  std::fprintf(stderr,
               "nvme_bench: %s\nusage: nvme_bench [--dir D] [--params N] [--block_elems E] "
               "[--queue_depth Q] [--steps S] [--json]\n",
               what.c_str());
  return false;
}

bool ParseArgs(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json") {
      o->json = true;
      continue;
    }
    if (i + 1 == argc) return Usage(a + " needs a value");
    const char* v = argv[++i];
    if (a == "--dir") {
      o->dir = v;
      continue;
    }
    char* end = nullptr;
    uint64_t n = std::strtoull(v, &end, 10);
    if (end == v || *end != '\0' || n == 0) return Usage(a + " " + v + ": not a positive integer");
    if (a == "--params") o->params = n;
    else if (a == "--block_elems") o->block_elems = n;
    else if (a == "--queue_depth") o->queue_depth = n;
    else if (a == "--steps") o->steps = n;
    else return Usage("unknown flag " + a);
  }
  if (o->block_elems % 64 != 0) return Usage("--block_elems must be a multiple of 64");
  if (o->queue_depth < 2) return Usage("--queue_depth must be >= 2");
  return true;
}

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void Print(const Options& o, const std::string& figure, double value, const char* unit,
           double limit) {
  if (o.json) {
    std::printf("{\"figure\":\"%s\",\"value\":%.6g,\"unit\":\"%s\",\"limit\":%.6g,\"ratio\":%.4f}\n",
                figure.c_str(), value, unit, limit, value / limit);
  } else {
    std::printf("%-28s %12.4g %-9s limit %12.4g  ratio %.3f\n", figure.c_str(), value, unit, limit,
                value / limit);
  }
  std::fflush(stdout);
}

// Moves `total` bytes of `file` sequentially in `io_bytes` requests with
// `depth` in flight; returns bytes per second.
absl::StatusOr<double> SequentialPass(io::Env& env, io::File& file, io::IoOp op, uint64_t total,
                                      uint32_t io_bytes, int depth) {
  auto q = env.NewQueue(depth);
  if (!q.ok()) return q.status();
  std::vector<io::IoBuffer> bufs;
  std::vector<size_t> free;
  for (int i = 0; i < depth; ++i) {
    bufs.emplace_back(io_bytes);
    std::fill(bufs.back().data(), bufs.back().data() + io_bytes, static_cast<char>(i + 1));
    free.push_back(i);
  }
  uint64_t next = 0;
  auto start = Clock::now();
  while (next < total || (*q)->in_flight() > 0) {
    while (next < total && !free.empty()) {
      size_t i = free.back();
      free.pop_back();
      io::IoRequest r{op, &file, next, bufs[i].data(), io_bytes, i};
      if (auto s = (*q)->Submit(r); !s.ok()) return s;
      next += io_bytes;
    }
    auto done = (*q)->Wait();
    if (!done.ok()) return done.status();
    if (auto s = done->status(); !s.ok()) return s;
    free.push_back(done->req.tag);
  }
  return static_cast<double>(total) / Seconds(start);
}

struct DiskLimit {
  double write_bps = 0;
  double read_bps = 0;
};

// A scratch file as large as the state, for the plain io_uring passes.
class LimitFile {
 public:
  static absl::StatusOr<LimitFile> Create(const std::string& dir, uint64_t bytes) {
    LimitFile f;
    f.env_ = io::NewUringEnv();
    f.path_ = dir + "/nvme_bench_limit.dat";
    f.env_->DeleteFile(f.path_).IgnoreError();  // a leftover of an interrupted run
    auto file = f.env_->CreateFile(f.path_);
    if (!file.ok()) return file.status();
    f.file_ = *std::move(file);
    if (auto s = f.file_->Allocate(bytes); !s.ok()) return s;
    f.bytes_ = bytes;
    return f;
  }
  LimitFile(LimitFile&&) = default;
  ~LimitFile() {
    if (file_ == nullptr) return;
    file_.reset();
    env_->DeleteFile(path_).IgnoreError();
  }

  // One sequential write pass, then one read pass; keeps the best so far.
  absl::Status Measure(uint32_t io_bytes, int depth, DiskLimit* best) {
    auto w = SequentialPass(*env_, *file_, io::IoOp::kWrite, bytes_, io_bytes, depth);
    if (!w.ok()) return w.status();
    auto r = SequentialPass(*env_, *file_, io::IoOp::kRead, bytes_, io_bytes, depth);
    if (!r.ok()) return r.status();
    best->write_bps = std::max(best->write_bps, *w);
    best->read_bps = std::max(best->read_bps, *r);
    return absl::OkStatus();
  }
  bool direct() const { return file_->direct(); }

 private:
  LimitFile() = default;
  std::shared_ptr<io::Env> env_;
  std::string path_;
  std::unique_ptr<io::File> file_;
  uint64_t bytes_ = 0;
};

class CountingSink final : public TierMetricsSink {
 public:
  void RecordIo(io::IoOp op, uint64_t bytes, double) override {
    (op == io::IoOp::kRead ? read : written) += bytes;
  }
  void SetQueueDepth(int) override {}
  void RecordCache(bool) override {}
  std::atomic<uint64_t> read{0}, written{0};
};

// AdamW as the server runs it for a job that names only the optimizer kind
// (NormalizeJobSpec fills in betas, eps and weight decay).
StepParams AdamW(uint64_t t) {
  v1::JobSpec spec;
  spec.set_job_id("nvme_bench");
  spec.add_tensors()->set_name("w");
  spec.mutable_tensors(0)->add_shape(64);
  spec.mutable_optimizer()->set_kind(v1::OPTIMIZER_ADAMW);
  spec.set_num_nodes(1);
  auto normalized = NormalizeJobSpec(spec);
  StepParams p;
  p.config = normalized.ok() ? normalized->optimizer() : spec.optimizer();
  p.lr = 1e-3f;
  p.t = t;
  return p;
}

// Stores every block: small weights, zero moments.
absl::Status FillState(NvmeTier& tier) {
  const TierShape& shape = tier.shape();
  AlignedBuffer<float> state(shape.block_floats());
  for (uint64_t b = 0; b < shape.num_blocks; ++b) {
    for (uint32_t i = 0; i < shape.block_elems; ++i) state.data()[i] = 1e-3f * ((b + i) % 97);
    if (auto s = tier.Store(b, state.data()); !s.ok()) return s;
  }
  return absl::OkStatus();
}

struct StepFigures {
  double seconds = 0;
  uint64_t read = 0;
  uint64_t written = 0;
  double cpu_seconds = 0;  // this process, user and system
};

double ProcessCpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto sec = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
  return sec(ru.ru_utime) + sec(ru.ru_stime);
}

// Runs AdamW step `t` over every block of the tier.
absl::StatusOr<StepFigures> MeasureStep(NvmeTier& tier, CountingSink& sink, uint64_t t) {
  const TierShape& shape = tier.shape();
  const uint32_t be = shape.block_elems;
  AlignedBuffer<float> grad(be);
  for (uint32_t i = 0; i < be; ++i) grad.data()[i] = 1e-2f * ((i % 13) - 6.0f);
  AlignedBuffer<uint16_t> lowp(be);
  std::vector<uint64_t> all(shape.num_blocks);
  for (uint64_t b = 0; b < all.size(); ++b) all[b] = b;
  ThreadPool pool(1);
  const StepParams params = AdamW(t);
  auto compute = [&](uint64_t, float* s) {
    StepBlock(params, BlockRefs{s, s + be, s + 2 * be, grad.data(), lowp.data(),
                                v1::DTYPE_BF16, be});
    return true;
  };
  const uint64_t r0 = sink.read, w0 = sink.written;
  const double cpu0 = ProcessCpuSeconds();
  auto start = Clock::now();
  if (auto s = tier.Update(all, pool, compute, [](uint64_t) {}); !s.ok()) return s;
  return StepFigures{Seconds(start), sink.read - r0, sink.written - w0, ProcessCpuSeconds() - cpu0};
}

// The limit passes and the steps take turns, so background load on the
// machine slows both alike; each figure is the best of o.steps.
absl::Status Measure(const Options& o, NvmeTier& tier, CountingSink& sink, LimitFile& limit_file,
                     DiskLimit* disk, StepFigures* best) {
  const auto slot = static_cast<uint32_t>(tier.slot_layout().slot_bytes);
  for (uint64_t t = 1; t <= o.steps; ++t) {
    if (auto s = limit_file.Measure(slot, static_cast<int>(o.queue_depth), disk); !s.ok()) return s;
    auto f = MeasureStep(tier, sink, t);
    if (!f.ok()) return f.status();
    if (t == 1 || f->seconds < best->seconds) *best = *f;
  }
  return absl::OkStatus();
}

void Report(const Options& o, const DiskLimit& disk, const StepFigures& f, uint64_t params) {
  Print(o, "disk_seq_write", disk.write_bps / 1e9, "GB/s", disk.write_bps / 1e9);
  Print(o, "disk_seq_read", disk.read_bps / 1e9, "GB/s", disk.read_bps / 1e9);
  const double limit_s = f.read / disk.read_bps + f.written / disk.write_bps;
  const double traffic = (f.read + f.written) / f.seconds;
  Print(o, "nvme_step_adamw", params / f.seconds, "params/s", params / limit_s);
  Print(o, "nvme_step_disk_traffic", traffic / 1e9, "GB/s", (f.read + f.written) / limit_s / 1e9);
  // CPU the step used per second of it: well below 1 means the disk, not the
  // calling thread's compute and checksums, set the pace.
  Print(o, "nvme_step_cpu", f.cpu_seconds / f.seconds, "cores", 1.0);
}

// Checkpoint write throughput: a RAM-tier job of o.params AdamW parameters
// written by the same code the Checkpoint RPC runs (data file, fsync,
// manifest, rename) into o.dir; bytes per second of the best of two.
absl::StatusOr<double> MeasureCheckpoint(const Options& o) {
  v1::RegisterJobRequest req;
  v1::JobSpec* spec = req.mutable_spec();
  spec->set_job_id("ckpt_bench");
  auto* w = spec->add_tensors();
  w->set_name("w");
  w->add_shape(static_cast<int64_t>(o.params));
  spec->mutable_optimizer()->set_kind(v1::OPTIMIZER_ADAMW);
  spec->set_num_nodes(1);
  spec->set_grad_dtype(v1::DTYPE_BF16);
  spec->set_weight_dtype(v1::DTYPE_BF16);
  spec->set_block_elems(static_cast<uint32_t>(o.block_elems));
  req.add_servers("bench:0");
  JobRegistry registry(uint64_t{1} << 40);
  auto reg = registry.Register(req);
  if (!reg.ok()) return reg.status();
  double best = 0;
  for (uint64_t version = 0; version < 2; ++version) {
    const std::string root = o.dir + "/nvme_bench_ckpt";
    auto start = Clock::now();
    auto written = WriteCheckpoint(*reg->job, 0, root, absl::Now() + absl::Minutes(10));
    if (!written.ok()) return written.status();
    best = std::max(best, written->bytes / Seconds(start));
    std::system(("rm -rf '" + root + "'").c_str());
  }
  return best;
}

absl::Status Run(const Options& o) {
  const uint64_t num_blocks = (o.params + o.block_elems - 1) / o.block_elems;
  TierShape shape{num_blocks, static_cast<uint32_t>(o.block_elems), 3};
  NvmeTierOptions t;
  t.dir = o.dir;
  t.name = "nvme_bench";
  t.cache_bytes = num_blocks * shape.block_floats() * sizeof(float) / 10;
  t.queue_depth = static_cast<int>(o.queue_depth);
  auto sink = std::make_shared<CountingSink>();
  t.metrics = sink;
  auto tier = NvmeTier::Create(shape, t);
  if (!tier.ok()) return tier.status();
  const uint64_t slot = (*tier)->slot_layout().slot_bytes;
  auto limit_file = LimitFile::Create(o.dir, num_blocks * slot);
  if (!limit_file.ok()) return limit_file.status();
  if (auto s = FillState(**tier); !s.ok()) return s;
  DiskLimit disk;
  StepFigures step;
  if (auto s = Measure(o, **tier, *sink, *limit_file, &disk, &step); !s.ok()) return s;
  if (!o.json) {
    std::printf("%llu params in %llu blocks of %llu, slot %llu bytes, queue depth %llu, "
                "cache %llu bytes, %s, dir %s, best of %llu\n",
                (unsigned long long)(num_blocks * o.block_elems), (unsigned long long)num_blocks,
                (unsigned long long)o.block_elems, (unsigned long long)slot,
                (unsigned long long)o.queue_depth, (unsigned long long)t.cache_bytes,
                limit_file->direct() ? "O_DIRECT" : "BUFFERED (no O_DIRECT here)", o.dir.c_str(),
                (unsigned long long)o.steps);
  }
  Report(o, disk, step, num_blocks * o.block_elems);
  auto ckpt = MeasureCheckpoint(o);
  if (!ckpt.ok()) return ckpt.status();
  Print(o, "checkpoint_write", *ckpt / 1e9, "GB/s", disk.write_bps / 1e9);
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  Options o;
  if (!ParseArgs(argc, argv, &o)) return 2;
  absl::Status s = Run(o);
  if (s.ok()) return 0;
  std::fprintf(stderr, "nvme_bench: %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace
}  // namespace zerostate::server

int main(int argc, char** argv) { return zerostate::server::Main(argc, argv); }
