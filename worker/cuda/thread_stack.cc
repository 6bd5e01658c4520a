// Part of the zerostate-worker executable when it is built with the CUDA
// backend: a floor under the stack size every thread is created with.
//
// glibc puts a thread's static TLS at the top of its stack. The CUDA
// libraries the backend links bring about 120 KiB of it (cuBLASLt alone
// 92 KiB), and civetweb, which serves the worker's /metrics under
// prometheus-cpp's Exposer, creates its threads with a fixed 100 KiB stack
// (Debian builds it with USE_STACK_SIZE=102400): pthread_create then fails
// with EINVAL and the Exposer throws ("null context when constructing
// CivetServer"). This definition, exported from the executable
// (-Wl,--export-dynamic-symbol, worker/CMakeLists.txt), comes before
// glibc's in symbol lookup, so it sees every library's call; it raises the
// size to kMinStack and passes it on to glibc's.
#include <dlfcn.h>
#include <pthread.h>

#include <algorithm>
#include <cstddef>

namespace {

// Room for the static TLS and a small thread's frames.
constexpr size_t kMinStack = size_t{1} << 20;

using SetStackSize = int (*)(pthread_attr_t*, size_t);

}  // namespace

extern "C" int pthread_attr_setstacksize(pthread_attr_t* attr, size_t size) {
  static const auto glibc =
      reinterpret_cast<SetStackSize>(dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  return glibc(attr, std::max(size, kMinStack));
}
