#include "worker/launch_env.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace zerostate::worker {
namespace {

absl::Status Invalid(const std::string& name, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(name, ": ", what));
}

// The variable's value, or `fallback` when unset.
absl::StatusOr<uint32_t> Read(const EnvFn& env, const std::string& name, uint32_t fallback) {
  std::string v = env(name);
  if (v.empty()) return fallback;
  uint32_t n = 0;
  if (!absl::SimpleAtoi(v, &n)) return Invalid(name, absl::StrCat("'", v, "' is not a number"));
  return n;
}

}  // namespace

std::string GetEnv(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  return v == nullptr ? "" : v;
}

absl::StatusOr<Topology> TopologyFromEnv(const EnvFn& env, uint32_t local_threads) {
  auto local_size = Read(env, "LOCAL_WORLD_SIZE", local_threads > 0 ? local_threads : 1);
  if (!local_size.ok()) return local_size.status();
  auto world = Read(env, "WORLD_SIZE", *local_size);
  if (!world.ok()) return world.status();
  auto node = Read(env, "NODE_RANK", 0);
  if (!node.ok()) return node.status();
  auto local_rank = Read(env, "LOCAL_RANK", 0);
  if (!local_rank.ok()) return local_rank.status();
  if (*local_size == 0) return Invalid("LOCAL_WORLD_SIZE", "must be >= 1");
  if (local_threads > 0 && *local_size != local_threads) {
    return Invalid("LOCAL_WORLD_SIZE", absl::StrCat(*local_size, " != --local_threads ", local_threads));
  }
  if (local_threads > 0 && *local_rank != 0) return Invalid("LOCAL_RANK", "must be 0 with --local_threads");
  if (*world == 0 || *world % *local_size != 0) {
    return Invalid("WORLD_SIZE", absl::StrCat(*world, " is not a multiple of LOCAL_WORLD_SIZE ", *local_size));
  }
  Topology t{*node, *world / *local_size, *local_rank, *local_size};
  if (t.node >= t.num_nodes) return Invalid("NODE_RANK", absl::StrCat(t.node, " >= nodes ", t.num_nodes));
  if (t.local_rank >= t.local_size) {
    return Invalid("LOCAL_RANK", absl::StrCat(t.local_rank, " >= LOCAL_WORLD_SIZE ", t.local_size));
  }
  auto rank = Read(env, "RANK", t.rank());
  if (!rank.ok()) return rank.status();
  if (*rank != t.rank()) {
    return Invalid("RANK", absl::StrCat(*rank, " != NODE_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK = ", t.rank()));
  }
  return t;
}

}  // namespace zerostate::worker
