#include <stdio.h>
#include <time.h>
#include <immintrin.h>
static double now(){struct timespec t;clock_gettime(CLOCK_THREAD_CPUTIME_ID,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(){
  long n=200000000; long x=3;
  double t0=now();
  for(long i=0;i<n;i++){ __asm__ volatile("imul %0,%0\n\timul %0,%0\n\timul %0,%0\n\timul %0,%0":"+r"(x)); }
  double t1=now();
  printf("GHz %.3f\n", 12.0*n/(t1-t0)/1e9);
  // div+sqrt throughput: 8 independent chains
  __m512 a[8]; for(int k=0;k<8;k++) a[k]=_mm512_set1_ps(1.5f+k);
  __m512 d=_mm512_set1_ps(1.0000001f);
  long m=20000000;
  t0=now();
  for(long i=0;i<m;i++){ for(int k=0;k<8;k++){ a[k]=_mm512_div_ps(a[k],d);} }
  t1=now();
  float s=0; for(int k=0;k<8;k++) s+=_mm512_reduce_add_ps(a[k]);
  printf("div zmm ns per %.3f  (%f)\n", (t1-t0)/(m*8.0)*1e9, s);
  for(int k=0;k<8;k++) a[k]=_mm512_set1_ps(1.5f+k);
  t0=now();
  for(long i=0;i<m;i++){ for(int k=0;k<8;k++){ a[k]=_mm512_sqrt_ps(a[k]);} }
  t1=now(); s=0; for(int k=0;k<8;k++) s+=_mm512_reduce_add_ps(a[k]);
  printf("sqrt zmm ns per %.3f  (%f)\n", (t1-t0)/(m*8.0)*1e9, s);
}
