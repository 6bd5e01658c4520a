#include "bench/load/verify.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/client/reference_model.h"

namespace zerostate::bench {
namespace {

// OK if got and want hold the same bits; else names the first difference.
absl::Status CompareBits(const std::string& what, const std::vector<float>& got,
                         const float* want) {
  uint64_t differ = 0, first = 0;
  for (uint64_t i = got.size(); i-- > 0;) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
      ++differ;
      first = i;
    }
  }
  if (differ == 0) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      what, ": ", differ, " of ", got.size(), " elements differ from the reference; first at ",
      first, ": ", got[first], " instead of ", want[first]));
}

}  // namespace

absl::Status VerifyExactlyOnce(client::JobClient& job, int steps, float lr) {
  const std::string& id = job.spec().job_id();
  absl::StatusOr<uint64_t> version = job.Version();
  if (!version.ok()) return version.status();
  if (*version != static_cast<uint64_t>(steps)) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", id, ": version ", *version, " after ", steps, " steps"));
  }
  const Layout& layout = job.layout();
  testing::ReferenceModel reference(job.spec());
  for (int s = 0; s < steps; ++s) {
    std::vector<std::vector<float>> grads;
    for (uint32_t n = 0; n < job.spec().num_nodes(); ++n) {
      grads.push_back(testing::NodeGradient(layout, n, s));
    }
    reference.Step(s, grads, lr, 1.0f);
  }
  const Range all{0, layout.total_elems};
  std::vector<float> got(all.size());
  if (absl::Status s = job.GatherMaster(steps, all, got.data()); !s.ok()) return s;
  if (absl::Status s = CompareBits(absl::StrCat("job ", id, " fp32 masters"), got,
                                   reference.master());
      !s.ok()) {
    return s;
  }
  if (absl::Status s = job.Gather(steps, all, got.data(), v1::DTYPE_FP32); !s.ok()) return s;
  return CompareBits(absl::StrCat("job ", id, " gathered weights"), got,
                     reference.GatheredWeights().data());
}

}  // namespace zerostate::bench
