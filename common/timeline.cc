#include "common/timeline.h"

#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace zerostate {
namespace {

struct Event {
  int64_t t_ns;
  int64_t tid;
  const char* what;
  int64_t a, b;
};

struct State {
  std::atomic<bool> on{false};
  absl::Mutex mu;
  std::string path ABSL_GUARDED_BY(mu);
  std::vector<Event> events ABSL_GUARDED_BY(mu);
  uint64_t dropped ABSL_GUARDED_BY(mu) = 0;
};

State& state() {
  static State* s = new State;  // never destroyed: threads may record at exit
  return *s;
}

int64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

int64_t ThreadId() {
  thread_local const int64_t tid = static_cast<int64_t>(syscall(SYS_gettid));
  return tid;
}

}  // namespace

absl::Status Timeline::Start(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("timeline: empty path");
  State& s = state();
  absl::MutexLock lock(&s.mu);
  s.path = path;
  s.on.store(true, std::memory_order_release);
  return absl::OkStatus();
}

bool Timeline::on() { return state().on.load(std::memory_order_relaxed); }

void Timeline::Record(const char* what, int64_t a, int64_t b) {
  State& s = state();
  if (!s.on.load(std::memory_order_relaxed)) return;
  const int64_t tid = ThreadId();
  absl::MutexLock lock(&s.mu);
  if (s.events.size() >= kMaxEvents) {
    ++s.dropped;
    return;
  }
  // The clock is read under the lock, so the events lie in time order: read
  // before it, a thread preempted between the clock and the lock would append
  // an event older than one another thread appended meanwhile.
  s.events.push_back(Event{MonotonicNs(), tid, what, a, b});
}

absl::Status Timeline::Flush() {
  State& s = state();
  if (!s.on.load(std::memory_order_acquire)) return absl::OkStatus();
  absl::MutexLock lock(&s.mu);
  FILE* f = std::fopen(s.path.c_str(), "w");
  if (f == nullptr) {
    return absl::InternalError(absl::StrCat("timeline ", s.path, ": ", std::strerror(errno)));
  }
  const long pid = static_cast<long>(getpid());
  for (const Event& e : s.events) {
    std::fprintf(f, "{\"t_ns\":%lld,\"pid\":%ld,\"tid\":%lld,\"what\":\"%s\",\"a\":%lld,\"b\":%lld}\n",
                 static_cast<long long>(e.t_ns), pid, static_cast<long long>(e.tid), e.what,
                 static_cast<long long>(e.a), static_cast<long long>(e.b));
  }
  if (s.dropped > 0) {
    std::fprintf(f, "{\"pid\":%ld,\"what\":\"dropped\",\"a\":%llu}\n", pid,
                 static_cast<unsigned long long>(s.dropped));
  }
  const bool written = std::ferror(f) == 0;
  if (std::fclose(f) != 0 || !written) {
    return absl::InternalError(absl::StrCat("timeline ", s.path, ": write failed"));
  }
  return absl::OkStatus();
}

void Timeline::Stop() {
  State& s = state();
  absl::MutexLock lock(&s.mu);
  s.on.store(false, std::memory_order_release);
  s.events.clear();
  s.dropped = 0;
  s.path.clear();
}

}  // namespace zerostate
