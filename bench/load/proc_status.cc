#include "bench/load/proc_status.h"

#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace zerostate::bench {

absl::StatusOr<uint64_t> ProcStatusBytes(pid_t pid, const std::string& field) {
  const std::string path = absl::StrCat("/proc/", pid, "/status");
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  const std::string prefix = field + ":";
  for (std::string line; std::getline(in, line);) {
    absl::string_view rest = line;
    if (!absl::ConsumePrefix(&rest, prefix)) continue;
    std::vector<absl::string_view> words = absl::StrSplit(rest, ' ', absl::SkipWhitespace());
    uint64_t kb;
    if (words.size() != 2 || words[1] != "kB" || !absl::SimpleAtoi(words[0], &kb)) {
      return absl::InternalError(absl::StrCat(path, ": ", field, " is '", rest, "', not '<n> kB'"));
    }
    return kb * 1024;
  }
  return absl::NotFoundError(absl::StrCat(path, ": no ", field, " line"));
}

}  // namespace zerostate::bench
