// What 64 MiB of fresh anonymous memory costs to fill on this host, the
// way a backup received its sums (zeroed by std::string::resize, the
// first write faulting a 4 KiB page at a time) against the way it does
// now (server/core/populate.h: one madvise(MADV_POPULATE_WRITE), then
// the zeroing), and MADV_HUGEPAGE; "warm" rewrites memory already in.
// Prints the median and range of 7 tries of each, in ms.
//   gcc -O2 -o fresh_touch fresh_touch.c && ./fresh_touch
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double Now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
static int Cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

int main(void) {
  const size_t n = (size_t)64 << 20, huge = (size_t)2 << 20;
  const char* names[] = {"page by page", "populate+zero", "hugepage+zero", "warm"};
  enum { kTries = 7 };
  for (int mode = 0; mode < 4; ++mode) {
    double ms[kTries];
    for (int r = 0; r < kTries; ++r) {
      char* p = mmap(0, n + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) return 1;
      char* a = (char*)(((unsigned long)p + huge - 1) & ~(huge - 1));
      if (mode == 2) madvise(a, n, MADV_HUGEPAGE);
      if (mode == 3) memset(a, 1, n);
      const double t = Now();
      if (mode == 1 && madvise(a, n, MADV_POPULATE_WRITE) != 0) return 2;
      memset(a, 0, n);
      ms[r] = (Now() - t) * 1e3;
      munmap(p, n + huge);
    }
    qsort(ms, kTries, sizeof ms[0], Cmp);
    printf("%-14s 64 MiB: median %6.1f ms (%.1f-%.1f)\n", names[mode], ms[kTries / 2], ms[0],
           ms[kTries - 1]);
  }
  return 0;
}
