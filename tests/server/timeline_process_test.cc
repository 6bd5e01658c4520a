// zerostate-server --timeline against a real server process: a plain and
// a speculative job each take one step (push, GradStats, Step, gather),
// and the file the server writes at shutdown holds every block's fold,
// the Step's phases in order, gather pieces of the new version after the
// Step's gradients were in, and each speculation begun and ended once
// between its block's fold and the Step's answer.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tests/client/cluster_fixture.h"
#include "tests/client/reference_model.h"

namespace zerostate::testing {
namespace {

struct Event {
  int64_t t;
  std::string what;
  int64_t a, b;
};

int64_t Field(const std::string& line, const std::string& name) {
  const size_t at = line.find("\"" + name + "\":");
  return at == std::string::npos ? -1 : std::stoll(line.substr(at + name.size() + 3));
}

std::vector<Event> Read(const std::string& path) {
  std::ifstream in(path);
  std::vector<Event> out;
  for (std::string line; std::getline(in, line);) {
    const size_t w = line.find("\"what\":\"") + 8;
    out.push_back({Field(line, "t_ns"), line.substr(w, line.find('"', w) - w), Field(line, "a"),
                   Field(line, "b")});
  }
  return out;
}

TEST(TimelineProcessTest, TheServersTimelineHoldsAStepsEventsInOrder) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("zs-timeline-" + std::to_string(getpid()) + ".jsonl"))
                               .string();
  ServerProcessOptions o = TestServerOptions();
  o.args.push_back("--threads=2");
  o.args.push_back("--timeline=" + path);
  auto cluster = ServerCluster::Start(1, o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto client = client::Client::Connect(TestClientOptions((*cluster)->addresses()));
  ASSERT_TRUE(client.ok()) << client.status();
  uint64_t blocks = 0;
  for (bool speculative : {false, true}) {
    v1::JobSpec spec = TestSpec(speculative ? "spec" : "plain", 1, v1::DTYPE_FP32, v1::DTYPE_FP32);
    spec.set_speculative_step(speculative);
    auto job = (*client)->RegisterJob(spec);
    ASSERT_TRUE(job.ok()) << job.status();
    const Layout& layout = (*job)->layout();
    blocks = layout.num_blocks();
    if (speculative) { ASSERT_TRUE((*job)->StepAhead(0, 1e-2f, 1.0f).ok()); }
    std::vector<float> g = NodeGradient(layout, 0, 0);
    ASSERT_TRUE((*job)->Push(0, 0, {0, layout.used_elems}, g.data(), v1::DTYPE_FP32).ok());
    ASSERT_TRUE((*job)->GradStats(0).ok());
    ASSERT_TRUE((*job)->Step(0, 1e-2f, 1.0f, false).ok());
    std::vector<float> w(layout.used_elems);
    ASSERT_TRUE((*job)->Gather(1, {0, layout.used_elems}, w.data(), v1::DTYPE_FP32).ok());
  }
  ASSERT_TRUE((*cluster)->StopAll().ok());  // the file is written at shutdown

  const std::vector<Event> events = Read(path);
  std::filesystem::remove(path);
  ASSERT_FALSE(events.empty());
  // Per job, in the order they ran: the plain job's events come before the
  // speculative job's first fold.
  std::vector<const Event*> steps;
  std::map<std::string, int> count;
  for (const Event& e : events) {
    ++count[e.what];
    if (e.what.rfind("step_", 0) == 0) steps.push_back(&e);
  }
  // One Step per job with its phases in order, and every block of each
  // job folded before its Step had its gradients (a node's fp32 pieces
  // land in place: fold_end alone; its pieces end at block and tensor
  // edges, so a block may have several).
  ASSERT_EQ(steps.size(), 6u);
  for (size_t job = 0; job < 2; ++job) {
    std::set<int64_t> folded_blocks;
    for (const Event& e : events) {
      if (e.what == "fold_end" && e.t < steps[3 * job + 1]->t && (job == 0 || e.t > steps[2]->t)) {
        folded_blocks.insert(e.a);
      }
    }
    EXPECT_EQ(folded_blocks.size(), blocks) << "job " << job;
  }
  for (size_t job = 0; job < 2; ++job) {
    EXPECT_EQ(steps[3 * job]->what, "step_begin");
    EXPECT_EQ(steps[3 * job + 1]->what, "step_gradients_in");
    EXPECT_EQ(steps[3 * job + 2]->what, "step_end");
    for (size_t k = 0; k < 3; ++k) EXPECT_EQ(steps[3 * job + k]->a, 0);
    EXPECT_LE(steps[3 * job]->t, steps[3 * job + 2]->t);
  }
  // Gather pieces of version 1, none before the first Step had its
  // gradients.
  EXPECT_GE(count["gather_piece"], 2 * static_cast<int>(blocks));
  for (const Event& e : events) {
    if (e.what != "gather_piece") continue;
    EXPECT_EQ(e.b, 1);
    EXPECT_GT(e.t, steps[1]->t);
  }
  // Speculations: only the speculative job's (after the plain Step), each
  // block at most once, begun after its fold and ended before the Step's
  // answer.
  std::map<int64_t, int64_t> begun, folded;
  for (const Event& e : events) {
    if (e.what == "fold_end" && e.t > steps[2]->t) folded[e.a] = e.t;
    if (e.what == "speculate_begin") {
      EXPECT_GT(e.t, steps[2]->t);
      ASSERT_TRUE(folded.count(e.a)) << "block " << e.a << " speculated before its fold";
      EXPECT_TRUE(begun.emplace(e.a, e.t).second) << "block " << e.a << " speculated twice";
    }
    if (e.what == "speculate_end") {
      ASSERT_TRUE(begun.count(e.a)) << "block " << e.a;
      EXPECT_LE(e.t, steps[5]->t);
    }
  }
  EXPECT_EQ(count["speculate_begin"], count["speculate_end"]);
}

}  // namespace
}  // namespace zerostate::testing
