// The C API of the step in flight (zerostate_engine_c.h's zs_in_flight_*)
// over trainer::InFlightStep. Built into libzerostate_client.so
// (client/CMakeLists.txt).
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/c_api_handles.h"
#include "trainer/c_policy_handle.h"
#include "trainer/engine/c_api_args.h"
#include "trainer/engine/c_handles.h"
#include "trainer/engine/coordinator.h"
#include "trainer/engine/in_flight.h"
#include "trainer/engine/zerostate_engine_c.h"

namespace {

namespace zc = ::zerostate::client;
namespace zt = ::zerostate::trainer;
using zt::capi::Null;

constexpr int kMaxCode = 16;  // UNAUTHENTICATED, the last gRPC code

void SetString(char** out, const std::string& s) {
  if (out != nullptr) *out = s.empty() ? nullptr : zc::CopyCString(s);
}

zt::StepPushes PushesOf(zs_pusher* pusher, uint64_t mark) {
  return zt::StepPushes{pusher != nullptr ? &pusher->pusher : nullptr, mark};
}

// A mark past the orders `pusher` has: named, as Drain would refuse it.
absl::Status CheckMark(const zs_pusher* pusher, uint64_t mark) {
  const uint64_t queued = pusher != nullptr ? pusher->pusher.Mark() : 0;
  if (pusher == nullptr || mark <= queued) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("mark: ", mark, " is past the ", queued, " pushes queued"));
}

}  // namespace

extern "C" int zs_in_flight_create(zs_in_flight** out, char** error) {
  if (out == nullptr) return zc::ReportStatus(Null("out"), error);
  *out = new zs_in_flight;
  return zc::ReportStatus(absl::OkStatus(), error);
}

extern "C" void zs_in_flight_free(zs_in_flight* in_flight) { delete in_flight; }

extern "C" int zs_in_flight_start(zs_in_flight* in_flight, zs_job* job, const zs_policy* policy,
                                  uint64_t step, double average_over, float lr, int use_lr,
                                  const zs_wait* before_step, zs_pusher* pusher, uint64_t mark,
                                  char** error) {
  absl::Status s = in_flight == nullptr ? Null("in_flight")
                   : job == nullptr     ? Null("job")
                   : policy == nullptr  ? Null("policy")
                                        : zt::capi::CheckBeforeStep(before_step);
  if (s.ok()) s = CheckMark(pusher, mark);
  if (!s.ok()) return zc::ReportStatus(s, error);
  zt::CoordinateOptions options = zt::capi::OptionsOf(lr, use_lr, before_step);
  zt::InFlightStep* flight = &in_flight->step;
  // The gathers are out once before_step (which puts them out) returned.
  options.before_step = [flight, step, put_out = std::move(options.before_step)] {
    absl::Status out = put_out ? put_out() : absl::OkStatus();
    if (out.ok()) flight->MarkGathersOut(step);
    return out;
  };
  zc::JobClient* client = job->job.get();
  auto coordinate = [client, step, average_over, options](zt::Policy* p) {
    return zt::CoordinateStep(client, p, step, average_over, options);
  };
  return zc::ReportStatus(
      flight->Start(step, policy->policy, std::move(coordinate), nullptr, PushesOf(pusher, mark)),
      error);
}

extern "C" int zs_in_flight_follow(zs_in_flight* in_flight, uint64_t step, zs_pusher* pusher,
                                   uint64_t mark, char** error) {
  absl::Status s = in_flight == nullptr ? Null("in_flight") : CheckMark(pusher, mark);
  if (!s.ok()) return zc::ReportStatus(s, error);
  return zc::ReportStatus(in_flight->step.Follow(step, PushesOf(pusher, mark)), error);
}

extern "C" int zs_in_flight_fail(zs_in_flight* in_flight, uint64_t step, int code,
                                 const char* message, int refused, zs_pusher* pusher, uint64_t mark,
                                 char** error) {
  absl::Status s = in_flight == nullptr ? Null("in_flight")
                   : message == nullptr ? Null("message")
                   : code <= 0 || code > kMaxCode
                       ? absl::InvalidArgumentError(absl::StrCat(
                             "code: ", code, " is not a failed status's (1 to ", kMaxCode, ")"))
                       : absl::OkStatus();
  if (s.ok()) s = CheckMark(pusher, mark);
  if (!s.ok()) return zc::ReportStatus(s, error);
  zt::Coordinated outcome;
  outcome.status = absl::Status(static_cast<absl::StatusCode>(code), message);
  outcome.stage = absl::StrCat("step ", step);
  outcome.refused = refused != 0;
  return zc::ReportStatus(in_flight->step.Fail(step, std::move(outcome), PushesOf(pusher, mark)),
                          error);
}

extern "C" int zs_in_flight_active(const zs_in_flight* in_flight, uint64_t* step) {
  if (in_flight == nullptr) return 0;
  const std::optional<uint64_t> now = in_flight->step.step();
  if (now.has_value() && step != nullptr) *step = *now;
  return now.has_value() ? 1 : 0;
}

extern "C" int zs_in_flight_take(zs_in_flight* in_flight, zs_policy* policy, zs_verdict* out,
                                 char** stage, char** message, char** error) {
  SetString(stage, "");
  SetString(message, "");
  absl::Status s = in_flight == nullptr ? Null("in_flight")
                   : out == nullptr     ? Null("out")
                                        : absl::OkStatus();
  if (!s.ok()) return zc::ReportStatus(s, error);
  std::optional<zt::Verdict> v = in_flight->step.Take();
  *out = zs_verdict{};
  if (!v.has_value()) return zc::ReportStatus(absl::OkStatus(), error);
  const zt::Coordinated& done = v->outcome;
  *out = zs_verdict{1,
                    v->step,
                    v->coordinated ? 1 : 0,
                    done.refused ? 1 : 0,
                    static_cast<int>(done.status.code()),
                    zt::DecisionOf(done.decision)};
  if (!done.status.ok()) {
    SetString(stage, done.stage);
    SetString(message, std::string(done.status.message()));
  } else if (policy != nullptr && v->policy.has_value()) {
    policy->policy = *v->policy;
  }
  return zc::ReportStatus(absl::OkStatus(), error);
}

extern "C" void zs_abandon(zs_in_flight* in_flight, zs_pusher* pusher,
                           zs_gather_slot* const* slots, size_t num_slots) {
  std::vector<zt::GatherSlot*> of;
  for (size_t i = 0; slots != nullptr && i < num_slots; ++i) {
    if (slots[i] != nullptr) of.push_back(&slots[i]->slot);
  }
  zt::AbandonInFlight(in_flight != nullptr ? &in_flight->step : nullptr,
                      pusher != nullptr ? &pusher->pusher : nullptr, of);
}

extern "C" int zs_in_flight_wait_gathers_out(zs_in_flight* in_flight, uint64_t step) {
  if (in_flight == nullptr) return 0;
  return in_flight->step.WaitGathersOut(step) ? 1 : 0;
}
