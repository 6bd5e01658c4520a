#include "server/core/tier/nvme_tier.h"

#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "server/core/io/uring_env.h"

namespace zerostate::server {
namespace {

constexpr int kMaxNameAttempts = 1000;

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

absl::Status CheckOptions(const TierShape& shape, const NvmeTierOptions& o) {
  if (o.dir.empty()) return absl::InvalidArgumentError("nvme_dir: no directory given");
  if (o.queue_depth < 2 || o.queue_depth > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("nvme_queue_depth: ", o.queue_depth, " is not in [2, 4096]"));
  }
  if (shape.block_floats() * sizeof(float) % 64 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "block of ", shape.block_floats(), " floats is not a multiple of 64 bytes"));
  }
  return absl::OkStatus();
}

}  // namespace

NvmeTier::NvmeTier(TierShape shape, NvmeTierOptions options)
    : StateTier(shape),
      options_(std::move(options)),
      layout_(shape.block_floats() * sizeof(float)),
      block_mu_(shape.num_blocks),
      meta_(shape.num_blocks),
      cache_(options_.cache_bytes, layout_.payload_bytes) {}

absl::StatusOr<std::unique_ptr<NvmeTier>> NvmeTier::Create(TierShape shape,
                                                           NvmeTierOptions options) {
  if (auto s = CheckOptions(shape, options); !s.ok()) return s;
  if (options.env == nullptr) options.env = io::NewUringEnv();
  std::unique_ptr<NvmeTier> tier(new NvmeTier(shape, std::move(options)));
  if (auto s = tier->Open(); !s.ok()) return s;
  return tier;
}

absl::Status NvmeTier::Open() {
  io::Env& env = *options_.env;
  for (int k = 0; k < kMaxNameAttempts && file_ == nullptr; ++k) {
    std::string path = absl::StrCat(options_.dir, "/", options_.name,
                                    k == 0 ? "" : absl::StrCat(".", k), ".zst");
    auto file = env.CreateFile(path);
    if (absl::IsAlreadyExists(file.status())) continue;
    if (!file.ok()) return file.status();
    file_ = *std::move(file);
  }
  if (file_ == nullptr) {
    return absl::InternalError(absl::StrCat("no free file name for ", options_.name, " in ",
                                            options_.dir, " after ", kMaxNameAttempts, " tries"));
  }
  // Scratch space: unlinked at once, so that its blocks go back to the
  // filesystem when the process ends, even by kill -9 (the open file
  // keeps them until then).
  if (auto s = env.DeleteFile(file_->path()); !s.ok()) return s;
  if (auto s = file_->Allocate(shape().num_blocks * 2 * layout_.slot_bytes); !s.ok()) return s;
  auto queue = env.NewQueue(options_.queue_depth);
  if (!queue.ok()) return queue.status();
  absl::MutexLock lock(&update_mu_);
  update_queue_ = *std::move(queue);
  for (int i = 0; i < options_.queue_depth; ++i) update_bufs_.emplace_back(layout_.slot_bytes);
  return absl::OkStatus();
}

NvmeTier::~NvmeTier() = default;  // the file was unlinked when opened

uint64_t NvmeTier::SlotOffset(uint64_t b, int slot) const {
  return (b * 2 + static_cast<uint64_t>(slot)) * layout_.slot_bytes;
}

std::string NvmeTier::Where(uint64_t b, int slot) const {
  return absl::StrCat("block ", b, " (slot ", slot == 0 ? "A" : "B", " at offset ",
                      SlotOffset(b, slot), " in ", file_->path(), ")");
}

absl::Status NvmeTier::ForBlock(uint64_t b, const absl::Status& s) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat("block ", b, ": ", s.message()));
}

io::IoRequest NvmeTier::Request(io::IoOp op, uint64_t b, int slot, void* buf) const {
  io::IoRequest r;
  r.op = op;
  r.file = file_.get();
  r.offset = SlotOffset(b, slot);
  r.buf = buf;
  r.len = static_cast<uint32_t>(layout_.slot_bytes);
  r.tag = b;
  return r;
}

NvmeTier::BlockMeta NvmeTier::Meta(uint64_t b) const {
  absl::MutexLock lock(&block_mu_[b]);
  return meta_[b];
}

absl::Status NvmeTier::CheckRead(const io::IoCompletion& done, uint64_t b,
                                 const BlockMeta& m) const {
  if (auto s = done.status(); !s.ok()) return ForBlock(b, s);
  return CheckSlot(layout_, b, m.seq, done.req.buf, Where(b, m.current));
}

io::IoRequest NvmeTier::PrepareWrite(uint64_t b, const BlockMeta& m, void* slot_buf) const {
  int target = m.current == 0 ? 1 : 0;
  SealSlot(layout_, b, m.seq + 1, slot_buf);
  return Request(io::IoOp::kWrite, b, target, slot_buf);
}

void NvmeTier::CommitLocked(uint64_t b, const io::IoRequest& write, const void* slot_buf) {
  BlockMeta& m = meta_[b];
  m.current = write.offset == SlotOffset(b, 0) ? 0 : 1;
  ++m.seq;
  cache_.Put(b, slot_buf, /*may_evict=*/false);
}

void NvmeTier::Record(const io::IoCompletion& done, double seconds) const {
  if (options_.metrics == nullptr) return;
  options_.metrics->RecordIo(done.req.op, done.result > 0 ? done.result : 0, seconds);
}

absl::StatusOr<NvmeTier::Lane> NvmeTier::TakeLane() {
  {
    absl::MutexLock lock(&lanes_mu_);
    if (!free_lanes_.empty()) {
      Lane lane = std::move(free_lanes_.back());
      free_lanes_.pop_back();
      return lane;
    }
  }
  auto queue = options_.env->NewQueue(1);
  if (!queue.ok()) return queue.status();
  Lane lane{*std::move(queue), io::IoBuffer(layout_.slot_bytes)};
  absl::MutexLock lock(&lanes_mu_);
  lane_bytes_ += lane.buf.size();
  return lane;
}

void NvmeTier::ReturnLane(Lane lane) {
  absl::MutexLock lock(&lanes_mu_);
  free_lanes_.push_back(std::move(lane));
}

absl::StatusOr<io::IoCompletion> NvmeTier::RunSync(Lane& lane, const io::IoRequest& r) const {
  auto start = std::chrono::steady_clock::now();
  if (auto s = lane.queue->Submit(r); !s.ok()) return s;
  auto done = lane.queue->Wait();
  if (done.ok()) Record(*done, SecondsSince(start));
  return done;
}

absl::Status NvmeTier::Load(uint64_t b, float* out) {
  absl::MutexLock block_lock(&block_mu_[b]);
  const BlockMeta& m = meta_[b];
  if (m.current < 0) {
    std::memset(out, 0, layout_.payload_bytes);
    return absl::OkStatus();
  }
  bool hit = cache_.Get(b, out);
  if (options_.metrics != nullptr) options_.metrics->RecordCache(hit);
  if (hit) return absl::OkStatus();
  auto lane = TakeLane();
  if (!lane.ok()) return lane.status();
  auto done = RunSync(*lane, Request(io::IoOp::kRead, b, m.current, lane->buf.data()));
  absl::Status s = done.ok() ? CheckRead(*done, b, m) : done.status();
  if (s.ok()) {
    std::memcpy(out, lane->buf.data(), layout_.payload_bytes);
    cache_.Put(b, out, /*may_evict=*/true);
  }
  ReturnLane(*std::move(lane));
  return s;
}

absl::Status NvmeTier::Store(uint64_t b, const float* in) {
  absl::MutexLock block_lock(&block_mu_[b]);
  auto lane = TakeLane();
  if (!lane.ok()) return lane.status();
  std::memcpy(lane->buf.data(), in, layout_.payload_bytes);
  io::IoRequest w = PrepareWrite(b, meta_[b], lane->buf.data());
  auto done = RunSync(*lane, w);
  absl::Status s = done.ok() ? ForBlock(b, done->status()) : done.status();
  if (s.ok()) CommitLocked(b, w, lane->buf.data());
  ReturnLane(*std::move(lane));
  return s;
}

uint64_t NvmeTier::ram_bytes() const {
  absl::MutexLock lock(&lanes_mu_);
  return cache_.bytes() + lane_bytes_ + update_bufs_.size() * layout_.slot_bytes;
}

}  // namespace zerostate::server
