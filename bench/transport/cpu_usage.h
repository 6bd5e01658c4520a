// CPU time spent while a figure is measured: by this machine as a whole
// (/proc/stat), and by given processes (/proc/<pid>/stat), so a figure
// says whether the cores were the limit.
#pragma once

#include <sys/types.h>

#include <vector>

namespace zerostate::bench {

struct CpuSample {
  double busy_s = 0;     // every core's non-idle time since boot
  double total_s = 0;    // every core's time since boot
  double process_s = 0;  // user + system time of the sampled processes
};

// Now. Processes that cannot be read count 0.
CpuSample SampleCpu(const std::vector<pid_t>& processes);

// Between two samples: the fraction of the machine's cores that were busy,
// and the processes' CPU seconds.
double BusyFraction(const CpuSample& before, const CpuSample& after);
double ProcessSeconds(const CpuSample& before, const CpuSample& after);

}  // namespace zerostate::bench
