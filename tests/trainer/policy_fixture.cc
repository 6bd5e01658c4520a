#include "tests/trainer/policy_fixture.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace zerostate::trainer {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

double Number(const Struct& s, const std::string& key) {
  auto it = s.fields().find(key);
  if (it == s.fields().end()) {
    ADD_FAILURE() << "fixture: '" << key << "' missing";
    return 0;
  }
  return it->second.number_value();
}

PolicySequence::Step StepOf(const Struct& s) {
  PolicySequence::Step step;
  step.sum_squares = Number(s, "sum_squares");
  step.nonfinite = static_cast<uint64_t>(Number(s, "nonfinite"));
  step.expect.skip = s.fields().at("skip").bool_value();
  step.expect.grad_norm = Number(s, "grad_norm");
  step.expect.clip_factor = Number(s, "clip_factor");
  step.expect.grad_scale = static_cast<float>(Number(s, "grad_scale"));
  step.expect.lr = static_cast<float>(Number(s, "lr"));
  step.expect.next_loss_scale = static_cast<float>(Number(s, "next_loss_scale"));
  step.why = s.fields().at("why").string_value();
  return step;
}

void ExpectNear(double got, double want, double relative, const std::string& what, size_t step,
                const std::string& why) {
  EXPECT_LE(std::abs(got - want), relative * std::abs(want))
      << "step " << step << " " << what << ": got " << got << ", want " << want << " (" << why
      << ")";
}

}  // namespace

PolicySequence LoadPolicySequence() {
  PolicySequence out;
  const std::string path =
      std::string(ZEROSTATE_SOURCE_DIR) + "/tests/trainer/testdata/fp16_hysteresis2.json";
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  Struct doc;
  if (!file || !google::protobuf::util::JsonStringToMessage(text.str(), &doc).ok()) {
    ADD_FAILURE() << "cannot read " << path;
    return out;
  }
  std::string train;
  (void)google::protobuf::util::MessageToJsonString(doc.fields().at("train"), &train);
  if (!google::protobuf::util::JsonStringToMessage(train, &out.train).ok()) {
    ADD_FAILURE() << path << ": 'train' is not a TrainConfig: " << train;
  }
  out.average_over = Number(doc, "average_over");
  for (const Value& v : doc.fields().at("restore_after").list_value().values()) {
    out.restore_after.push_back(static_cast<uint64_t>(v.number_value()));
  }
  for (const Value& v : doc.fields().at("steps").list_value().values()) {
    out.steps.push_back(StepOf(v.struct_value()));
  }
  return out;
}

void ExpectDecision(const PolicySequence::Step& want, size_t step, const StepDecision& got) {
  const StepDecision& w = want.expect;
  EXPECT_EQ(got.skip, w.skip) << "step " << step << " (" << want.why << ")";
  EXPECT_EQ(got.next_loss_scale, w.next_loss_scale) << "step " << step << " (" << want.why << ")";
  ExpectNear(got.grad_norm, w.grad_norm, 1e-12, "grad_norm", step, want.why);
  ExpectNear(got.clip_factor, w.clip_factor, 1e-12, "clip_factor", step, want.why);
  ExpectNear(got.grad_scale, w.grad_scale, 1e-6, "grad_scale", step, want.why);
  ExpectNear(got.lr, w.lr, 1e-6, "lr", step, want.why);
}

}  // namespace zerostate::trainer
