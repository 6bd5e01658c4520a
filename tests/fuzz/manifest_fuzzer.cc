// A checkpoint from disk: the input is a shard manifest (JSON), then
// optionally a NUL byte and the bytes of the shard's data file. Both are
// written into a scratch directory as shard-0-of-1.manifest.json and
// shard-0-of-1.state, then opened with CheckpointReader::Open and, if it
// accepts them, checked with VerifyAll, as Restore and `zerostate ckpt`
// do.
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "quiet_logs.h"
#include "server/core/checkpoint/checkpoint_reader.h"

namespace {

const std::string& ScratchDir() {
  static const std::string dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp != nullptr ? tmp : "/tmp") + "/zs_fuzz_ckpt_XXXXXX";
    if (mkdtemp(templ.data()) == nullptr) __builtin_trap();
    return templ;
  }();
  return dir;
}

void WriteFile(const std::string& path, const char* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data, static_cast<std::streamsize>(size));
  if (!out) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const char* bytes = reinterpret_cast<const char*>(data);
  std::string input(bytes, size);
  size_t nul = input.find('\0');
  size_t manifest_size = nul == std::string::npos ? size : nul;
  size_t data_offset = nul == std::string::npos ? size : nul + 1;
  const std::string& dir = ScratchDir();
  WriteFile(dir + "/shard-0-of-1.manifest.json", bytes, manifest_size);
  WriteFile(dir + "/shard-0-of-1.state", bytes + data_offset, size - data_offset);
  auto reader = zerostate::server::CheckpointReader::Open(dir);
  if (!reader.ok()) return 0;
  (void)(*reader)->VerifyAll();
  return 0;
}
