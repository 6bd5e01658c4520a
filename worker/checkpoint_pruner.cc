#include "worker/checkpoint_pruner.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <set>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "google/protobuf/util/json_util.h"
#include "zerostate/v1/checkpoint.pb.h"

namespace zerostate::worker {
namespace {

// Closes the descriptor when it goes out of scope.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  bool ok() const { return fd_ >= 0; }

 private:
  int fd_;
};

std::string Errno(absl::string_view what) { return absl::StrCat(what, ": ", std::strerror(errno)); }

// O_NOFOLLOW: a symlink planted under the root is refused, never followed.
int OpenDirAt(int parent, const std::string& name) {
  return openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

// The entries of an open directory, without "." and "..".
absl::StatusOr<std::vector<std::string>> List(int dir_fd) {
  int copy = dup(dir_fd);
  DIR* dir = copy < 0 ? nullptr : fdopendir(copy);
  if (dir == nullptr) {
    if (copy >= 0) close(copy);
    return absl::InternalError(Errno("listing"));
  }
  rewinddir(dir);
  std::vector<std::string> names;
  while (dirent* e = readdir(dir)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(std::move(name));
  }
  closedir(dir);
  return names;
}

// The version of a directory named "v<N>" (canonical decimal), else none.
std::optional<uint64_t> VersionOf(const std::string& name) {
  uint64_t v;
  absl::string_view digits = name;
  if (!absl::ConsumePrefix(&digits, "v") || !absl::SimpleAtoi(digits, &v)) return std::nullopt;
  if (absl::StrCat("v", v) != name) return std::nullopt;  // "v+1", "v01"
  return v;
}

struct ShardFile {
  uint32_t shard = 0;
  uint32_t num_shards = 0;
  bool manifest = false;
  bool temporary = false;
};

// Parses the names the servers write (server/core/checkpoint/checkpoint_files.h):
// shard-<i>-of-<S>.state / .manifest.json, with ".tmp" while being written.
std::optional<ShardFile> ParseShardFile(absl::string_view name) {
  ShardFile f;
  f.temporary = absl::ConsumeSuffix(&name, ".tmp");
  f.manifest = absl::ConsumeSuffix(&name, ".manifest.json");
  if (!f.manifest && !absl::ConsumeSuffix(&name, ".state")) return std::nullopt;
  if (!absl::ConsumePrefix(&name, "shard-")) return std::nullopt;
  std::vector<absl::string_view> parts = absl::StrSplit(name, "-of-");
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &f.shard) ||
      !absl::SimpleAtoi(parts[1], &f.num_shards)) {
    return std::nullopt;
  }
  if (absl::StrCat(f.shard, "-of-", f.num_shards) != name || f.shard >= f.num_shards) {
    return std::nullopt;
  }
  return f;
}

absl::StatusOr<std::string> ReadAt(int dir_fd, const std::string& name) {
  Fd fd(openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.ok()) return absl::InternalError(Errno(absl::StrCat("opening ", name)));
  std::string data;
  char buf[1 << 14];
  ssize_t n;
  while ((n = read(fd.get(), buf, sizeof buf)) > 0) data.append(buf, n);
  if (n < 0) return absl::InternalError(Errno(absl::StrCat("reading ", name)));
  return data;
}

// A checkpoint directory of the job, as found on disk.
struct Found {
  std::string name;  // v<N>
  uint64_t version = 0;
  std::vector<std::string> files;
  bool complete = false;  // every shard's manifest is there
};

// Checks that `dir_fd` (named v<version>) holds a checkpoint of `job_id`
// and nothing else. Errors: FAILED_PRECONDITION saying why it is not one.
absl::Status Inspect(int dir_fd, const std::string& job_id, Found* found) {
  auto names = List(dir_fd);
  if (!names.ok()) return names.status();
  std::set<uint32_t> manifests;
  uint32_t num_shards = 0;
  for (const std::string& name : *names) {
    auto file = ParseShardFile(name);
    if (!file) {
      return absl::FailedPreconditionError(
          absl::StrCat("holds '", name, "', which is not a checkpoint file"));
    }
    found->files.push_back(name);
    if (!file->manifest || file->temporary) continue;
    auto json = ReadAt(dir_fd, name);
    if (!json.ok()) return json.status();
    v1::ShardManifest m;
    google::protobuf::util::JsonParseOptions options;
    options.ignore_unknown_fields = true;  // a newer format's additions
    if (!google::protobuf::util::JsonStringToMessage(*json, &m, options).ok()) {
      return absl::FailedPreconditionError(absl::StrCat(name, " is not a manifest"));
    }
    if (m.spec().job_id() != job_id || m.version() != found->version) {
      return absl::FailedPreconditionError(absl::StrCat(
          name, " is the manifest of job '", m.spec().job_id(), "' version ", m.version()));
    }
    manifests.insert(file->shard);
    num_shards = file->num_shards;
  }
  if (manifests.empty()) {
    return absl::FailedPreconditionError("holds no manifest naming the job");
  }
  found->complete = manifests.size() == num_shards;
  return absl::OkStatus();
}

// Deletes the files Inspect found, then the directory: a file that
// appeared since makes the last step fail (ENOTEMPTY) instead of vanishing.
absl::Status Delete(int job_fd, int dir_fd, const Found& found) {
  for (const std::string& file : found.files) {
    if (unlinkat(dir_fd, file.c_str(), 0) != 0 && errno != ENOENT) {
      return absl::InternalError(Errno(absl::StrCat("deleting ", file)));
    }
  }
  if (unlinkat(job_fd, found.name.c_str(), AT_REMOVEDIR) != 0) {
    return absl::InternalError(Errno("removing the directory"));
  }
  return absl::OkStatus();
}

// This job's v<N> directories with N < newest, newest first.
std::vector<std::pair<uint64_t, std::string>> OlderVersions(const std::vector<std::string>& names,
                                                            uint64_t newest) {
  std::vector<std::pair<uint64_t, std::string>> older;
  for (const std::string& name : names) {
    auto v = VersionOf(name);
    if (v && *v < newest) older.emplace_back(*v, name);
  }
  std::sort(older.rbegin(), older.rend());
  return older;
}

}  // namespace

PruneReport PruneCheckpoints(const std::string& root, const std::string& job_id, uint64_t newest,
                             uint64_t keep) {
  PruneReport report;
  const std::string job_dir = absl::StrCat(root, "/", job_id);
  if (keep == 0) return report;
  if (job_id.empty() || job_id == "." || job_id == ".." ||
      job_id.find('/') != std::string::npos) {
    report.problems.push_back(
        absl::StrCat(job_dir, ": job id '", job_id, "' is not one path component; not pruning"));
    return report;
  }
  Fd root_fd(open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  Fd job_fd(root_fd.ok() ? OpenDirAt(root_fd.get(), job_id) : -1);
  auto names = job_fd.ok() ? List(job_fd.get()) : absl::InternalError(Errno("opening"));
  if (!names.ok()) {
    report.problems.push_back(absl::StrCat(
        job_dir, ": ", names.status().message(),
        " (the coordinator prunes through the servers' shared checkpoint root)"));
    return report;
  }
  uint64_t kept = 1;  // `newest` itself
  for (auto& [version, name] : OlderVersions(*names, newest)) {
    const std::string path = absl::StrCat(job_dir, "/", name);
    Fd dir_fd(OpenDirAt(job_fd.get(), name));
    if (!dir_fd.ok()) {
      report.problems.push_back(absl::StrCat(path, ": ", Errno("not a directory one can open")));
      continue;
    }
    Found found;
    found.name = name;
    found.version = version;
    if (absl::Status s = Inspect(dir_fd.get(), job_id, &found); !s.ok()) {
      report.problems.push_back(absl::StrCat(path, ": ", s.message(), "; left alone"));
      continue;
    }
    if (found.complete && kept < keep) {
      ++kept;
      continue;
    }
    if (absl::Status s = Delete(job_fd.get(), dir_fd.get(), found); !s.ok()) {
      report.problems.push_back(absl::StrCat(path, ": ", s.message()));
      continue;
    }
    report.deleted.push_back(path);
  }
  return report;
}

}  // namespace zerostate::worker
