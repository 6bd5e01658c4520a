// The C API of the gathers landed once (zerostate_engine_c.h's
// zs_gather_slot_*) over trainer::GatherSlot. Built into
// libzerostate_client.so (client/CMakeLists.txt).
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/c_api_handles.h"
#include "trainer/engine/c_api_args.h"
#include "trainer/engine/c_handles.h"
#include "trainer/engine/gather_slot.h"
#include "trainer/engine/zerostate_engine_c.h"

namespace {

namespace zc = ::zerostate::client;
namespace zt = ::zerostate::trainer;
using zerostate::Range;
using zt::capi::Null;

}  // namespace

extern "C" int zs_gather_slot_create(uint64_t begin, uint64_t end, zs_gather_slot** out,
                                     char** error) {
  if (out == nullptr) return zc::ReportStatus(Null("out"), error);
  if (begin > end) {
    return zc::ReportStatus(absl::InvalidArgumentError(absl::StrCat(
                                "begin: ", begin, " is past end ", end)),
                            error);
  }
  *out = new zs_gather_slot(Range{begin, end});
  return zc::ReportStatus(absl::OkStatus(), error);
}

extern "C" void zs_gather_slot_free(zs_gather_slot* slot) {
  if (slot == nullptr) return;
  absl::StatusOr<zc::Ticket> dropped = slot->slot.Drop();
  if (dropped.ok()) dropped->Wait().IgnoreError();
  delete slot;
}

extern "C" int zs_gather_slot_fetch(zs_gather_slot* slot, zs_job* job, uint64_t min_version,
                                    void* out, size_t out_bytes, int dtype, char** error) {
  if (slot == nullptr) return zc::ReportStatus(Null("slot"), error);
  if (job == nullptr) return zc::ReportStatus(Null("job"), error);
  const Range range = slot->slot.range();
  zt::GatherSlot::IssueFn issue;
  if (!range.empty()) {
    if (out == nullptr) return zc::ReportStatus(Null("out"), error);
    absl::Status s = zc::CheckBufferBytes("out", range.begin, range.end, dtype, out_bytes);
    if (!s.ok()) return zc::ReportStatus(s, error);
    zc::JobClient* client = job->job.get();
    issue = [=] {
      return client->GatherAsync(min_version, range, out, static_cast<zerostate::v1::DType>(dtype));
    };
  }
  return zc::ReportStatus(slot->slot.Fetch(min_version, issue), error);
}

extern "C" int zs_gather_slot_land(zs_gather_slot* slot, int* take_part, char** error) {
  if (slot == nullptr) return zc::ReportStatus(Null("slot"), error);
  if (take_part == nullptr) return zc::ReportStatus(Null("take_part"), error);
  absl::StatusOr<bool> land = slot->slot.Land();
  if (land.ok()) *take_part = *land ? 1 : 0;
  return zc::ReportStatus(land.status(), error);
}

extern "C" int zs_gather_slot_landed(zs_gather_slot* slot, const zs_wait* reuse, char** error) {
  if (slot == nullptr) return zc::ReportStatus(Null("slot"), error);
  if (reuse != nullptr && reuse->fn == nullptr) return zc::ReportStatus(Null("reuse->fn"), error);
  zt::GatherSlot::ReuseFn fn;
  if (reuse != nullptr) fn = [w = *reuse] { return zt::capi::RunWait(w); };
  return zc::ReportStatus(slot->slot.Landed(std::move(fn)), error);
}

extern "C" int zs_gather_slot_drop(zs_gather_slot* slot, char** error) {
  if (slot == nullptr) return zc::ReportStatus(Null("slot"), error);
  absl::StatusOr<zc::Ticket> dropped = slot->slot.Drop();
  if (dropped.ok()) dropped->Wait().IgnoreError();  // cancelled: at once
  return zc::ReportStatus(dropped.status(), error);
}

extern "C" int zs_gather_slot_wait(const zs_gather_slot* slot, uint64_t version, char** error) {
  if (slot == nullptr) return zc::ReportStatus(Null("slot"), error);
  return zc::ReportStatus(slot->slot.WaitGathered(version), error);
}

extern "C" int zs_gather_slot_pending(const zs_gather_slot* slot, uint64_t* version) {
  if (slot == nullptr) return 0;
  std::optional<uint64_t> v = slot->slot.pending();
  if (v.has_value() && version != nullptr) *version = *v;
  return v.has_value() ? 1 : 0;
}
