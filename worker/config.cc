#include "worker/config.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "trainer/policy_config.h"
#include "worker/ds_config.h"

namespace zerostate::worker {
namespace {

absl::Status Invalid(const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

// Keeps the first error the text parser reports, with its position.
class FirstError : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (error_.empty()) error_ = absl::StrCat("line ", line + 1, ":", column + 1, ": ", message);
  }
  const std::string& error() const { return error_; }

 private:
  std::string error_;
};

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

absl::Status NormalizeModel(v1::MlpConfig* m) {
  if (m->input_dim() == 0) m->set_input_dim(32);
  if (m->output_dim() == 0) m->set_output_dim(8);
  if (m->hidden_size() == 0) {
    m->add_hidden(64);
    m->add_hidden(64);
  }
  for (int i = 0; i < m->hidden_size(); ++i) {
    if (m->hidden(i) == 0) return Invalid(absl::StrCat("train.model.hidden[", i, "]"), "must be >= 1");
  }
  if (m->activation() == v1::ACTIVATION_UNSPECIFIED) m->set_activation(v1::ACTIVATION_GELU);
  if (!v1::Activation_IsValid(m->activation())) return Invalid("train.model.activation", "unknown");
  if (m->data_seed() == 0) m->set_data_seed(1);
  return absl::OkStatus();
}

v1::DType DefaultGradDType(v1::Precision p) {
  switch (p) {
    case v1::PRECISION_BF16: return v1::DTYPE_BF16;
    case v1::PRECISION_FP16: return v1::DTYPE_FP16;
    default: return v1::DTYPE_FP32;
  }
}

absl::Status NormalizePrecision(v1::TrainConfig* t) {
  if (t->precision() == v1::PRECISION_UNSPECIFIED) t->set_precision(v1::PRECISION_FP32);
  if (!v1::Precision_IsValid(t->precision())) return Invalid("train.precision", "unknown");
  if (t->grad_dtype() == v1::DTYPE_UNSPECIFIED) t->set_grad_dtype(DefaultGradDType(t->precision()));
  if (t->weight_dtype() == v1::DTYPE_UNSPECIFIED) t->set_weight_dtype(v1::DTYPE_FP32);
  if (!v1::DType_IsValid(t->grad_dtype())) return Invalid("train.grad_dtype", "unknown");
  if (!v1::DType_IsValid(t->weight_dtype())) return Invalid("train.weight_dtype", "unknown");
  if (t->grad_dtype() == v1::DTYPE_FP16 && t->precision() != v1::PRECISION_FP16) {
    return Invalid("train.grad_dtype", "FP16 gradients need precision FP16 (loss scaling)");
  }
  // The built-in MLP computes fp32 gradients and sums them in fp32; a
  // lower dtype asked for would be silently ignored.
  if (t->grad_accum_dtype() == v1::DTYPE_UNSPECIFIED) t->set_grad_accum_dtype(v1::DTYPE_FP32);
  if (t->grad_accum_dtype() != v1::DTYPE_FP32) {
    return Invalid("train.grad_accum_dtype",
                   "zerostate-worker's MLP sums its fp32 gradients in fp32: give DTYPE_FP32 "
                   "(ds_config data_types.grad_accum_dtype fp32) or leave it out");
  }
  return absl::OkStatus();
}

absl::Status NormalizeBatch(v1::TrainConfig* t, uint32_t world_size) {
  if (t->micro_batch_size() == 0) t->set_micro_batch_size(16);
  if (t->grad_accum_steps() == 0) t->set_grad_accum_steps(1);
  uint64_t global = uint64_t{t->micro_batch_size()} * t->grad_accum_steps() * world_size;
  if (t->global_batch_size() != 0 && t->global_batch_size() != global) {
    return Invalid("train.global_batch_size",
                   absl::StrCat(t->global_batch_size(), " != micro_batch_size ", t->micro_batch_size(),
                                " * grad_accum_steps ", t->grad_accum_steps(), " * world size ",
                                world_size));
  }
  t->set_global_batch_size(global);
  return absl::OkStatus();
}

absl::Status NormalizeTrain(v1::TrainConfig* t, uint32_t world_size) {
  if (t->job_id().empty()) t->set_job_id("mlp");
  if (t->steps() == 0) t->set_steps(100);
  if (t->seed() == 0) t->set_seed(1);
  if (t->optimizer().kind() == v1::OPTIMIZER_UNSPECIFIED) t->mutable_optimizer()->set_kind(v1::OPTIMIZER_ADAMW);
  if (!v1::MomentFormat_IsValid(t->moment_format())) {
    return Invalid("train.moment_format", absl::StrCat(t->moment_format(), " is not one of "
                                                       "MOMENTS_FP32, MOMENTS_BF16, MOMENTS_INT8"));
  }
  if (auto s = NormalizeModel(t->mutable_model()); !s.ok()) return s;
  if (auto s = NormalizeBatch(t, world_size); !s.ok()) return s;
  if (auto s = NormalizePrecision(t); !s.ok()) return s;
  // The step policy's fields, by its own rules (clipping, schedule, loss scaling).
  if (auto s = trainer::NormalizePolicyConfig(t); !s.ok()) return s;
  if (t->delayed_update().enabled() && t->precision() == v1::PRECISION_FP16) {
    return Invalid("train.delayed_update.enabled",
                   "not with PRECISION_FP16 (the loss scale of step t depends on step t-1's "
                   "overflow check, which a delayed update has not made yet); use bf16 or fp32");
  }
  if (t->delayed_update().enabled() && t->speculative_step()) {
    return Invalid("train.delayed_update.enabled",
                   "not with train.speculative_step (its parameters go ahead of each step's "
                   "gradients, and so of a delayed Step still in flight); choose one");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::WorkerConfig> ParseTextConfig(const std::string& text) {
  google::protobuf::TextFormat::Parser parser;
  FirstError errors;
  parser.RecordErrorsTo(&errors);
  v1::WorkerConfig config;
  if (!parser.ParseFromString(text, &config)) return absl::InvalidArgumentError(errors.error());
  return config;
}

absl::StatusOr<LoadedConfig> LoadConfigFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<LoadedConfig> loaded;
  if (EndsWith(path, ".json")) {
    loaded = ParseDeepSpeedConfig(text.str());
  } else {
    auto parsed = ParseTextConfig(text.str());
    if (parsed.ok()) loaded = LoadedConfig{*std::move(parsed), {}};
    else loaded = parsed.status();
  }
  if (!loaded.ok()) {
    return absl::Status(loaded.status().code(), absl::StrCat(path, ": ", loaded.status().message()));
  }
  return loaded;
}

absl::StatusOr<std::string> WorkerJobToken(const std::string& from_env, uint32_t world,
                                           uint32_t ranks_here) {
  if (!from_env.empty()) return from_env;
  if (ranks_here < world) {
    return absl::InvalidArgumentError(absl::StrCat(
        kJobTokenEnv, ": not set, and ", world - ranks_here,
        " ranks run in other processes: give every worker the same job token "
        "(e.g. ", kJobTokenEnv, "=$(openssl rand -hex 32))"));
  }
  unsigned char bytes[32];
  std::ifstream urandom("/dev/urandom", std::ios::binary);
  if (!urandom.read(reinterpret_cast<char*>(bytes), sizeof(bytes))) {
    return absl::InternalError("/dev/urandom: cannot read a job token");
  }
  std::string hex;
  for (unsigned char b : bytes) absl::StrAppend(&hex, absl::Hex(b, absl::kZeroPad2));
  return hex;
}

std::string RendezvousScope(const v1::WorkerConfig& config) {
  return absl::StrCat(config.train().job_id(), "@", config.cluster().run_id());
}

absl::StatusOr<v1::WorkerConfig> NormalizeConfig(const v1::WorkerConfig& in, uint32_t world_size) {
  if (world_size == 0) return Invalid("world_size", "must be >= 1");
  v1::WorkerConfig c = in;
  if (auto s = ApplyWireConfig(&c); !s.ok()) return s;
  if (auto s = NormalizeTrain(c.mutable_train(), world_size); !s.ok()) return s;
  auto* cl = c.mutable_cluster();
  if (cl->metrics_port() == 0) cl->set_metrics_port(9470);
  if (cl->metrics_port() > 65535) return Invalid("cluster.metrics_port", "must be <= 65535");
  if (cl->metrics_host().empty()) cl->set_metrics_host("127.0.0.1");
  if (cl->rpc_timeout_ms() == 0) cl->set_rpc_timeout_ms(60000);
  if (cl->run_id().empty()) cl->set_run_id("0");
  return c;
}

}  // namespace zerostate::worker
