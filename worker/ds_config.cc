#include "worker/ds_config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace zerostate::worker {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Struct;
using DsConfig = v1::DeepSpeedConfig;

// DeepSpeed keys that tune logging, profiling or DeepSpeed's own
// communication; zerostate has its own way for each, so they are reported
// as ignored rather than refused.
constexpr const char* kHarmlessKeys[] = {
    "steps_per_print",
    "wall_clock_breakdown",
    "dump_state",
    "memory_breakdown",
    "prescale_gradients",
    "gradient_predivide_factor",
    "communication_data_type",
    "flops_profiler",
    "tensorboard",
    "wandb",
    "csv_monitor",
    "comms_logger",
    "zero_allow_untested_optimizer",
    "zero_force_ds_cpu_optimizer",
    "optimizer.params.torch_adam",
    "fp16.auto_cast",
    "fp16.consecutive_hysteresis",
    "zero_optimization.overlap_comm",
    "zero_optimization.contiguous_gradients",
    "zero_optimization.reduce_bucket_size",
    "zero_optimization.allgather_bucket_size",
    "zero_optimization.reduce_scatter",
    "zero_optimization.allgather_partitions",
    "zero_optimization.round_robin_gradients",
    "zero_optimization.offload_optimizer.pin_memory",
    "zero_optimization.offload_optimizer.buffer_count",
    "zero_optimization.offload_optimizer.fast_init",
    "zero_optimization.offload_param.pin_memory",
};

// Keys that place memory (where parameters, optimizer state and I/O
// buffers live, how ZeRO-3 partitions parameters): they do not change the
// training's math, and in zerostate the state servers' flags do their job.
// A key at or under one of these paths is ignored, with one warning per
// path naming those flags. docs/ds_config.md lists them.
struct PlacementKeys {
  const char* path;     // a key path, or a prefix ending in '_'
  const char* warning;  // what does its job in zerostate
};
constexpr PlacementKeys kPlacementKeys[] = {
    {"aio",
     "DeepSpeed's asynchronous NVMe I/O; the state servers' NVMe tier does that job: "
     "--nvme_queue_depth (blocks in flight per job), --nvme_dir (the drive), --nvme_cache_bytes"},
    {"zero_optimization.offload_param",
     "parameter offload; the trainers keep their working weights, and the master weights and "
     "optimizer state live on the state servers, in RAM or with --nvme_dir on their NVMe tier"},
    {"zero_optimization.stage3_",
     "ZeRO-3 parameter partitioning; the trainers keep whole working weights (as with stage 2)"},
    {"zero_optimization.sub_group_size",
     "ZeRO-3 optimizer sub-groups; the state servers step their shard in blocks "
     "(JobSpec.block_elems) with --threads"},
};

// The placement entry `path` falls under, or null.
const PlacementKeys* PlacementOf(const std::string& path) {
  for (const auto& p : kPlacementKeys) {
    std::string key = p.path;
    bool prefix = key.back() == '_';
    if (path == key || path.rfind(prefix ? key : key + ".", 0) == 0) return &p;
  }
  return nullptr;
}

void WarnPlacement(const PlacementKeys& p, std::vector<std::string>* warnings) {
  std::string w = absl::StrCat("ds_config '", p.path, p.path[std::strlen(p.path) - 1] == '_' ? "*" : "",
                               "': ", p.warning, "; ignored");
  if (std::find(warnings->begin(), warnings->end(), w) == warnings->end()) warnings->push_back(w);
}

absl::Status Invalid(const std::string& key, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(key, ": ", what));
}

bool IsHarmless(const std::string& path) {
  return std::find_if(std::begin(kHarmlessKeys), std::end(kHarmlessKeys),
                      [&](const char* k) { return path == k; }) != std::end(kHarmlessKeys);
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

const FieldDescriptor* FindField(const Descriptor* type, const std::string& key) {
  if (const FieldDescriptor* f = type->FindFieldByName(key)) return f;
  for (int i = 0; i < type->field_count(); ++i) {
    if (type->field(i)->json_name() == key) return type->field(i);
  }
  return nullptr;
}

// Copies into `clean` the keys of `in` that `type` knows, recursing into
// sub-objects; a harmless unknown key becomes a warning, any other an error.
absl::Status CheckKeys(const Struct& in, const Descriptor* type, const std::string& prefix,
                       Struct* clean, std::vector<std::string>* warnings) {
  std::vector<std::string> keys;
  for (const auto& kv : in.fields()) keys.push_back(kv.first);
  std::sort(keys.begin(), keys.end());  // a stable order for errors and warnings
  for (const std::string& key : keys) {
    const auto& value = in.fields().at(key);
    std::string path = prefix.empty() ? key : absl::StrCat(prefix, ".", key);
    if (const PlacementKeys* p = PlacementOf(path)) {
      WarnPlacement(*p, warnings);
      continue;
    }
    const FieldDescriptor* f = FindField(type, key);
    if (f == nullptr) {
      if (!IsHarmless(path)) return Invalid(path, "unsupported ds_config key");
      warnings->push_back(absl::StrCat("ds_config key '", path, "' has no effect in zerostate; ignored"));
      continue;
    }
    auto& out = (*clean->mutable_fields())[key];
    if (f->message_type() != nullptr && !f->is_repeated() && value.has_struct_value()) {
      auto s = CheckKeys(value.struct_value(), f->message_type(), path,
                         out.mutable_struct_value(), warnings);
      if (!s.ok()) return s;
    } else {
      out = value;
    }
  }
  return absl::OkStatus();
}

absl::Status MapOptimizer(const DsConfig::Optimizer& o, v1::TrainConfig* t) {
  auto* opt = t->mutable_optimizer();
  std::string type = Lower(o.type());
  const auto& p = o.params();
  if (type == "adam") {
    opt->set_kind(p.has_adam_w_mode() && !p.adam_w_mode() ? v1::OPTIMIZER_ADAM : v1::OPTIMIZER_ADAMW);
  } else if (type == "adamw") {
    opt->set_kind(v1::OPTIMIZER_ADAMW);
  } else if (type == "sgd") {
    opt->set_kind(v1::OPTIMIZER_SGD_MOMENTUM);
  } else if (type == "lion") {
    opt->set_kind(v1::OPTIMIZER_LION);
  } else {
    return Invalid("optimizer.type", absl::StrCat("'", o.type(), "' is not supported; use Adam, AdamW, SGD or Lion"));
  }
  if (p.betas_size() != 0 && p.betas_size() != 2) {
    return Invalid("optimizer.params.betas", absl::StrCat("expected 2 values, got ", p.betas_size()));
  }
  if (p.betas_size() == 2) {
    opt->set_beta1(p.betas(0));
    opt->set_beta2(p.betas(1));
  }
  if (p.eps() != 0) opt->set_eps(p.eps());
  if (p.weight_decay() != 0) opt->set_weight_decay(p.weight_decay());
  if (p.momentum() != 0) opt->set_momentum(p.momentum());
  if (p.nesterov()) opt->set_nesterov(true);
  if (p.lr() != 0) t->mutable_lr()->set_lr(p.lr());
  return absl::OkStatus();
}

absl::Status MapScheduler(const DsConfig::Scheduler& s, v1::TrainConfig* t,
                          std::vector<std::string>* warnings) {
  const auto& p = s.params();
  auto* lr = t->mutable_lr();
  if (s.type() != "WarmupLR" && s.type() != "WarmupDecayLR") {
    return Invalid("scheduler.type", absl::StrCat("'", s.type(), "' is not supported; use WarmupLR or WarmupDecayLR"));
  }
  if (p.warmup_type().empty()) {
    warnings->push_back("scheduler.params.warmup_type: DeepSpeed's default is 'log'; zerostate warms up linearly");
  } else if (p.warmup_type() != "linear") {
    return Invalid("scheduler.params.warmup_type", absl::StrCat("'", p.warmup_type(), "' is not supported; use 'linear'"));
  }
  lr->set_warmup_start_lr(p.warmup_min_lr());
  if (p.warmup_max_lr() != 0) lr->set_lr(p.warmup_max_lr());
  lr->set_warmup_steps(p.warmup_num_steps());
  lr->set_decay(v1::LR_DECAY_NONE);
  if (s.type() == "WarmupDecayLR") {
    if (p.total_num_steps() <= p.warmup_num_steps()) {
      return Invalid("scheduler.params.total_num_steps", "must be > warmup_num_steps");
    }
    lr->set_decay(v1::LR_DECAY_LINEAR);
    lr->set_decay_steps(p.total_num_steps() - p.warmup_num_steps());
    lr->set_min_lr(0);
  }
  return absl::OkStatus();
}

absl::Status MapPrecision(const DsConfig& ds, v1::TrainConfig* t) {
  if (ds.fp16().enabled() && ds.bf16().enabled()) {
    return Invalid("fp16.enabled", "fp16 and bf16 cannot both be enabled");
  }
  if (ds.bf16().enabled()) t->set_precision(v1::PRECISION_BF16);
  if (!ds.fp16().enabled()) return absl::OkStatus();
  const auto& f = ds.fp16();
  t->set_precision(v1::PRECISION_FP16);
  auto* ls = t->mutable_loss_scaling();
  if (f.loss_scale() < 0 || !std::isfinite(f.loss_scale())) {
    return Invalid("fp16.loss_scale", "must be finite and >= 0 (0 = dynamic)");
  }
  if (f.initial_scale_power() > 63) return Invalid("fp16.initial_scale_power", "must be <= 63");
  ls->set_static_scale(f.loss_scale() > 0);
  ls->set_initial_scale(f.loss_scale() > 0 ? f.loss_scale()
                                           : std::ldexp(1.0f, f.initial_scale_power() ? f.initial_scale_power() : 16));
  ls->set_growth_interval(f.loss_scale_window() ? f.loss_scale_window() : 1000);
  ls->set_hysteresis(f.hysteresis() ? f.hysteresis() : 2);
  ls->set_min_scale(f.min_loss_scale() ? f.min_loss_scale() : 1.0f);
  return absl::OkStatus();
}

// data_types.grad_accum_dtype: DeepSpeed's names of a dtype (its DtypeEnum).
absl::Status MapDataTypes(const DsConfig::DataTypes& d, v1::TrainConfig* t) {
  static const std::pair<const char*, v1::DType> kNames[] = {
      {"fp32", v1::DTYPE_FP32}, {"float32", v1::DTYPE_FP32}, {"float", v1::DTYPE_FP32},
      {"torch.float32", v1::DTYPE_FP32}, {"bf16", v1::DTYPE_BF16}, {"bfloat16", v1::DTYPE_BF16},
      {"torch.bfloat16", v1::DTYPE_BF16}, {"fp16", v1::DTYPE_FP16}, {"float16", v1::DTYPE_FP16},
      {"half", v1::DTYPE_FP16}, {"torch.float16", v1::DTYPE_FP16}};
  if (d.grad_accum_dtype().empty()) return absl::OkStatus();
  for (const auto& [name, dtype] : kNames) {
    if (Lower(d.grad_accum_dtype()) == name) {
      t->set_grad_accum_dtype(dtype);
      return absl::OkStatus();
    }
  }
  return Invalid("data_types.grad_accum_dtype",
                 absl::StrCat("'", d.grad_accum_dtype(), "' is not one of fp32, bf16, fp16"));
}

absl::Status MapZero(const DsConfig::ZeroOptimization& z, std::vector<std::string>* warnings) {
  if (z.stage() > 3) return Invalid("zero_optimization.stage", absl::StrCat(z.stage(), " is not a ZeRO stage (0 to 3)"));
  if (z.stage() == 3) {
    warnings->push_back(
        "zero_optimization.stage: 3 requested; zerostate partitions gradients and optimizer state over the "
        "state servers, and the trainers keep whole working weights (as with stage 2): the same math, more "
        "GPU memory per trainer than DeepSpeed's stage 3");
  }
  if (z.stage() == 0) {
    warnings->push_back("zero_optimization.stage: 0 requested; zerostate always partitions and offloads optimizer state");
  }
  const std::string& oo = z.offload_optimizer().device();
  if (oo == "nvme" || !z.offload_optimizer().nvme_path().empty()) {
    warnings->push_back(
        "zero_optimization.offload_optimizer: the NVMe tier is a state server setting (--nvme_dir, "
        "--nvme_queue_depth; a job's tier is JobSpec.tier); nvme_path ignored");
  } else if (!oo.empty() && oo != "cpu" && oo != "none") {
    return Invalid("zero_optimization.offload_optimizer.device", absl::StrCat("'", oo, "' is not one of none, cpu, nvme"));
  }
  return absl::OkStatus();
}

absl::Status MapAll(const DsConfig& ds, const Struct& keys, LoadedConfig* out) {
  v1::TrainConfig* t = out->config.mutable_train();
  if (ds.train_micro_batch_size_per_gpu() != 0) t->set_micro_batch_size(ds.train_micro_batch_size_per_gpu());
  if (ds.gradient_accumulation_steps() != 0) t->set_grad_accum_steps(ds.gradient_accumulation_steps());
  if (ds.train_batch_size() != 0) t->set_global_batch_size(ds.train_batch_size());
  if (keys.fields().contains("optimizer")) {
    if (auto s = MapOptimizer(ds.optimizer(), t); !s.ok()) return s;
  }
  if (keys.fields().contains("scheduler")) {
    if (auto s = MapScheduler(ds.scheduler(), t, &out->warnings); !s.ok()) return s;
  }
  if (auto s = MapPrecision(ds, t); !s.ok()) return s;
  if (ds.zero_optimization().has_delayed_update()) {
    *t->mutable_delayed_update() = ds.zero_optimization().delayed_update();
  }
  if (auto s = MapDataTypes(ds.data_types(), t); !s.ok()) return s;
  if (!v1::DType_IsValid(t->grad_accum_dtype())) {
    return Invalid("zerostate.train.grad_accum_dtype",
                   absl::StrCat(t->grad_accum_dtype(), " is not one of DTYPE_FP32, DTYPE_BF16, "
                                                       "DTYPE_FP16"));
  }
  if (!v1::MomentFormat_IsValid(t->moment_format())) {
    return Invalid("zerostate.train.moment_format",
                   absl::StrCat(t->moment_format(), " is not one of MOMENTS_FP32, MOMENTS_BF16, "
                                                    "MOMENTS_INT8"));
  }
  if (auto s = ApplyWireConfig(&out->config); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("zerostate.", s.message()));
  }
  if (!(ds.gradient_clipping() >= 0)) return Invalid("gradient_clipping", "must be >= 0");
  if (ds.gradient_clipping() != 0) t->set_gradient_clipping(ds.gradient_clipping());
  return MapZero(ds.zero_optimization(), &out->warnings);
}

}  // namespace

absl::StatusOr<v1::WireFormat> ParseWire(absl::string_view field, absl::string_view value) {
  if (value == "int8") return v1::WIRE_INT8;
  if (value == "plain") return v1::WIRE_PLAIN;
  return Invalid(std::string(field), absl::StrCat("'", value, "' is not one of int8, plain"));
}

absl::Status ApplyWireConfig(v1::WorkerConfig* c) {
  v1::TrainConfig* t = c->mutable_train();
  if (!c->wire().gradients().empty()) {
    auto w = ParseWire("wire.gradients", c->wire().gradients());
    if (!w.ok()) return w.status();
    t->set_gradient_wire(*w);
  }
  if (!c->wire().weights().empty()) {
    auto w = ParseWire("wire.weights", c->wire().weights());
    if (!w.ok()) return w.status();
    t->set_weight_wire(*w);
  }
  c->clear_wire();
  if (!v1::WireFormat_IsValid(t->gradient_wire())) {
    return Invalid("train.gradient_wire", absl::StrCat(t->gradient_wire(), " is unknown"));
  }
  if (!v1::WireFormat_IsValid(t->weight_wire())) {
    return Invalid("train.weight_wire", absl::StrCat(t->weight_wire(), " is unknown"));
  }
  return absl::OkStatus();
}

absl::StatusOr<LoadedConfig> ParseDeepSpeedConfig(const std::string& json) {
  Struct raw;
  auto parsed = google::protobuf::util::JsonStringToMessage(json, &raw);
  if (!parsed.ok()) return Invalid("ds_config", absl::StrCat("not a JSON object: ", parsed.message().as_string()));
  LoadedConfig out;
  Struct clean;
  if (auto s = CheckKeys(raw, DsConfig::descriptor(), "", &clean, &out.warnings); !s.ok()) return s;
  std::string clean_json;
  (void)google::protobuf::util::MessageToJsonString(clean, &clean_json);
  DsConfig ds;
  parsed = google::protobuf::util::JsonStringToMessage(clean_json, &ds);
  if (!parsed.ok()) return Invalid("ds_config", parsed.message().as_string());
  out.config = ds.zerostate();
  if (auto s = MapAll(ds, clean, &out); !s.ok()) return s;
  return out;
}

}  // namespace zerostate::worker
