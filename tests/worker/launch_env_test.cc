#include "worker/launch_env.h"

#include <gtest/gtest.h>

#include <map>

namespace zerostate::worker {
namespace {

EnvFn Env(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) {
    auto it = vars.find(name);
    return it == vars.end() ? std::string() : it->second;
  };
}

void ExpectInvalid(const std::map<std::string, std::string>& vars, uint32_t threads,
                   const std::string& name) {
  auto t = TopologyFromEnv(Env(vars), threads);
  ASSERT_FALSE(t.ok()) << name;
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find(name), std::string::npos) << t.status();
}

TEST(LaunchEnvTest, NoVariablesIsOneRank) {
  auto t = TopologyFromEnv(Env({}), 0);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->world(), 1u);
  EXPECT_EQ(t->rank(), 0u);
}

TEST(LaunchEnvTest, TorchrunVariables) {
  auto t = TopologyFromEnv(Env({{"RANK", "3"}, {"LOCAL_RANK", "1"}, {"WORLD_SIZE", "4"},
                                {"LOCAL_WORLD_SIZE", "2"}, {"NODE_RANK", "1"}}), 0);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->num_nodes, 2u);
  EXPECT_EQ(t->node, 1u);
  EXPECT_EQ(t->local_rank, 1u);
  EXPECT_EQ(t->rank(), 3u);
}

TEST(LaunchEnvTest, LocalThreads) {
  auto t = TopologyFromEnv(Env({{"WORLD_SIZE", "4"}, {"NODE_RANK", "1"}}), 2);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->local_size, 2u);
  EXPECT_EQ(t->num_nodes, 2u);
  EXPECT_EQ(t->rank(), 2u);
}

TEST(LaunchEnvTest, EachBadVariableIsNamed) {
  ExpectInvalid({{"RANK", "x"}}, 0, "RANK");
  ExpectInvalid({{"WORLD_SIZE", "3"}, {"LOCAL_WORLD_SIZE", "2"}}, 0, "WORLD_SIZE");
  ExpectInvalid({{"LOCAL_WORLD_SIZE", "0"}}, 0, "LOCAL_WORLD_SIZE");
  ExpectInvalid({{"LOCAL_WORLD_SIZE", "3"}}, 2, "LOCAL_WORLD_SIZE");
  ExpectInvalid({{"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"}}, 2, "LOCAL_RANK");
  ExpectInvalid({{"NODE_RANK", "2"}, {"WORLD_SIZE", "2"}}, 0, "NODE_RANK");
  ExpectInvalid({{"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}}, 0, "LOCAL_RANK");
  ExpectInvalid({{"RANK", "1"}, {"WORLD_SIZE", "2"}}, 0, "RANK");
}

}  // namespace
}  // namespace zerostate::worker
