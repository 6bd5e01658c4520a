// The C API of trainer/engine/zerostate_engine_c.h over the bucket plan,
// trainer::Pusher and the coordinator's step (the step in flight:
// c_api_in_flight.cc). Built into libzerostate_client.so (client/CMakeLists.txt).
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/c_api_handles.h"
#include "trainer/bucket_plan.h"
#include "trainer/c_policy_handle.h"
#include "trainer/engine/c_api_args.h"
#include "trainer/engine/c_handles.h"
#include "trainer/engine/coordinator.h"
#include "trainer/engine/pusher.h"
#include "trainer/engine/zerostate_engine_c.h"

namespace {

namespace zc = ::zerostate::client;
namespace zt = ::zerostate::trainer;
using zerostate::Range;
using zt::capi::Null;
using zt::capi::RunWait;

absl::Status CheckLocal(uint32_t local_size, uint32_t local_rank) {
  if (local_size == 0) return absl::InvalidArgumentError("local_size: must be >= 1");
  if (local_rank >= local_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("local_rank: ", local_rank, " is not below local_size ", local_size));
  }
  return absl::OkStatus();
}

absl::Status CheckPlanArgs(const zs_job* job, const uint64_t* ready_points, size_t num_points,
                           uint32_t local_size, uint32_t local_rank, const size_t* count) {
  if (job == nullptr) return Null("job");
  if (count == nullptr) return Null("count");
  if (ready_points == nullptr && num_points > 0) return Null("ready_points");
  if (absl::Status s = CheckLocal(local_size, local_rank); !s.ok()) return s;
  const uint64_t used = job->job->layout().used_elems;
  for (size_t i = 0; i < num_points; ++i) {
    if (ready_points[i] > used) {
      return absl::InvalidArgumentError(absl::StrCat("ready_points[", i, "]: ", ready_points[i],
                                                     " is past the job's ", used, " elements"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckPushArgs(const zs_pusher* pusher, const zs_job* job, uint64_t begin, uint64_t end,
                           const void* data, size_t data_bytes, int dtype, const zs_wait* waits,
                           size_t num_waits) {
  if (pusher == nullptr) return Null("pusher");
  if (job == nullptr) return Null("job");
  if (data == nullptr) return Null("data");
  if (waits == nullptr && num_waits > 0) return Null("waits");
  for (size_t i = 0; i < num_waits; ++i) {
    if (waits[i].fn == nullptr) return Null(absl::StrCat("waits[", i, "].fn").c_str());
  }
  return zc::CheckBufferBytes("data", begin, end, dtype, data_bytes);
}

}  // namespace

extern "C" int zs_job_bucket_plan(const zs_job* job, const uint64_t* ready_points,
                                  size_t num_points, uint64_t max_elems, uint32_t local_size,
                                  uint32_t local_rank, zs_bucket* out, size_t capacity,
                                  size_t* count, char** error) {
  absl::Status s = CheckPlanArgs(job, ready_points, num_points, local_size, local_rank, count);
  if (!s.ok()) return zc::ReportStatus(s, error);
  std::vector<uint64_t> points(ready_points, ready_points + num_points);
  const std::vector<zt::PlannedBucket> plan =
      zt::PlanBuckets(job->job->layout(), std::move(points), max_elems, local_size, local_rank);
  *count = plan.size();
  if (out != nullptr && capacity >= plan.size()) {
    for (size_t i = 0; i < plan.size(); ++i) {
      const zt::PlannedBucket& b = plan[i];
      out[i] = zs_bucket{b.elems.begin, b.elems.end, b.share.begin,
                         b.share.end,   b.staging,   zt::LocalChunk(b.elems, local_size)};
    }
  }
  return zc::ReportStatus(absl::OkStatus(), error);
}

extern "C" int zs_local_share(uint64_t begin, uint64_t end, uint32_t local_size,
                              uint32_t local_rank, uint64_t* share_begin, uint64_t* share_end,
                              uint64_t* chunk, char** error) {
  absl::Status s = share_begin == nullptr ? Null("share_begin")
                   : share_end == nullptr ? Null("share_end")
                   : chunk == nullptr     ? Null("chunk")
                   : begin > end
                       ? absl::InvalidArgumentError(
                             absl::StrCat("begin: ", begin, " is past end ", end))
                       : CheckLocal(local_size, local_rank);
  if (!s.ok()) return zc::ReportStatus(s, error);
  const Range share = zt::LocalShare(Range{begin, end}, local_size, local_rank);
  *share_begin = share.begin;
  *share_end = share.end;
  *chunk = zt::LocalChunk(Range{begin, end}, local_size);
  return zc::ReportStatus(absl::OkStatus(), error);
}

extern "C" int zs_pusher_create(zs_pusher** out, char** error) {
  if (out == nullptr) return zc::ReportStatus(Null("out"), error);
  *out = new zs_pusher;
  return zc::ReportStatus(absl::OkStatus(), error);
}

extern "C" void zs_pusher_free(zs_pusher* pusher) { delete pusher; }

extern "C" int zs_pusher_push(zs_pusher* pusher, zs_job* job, uint64_t step, uint32_t node,
                              uint64_t begin, uint64_t end, const void* data, size_t data_bytes,
                              int dtype, const zs_wait* waits, size_t num_waits, char** error) {
  absl::Status s =
      CheckPushArgs(pusher, job, begin, end, data, data_bytes, dtype, waits, num_waits);
  if (!s.ok()) return zc::ReportStatus(s, error);
  zt::PushOrder order;
  order.what = zt::PushName(step, Range{begin, end});
  for (size_t i = 0; i < num_waits; ++i) {
    order.waits.push_back([w = waits[i]] { return RunWait(w); });
  }
  zc::JobClient* client = job->job.get();
  order.issue = [=] {
    return client->PushAsync(step, node, Range{begin, end}, data,
                             static_cast<zerostate::v1::DType>(dtype));
  };
  pusher->pusher.Submit(std::move(order));
  return zc::ReportStatus(absl::OkStatus(), error);
}

extern "C" uint64_t zs_pusher_mark(const zs_pusher* pusher) {
  return pusher != nullptr ? pusher->pusher.Mark() : 0;
}

extern "C" int zs_pusher_drain(zs_pusher* pusher, uint64_t mark, char** what, char** error) {
  if (what != nullptr) *what = nullptr;
  if (pusher == nullptr) return zc::ReportStatus(Null("pusher"), error);
  if (what == nullptr) return zc::ReportStatus(pusher->pusher.Drain(mark), error);
  std::string name;
  absl::Status s = pusher->pusher.Drain(mark, &name);
  if (!s.ok() && !name.empty()) *what = zc::CopyCString(name);
  return zc::ReportStatus(s, error);
}

extern "C" int zs_pusher_wait_through(zs_pusher* pusher, uint64_t mark, char** error) {
  if (pusher == nullptr) return zc::ReportStatus(Null("pusher"), error);
  return zc::ReportStatus(pusher->pusher.WaitThrough(mark), error);
}

extern "C" int zs_pusher_done_through(zs_pusher* pusher, uint64_t mark) {
  return pusher != nullptr && pusher->pusher.DoneThrough(mark) ? 1 : 0;
}

extern "C" int zs_coordinate(zs_job* job, zs_policy* policy, uint64_t step, double average_over,
                             float lr, int use_lr, const zs_wait* before_step,
                             zs_step_decision* out, char** stage, char** error) {
  if (stage != nullptr) *stage = nullptr;
  absl::Status s = job == nullptr      ? Null("job")
                   : policy == nullptr ? Null("policy")
                   : out == nullptr    ? Null("out")
                                       : zt::capi::CheckBeforeStep(before_step);
  if (!s.ok()) return zc::ReportStatus(s, error);
  const zt::CoordinateOptions options =
      zt::capi::OptionsOf(lr, use_lr, before_step);
  zt::Coordinated done =
      zt::CoordinateStep(job->job.get(), &policy->policy, step, average_over, options);
  *out = zt::DecisionOf(done.decision);
  if (!done.status.ok() && stage != nullptr) *stage = zc::CopyCString(done.stage);
  return zc::ReportStatus(done.status, error);
}

extern "C" int zs_send_ahead(zs_job* job, const zs_policy* policy, uint64_t step,
                             double average_over, float lr, int use_lr, char** error) {
  if (job == nullptr) return zc::ReportStatus(Null("job"), error);
  if (policy == nullptr) return zc::ReportStatus(Null("policy"), error);
  std::optional<float> step_lr;
  if (use_lr != 0) step_lr = lr;
  return zc::ReportStatus(
      zt::SendAhead(job->job.get(), policy->policy, step, average_over, step_lr), error);
}
