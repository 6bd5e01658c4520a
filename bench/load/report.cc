#include "bench/load/report.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace zerostate::bench {

std::string ClientReport::Format() const {
  return absl::StrCat("push ", absl::StrJoin(push_us, " "), "\nstep ", absl::StrJoin(step_us, " "),
                      "\ngather ", absl::StrJoin(gather_us, " "), "\nbytes ", pushed_bytes, " ",
                      gathered_bytes, "\ndone\n");
}

absl::StatusOr<ClientReport> ClientReport::Parse(
    const std::function<absl::StatusOr<std::string>()>& next_line) {
  ClientReport r;
  while (true) {
    absl::StatusOr<std::string> line = next_line();
    if (!line.ok()) return line.status();
    if (*line == "done") return r;
    std::vector<std::string> words = absl::StrSplit(*line, ' ', absl::SkipEmpty());
    std::vector<int64_t> values;
    for (size_t i = 1; i < words.size(); ++i) {
      int64_t v;
      if (!absl::SimpleAtoi(words[i], &v) || v < 0) {
        return absl::InvalidArgumentError(absl::StrCat("report line '", *line, "': '", words[i],
                                                       "' is not a count"));
      }
      values.push_back(v);
    }
    const std::string key = words.empty() ? "" : words[0];
    if (key == "push") {
      r.push_us = std::move(values);
    } else if (key == "step") {
      r.step_us = std::move(values);
    } else if (key == "gather") {
      r.gather_us = std::move(values);
    } else if (key == "bytes" && values.size() == 2) {
      r.pushed_bytes = values[0];
      r.gathered_bytes = values[1];
    } else {
      return absl::InvalidArgumentError(absl::StrCat("report line '", *line, "' is not one of push, step, gather, bytes, done"));
    }
  }
}

double Quantile(std::vector<int64_t> v, double q) {
  if (v.empty()) return 0;
  size_t rank = static_cast<size_t>(std::ceil(q * v.size()));
  rank = std::clamp<size_t>(rank, 1, v.size()) - 1;
  std::nth_element(v.begin(), v.begin() + rank, v.end());
  return static_cast<double>(v[rank]);
}

}  // namespace zerostate::bench
