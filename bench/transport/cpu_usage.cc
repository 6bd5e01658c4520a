#include "bench/transport/cpu_usage.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace zerostate::bench {
namespace {

double TicksToSeconds(double ticks) { return ticks / static_cast<double>(sysconf(_SC_CLK_TCK)); }

// The time every thread of `pid` has run, from the nanoseconds of each
// /proc/<pid>/task/<tid>/schedstat (finer than the ticks of /proc/<pid>/stat).
double ProcessCpuSeconds(pid_t pid) {
  std::error_code ec;
  double ns = 0;
  for (const auto& task :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    std::ifstream in(task.path() / "schedstat");
    double run_ns = 0;
    if (in >> run_ns) ns += run_ns;
  }
  return ns * 1e-9;
}

}  // namespace

CpuSample SampleCpu(const std::vector<pid_t>& processes) {
  CpuSample s;
  std::ifstream in("/proc/stat");
  std::string cpu;
  in >> cpu;  // "cpu": the sum over every core
  double ticks[8] = {};  // user nice system idle iowait irq softirq steal (guest is in user)
  for (double& t : ticks) in >> t;
  for (double t : ticks) s.total_s += t;
  s.busy_s = s.total_s - ticks[3] - ticks[4];  // idle, iowait
  s.busy_s = TicksToSeconds(s.busy_s);
  s.total_s = TicksToSeconds(s.total_s);
  for (pid_t pid : processes) s.process_s += ProcessCpuSeconds(pid);
  return s;
}

double BusyFraction(const CpuSample& before, const CpuSample& after) {
  const double total = after.total_s - before.total_s;
  return total > 0 ? (after.busy_s - before.busy_s) / total : 0;
}

double ProcessSeconds(const CpuSample& before, const CpuSample& after) {
  return after.process_s - before.process_s;
}

}  // namespace zerostate::bench
