#include "common/job_spec.h"

#include <algorithm>
#include <cmath>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "common/field_limits.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/util/message_differencer.h"
#include "google/protobuf/util/field_comparator.h"

namespace zerostate {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

bool IsWireDType(v1::DType d) {
  return d == v1::DTYPE_FP32 || d == v1::DTYPE_BF16 || d == v1::DTYPE_FP16;
}

absl::Status CheckFinite(absl::string_view field, float value) {
  if (!std::isfinite(value)) return Invalid(field, "must be finite");
  return absl::OkStatus();
}

absl::Status NormalizeOptimizer(v1::OptimizerConfig* opt) {
  switch (opt->kind()) {
    case v1::OPTIMIZER_ADAMW:
    case v1::OPTIMIZER_ADAM:
      if (opt->beta1() == 0) opt->set_beta1(0.9f);
      if (opt->beta2() == 0) opt->set_beta2(0.999f);
      if (opt->eps() == 0) opt->set_eps(1e-8f);
      break;
    case v1::OPTIMIZER_LION:
      if (opt->beta1() == 0) opt->set_beta1(0.9f);
      if (opt->beta2() == 0) opt->set_beta2(0.99f);
      break;
    case v1::OPTIMIZER_SGD_MOMENTUM:
      if (opt->momentum() == 0) opt->set_momentum(0.9f);
      break;
    default:
      return Invalid("optimizer.kind",
                     absl::StrCat("unknown optimizer ", static_cast<int>(opt->kind()),
                                  "; expected ADAMW, ADAM, SGD_MOMENTUM or LION"));
  }
  for (auto [name, v] : {std::pair{"optimizer.beta1", opt->beta1()},
                         std::pair{"optimizer.beta2", opt->beta2()},
                         std::pair{"optimizer.momentum", opt->momentum()}}) {
    if (!(v >= 0.0f && v < 1.0f)) return Invalid(name, absl::StrCat(v, " is not in [0, 1)"));
  }
  if (auto s = CheckFinite("optimizer.eps", opt->eps()); !s.ok()) return s;
  if (opt->eps() < 0) return Invalid("optimizer.eps", "must be >= 0");
  if (!(opt->weight_decay() >= 0.0f && std::isfinite(opt->weight_decay()))) {
    return Invalid("optimizer.weight_decay", "must be finite and >= 0");
  }
  return absl::OkStatus();
}

absl::Status CheckTensor(const v1::TensorSpec& t, size_t i, uint64_t* numel) {
  std::string field = absl::StrCat("tensors[", i, "]");
  if (t.name().empty()) return Invalid(absl::StrCat(field, ".name"), "must not be empty");
  if (auto s = CheckLength(absl::StrCat(field, ".name"), t.name(), kMaxNameBytes); !s.ok()) {
    return s;
  }
  if (t.shape_size() == 0) return Invalid(absl::StrCat(field, ".shape"), "must have a dimension");
  uint64_t n = 1;
  for (int d = 0; d < t.shape_size(); ++d) {
    int64_t dim = t.shape(d);
    if (dim < 1) {
      return Invalid(absl::StrCat(field, ".shape[", d, "]"), absl::StrCat(dim, " must be >= 1"));
    }
    if (static_cast<uint64_t>(dim) > kMaxTotalElems / n) {
      return Invalid(absl::StrCat(field, ".shape"), "too many elements");
    }
    n *= static_cast<uint64_t>(dim);
  }
  if (!v1::InitKind_IsValid(t.init())) return Invalid(absl::StrCat(field, ".init"), "unknown");
  if (!std::isfinite(t.init_scale()) || t.init_scale() < 0) {
    return Invalid(absl::StrCat(field, ".init_scale"), "must be finite and >= 0");
  }
  *numel = n;
  return absl::OkStatus();
}

bool TakesBetas(v1::OptimizerKind kind) {
  return kind == v1::OPTIMIZER_ADAMW || kind == v1::OPTIMIZER_ADAM || kind == v1::OPTIMIZER_LION;
}

// Checks group i's hyper-parameters and fills in the ones it leaves unset.
absl::Status NormalizeGroupValues(const v1::OptimizerConfig& opt, int i, v1::TensorGroup* g) {
  const std::string field = absl::StrCat("groups[", i, "]");
  if (!g->has_weight_decay()) g->set_weight_decay(opt.weight_decay());
  if (!(g->weight_decay() >= 0.0f && std::isfinite(g->weight_decay()))) {
    return Invalid(absl::StrCat(field, ".weight_decay"),
                   absl::StrCat(g->weight_decay(), " must be finite and >= 0"));
  }
  if (!g->has_lr_scale()) g->set_lr_scale(1.0f);
  if (!(g->lr_scale() > 0.0f && std::isfinite(g->lr_scale()))) {
    return Invalid(absl::StrCat(field, ".lr_scale"),
                   absl::StrCat(g->lr_scale(), " must be finite and > 0"));
  }
  if (!TakesBetas(opt.kind())) {
    for (auto [name, has] : {std::pair{".beta1", g->has_beta1()}, std::pair{".beta2", g->has_beta2()}}) {
      if (has) {
        return Invalid(absl::StrCat(field, name),
                       absl::StrCat(v1::OptimizerKind_Name(opt.kind()),
                                    " has no betas; only ADAMW, ADAM and LION take them"));
      }
    }
    return absl::OkStatus();
  }
  if (!g->has_beta1()) g->set_beta1(opt.beta1());
  if (!g->has_beta2()) g->set_beta2(opt.beta2());
  for (auto [name, v] : {std::pair{".beta1", g->beta1()}, std::pair{".beta2", g->beta2()}}) {
    if (!(v >= 0.0f && v < 1.0f)) {
      return Invalid(absl::StrCat(field, name), absl::StrCat(v, " is not in [0, 1)"));
    }
  }
  return absl::OkStatus();
}

// Checks that every group names existing tensors, each in one group at
// most, and normalizes each group's values. REQUIRES: tensors and optimizer
// checked and normalized.
absl::Status NormalizeGroups(v1::JobSpec* spec) {
  if (spec->groups_size() > spec->tensors_size()) {
    return Invalid("groups", absl::StrCat(spec->groups_size(), " groups for ",
                                          spec->tensors_size(),
                                          " tensors; a tensor is in one group at most"));
  }
  absl::flat_hash_map<std::string, int> group_of;  // tensor name -> its group, -1: none yet
  for (const v1::TensorSpec& t : spec->tensors()) group_of[t.name()] = -1;
  for (int i = 0; i < spec->groups_size(); ++i) {
    const v1::TensorGroup& g = spec->groups(i);
    for (int j = 0; j < g.tensors_size(); ++j) {
      const std::string field = absl::StrCat("groups[", i, "].tensors[", j, "]");
      auto it = group_of.find(g.tensors(j));
      if (it == group_of.end()) {
        return Invalid(field, absl::StrCat("no tensor is named '", g.tensors(j), "'"));
      }
      if (it->second != -1) {
        return Invalid(field, absl::StrCat("tensor '", g.tensors(j), "' is already in groups[",
                                           it->second, "]; a tensor is in one group at most"));
      }
      it->second = i;
    }
    if (auto s = NormalizeGroupValues(spec->optimizer(), i, spec->mutable_groups(i)); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateJobId(const std::string& id) {
  // The id is not echoed when too long: a 100 MB id made a status that
  // could not be delivered.
  if (id.empty() || id.size() > kMaxJobIdBytes) {
    return Invalid("job_id", absl::StrCat("must be 1 to ", kMaxJobIdBytes, " characters, not ",
                                          id.size(), " bytes"));
  }
  for (size_t i = 0; i < id.size(); ++i) {
    char c = id[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (ok) continue;
    // The whole UTF-8 sequence of a non-ASCII character, escaped: its first
    // byte alone is not a character, and raw bytes may not print.
    size_t len = 1;
    auto lead = static_cast<unsigned char>(c);
    if (lead >= 0xC0) len = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
    return Invalid("job_id", absl::StrCat("character \"", absl::CHexEscape(id.substr(i, len)),
                                          "\" at byte ", i, " is not in [A-Za-z0-9._-]"));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::JobSpec> NormalizeJobSpec(const v1::JobSpec& in) {
  v1::JobSpec spec = in;
  if (auto s = ValidateJobId(spec.job_id()); !s.ok()) return s;
  if (spec.tensors_size() == 0) return Invalid("tensors", "a job needs at least one tensor");
  if (static_cast<size_t>(spec.tensors_size()) > kMaxTensors) return Invalid("tensors", "too many");
  uint64_t total = 0;
  absl::flat_hash_set<std::string> names;
  for (int i = 0; i < spec.tensors_size(); ++i) {
    uint64_t numel = 0;
    if (auto s = CheckTensor(spec.tensors(i), i, &numel); !s.ok()) return s;
    if (!names.insert(spec.tensors(i).name()).second) {
      return Invalid(absl::StrCat("tensors[", i, "].name"),
                     absl::StrCat("duplicate name '", spec.tensors(i).name(), "'"));
    }
    total += numel + kTensorAlignElems;
    if (total > kMaxTotalElems) return Invalid("tensors", "more than 2^40 elements in all");
  }
  if (spec.num_nodes() < 1) return Invalid("num_nodes", "must be >= 1");
  if (spec.num_nodes() > 65536) return Invalid("num_nodes", "must be <= 65536");
  if (!IsWireDType(spec.grad_dtype())) return Invalid("grad_dtype", "must be FP32, BF16 or FP16");
  if (!IsWireDType(spec.weight_dtype())) {
    return Invalid("weight_dtype", "must be FP32, BF16 or FP16");
  }
  if (spec.block_elems() == 0) spec.set_block_elems(kDefaultBlockElems);
  if (spec.block_elems() % kTensorAlignElems != 0 || spec.block_elems() > kMaxBlockElems) {
    return Invalid("block_elems", absl::StrCat(spec.block_elems(), " must be a multiple of ",
                                               kTensorAlignElems, " and at most ", kMaxBlockElems));
  }
  if (auto s = NormalizeOptimizer(spec.mutable_optimizer()); !s.ok()) return s;
  if (auto s = CheckMomentFormat(spec.moment_format()); !s.ok()) return s;
  if (!v1::WireFormat_IsValid(spec.gradient_wire())) {
    return Invalid("gradient_wire",
                   absl::StrCat(spec.gradient_wire(), " is not one of WIRE_PLAIN, WIRE_INT8"));
  }
  if (!v1::WireFormat_IsValid(spec.weight_wire())) {
    return Invalid("weight_wire",
                   absl::StrCat(spec.weight_wire(), " is not one of WIRE_PLAIN, WIRE_INT8"));
  }
  if (auto s = NormalizeGroups(&spec); !s.ok()) return s;
  if (spec.speculative_step() && spec.tier() != v1::TIER_RAM) {
    // Speculation keeps a copy of every stepped block's state in RAM, which
    // is what the NVMe tier exists to avoid.
    return Invalid("speculative_step", "needs tier TIER_RAM (it keeps each block's previous "
                                       "state in RAM until its Step)");
  }
  return spec;
}

absl::Status CheckMomentFormat(int format) {
  if (v1::MomentFormat_IsValid(format)) return absl::OkStatus();
  return Invalid("moment_format", absl::StrCat(format, " is not one of MOMENTS_FP32, MOMENTS_BF16, "
                                               "MOMENTS_INT8"));
}

absl::Status CheckReplicas(const v1::JobSpec& spec, size_t num_servers) {
  if (spec.replicas() < num_servers) return absl::OkStatus();
  return Invalid("replicas", absl::StrCat(spec.replicas(), " backups of each shard need at least ",
                                          uint64_t{spec.replicas()} + 1, " servers; the job has ",
                                          num_servers, " (a shard's copies are on distinct servers)"));
}

Layout LayoutOf(const v1::JobSpec& spec) {
  Layout layout;
  layout.block_elems = spec.block_elems();
  absl::flat_hash_map<std::string, uint32_t> group_of;
  for (int i = 0; i < spec.groups_size(); ++i) {
    for (const std::string& name : spec.groups(i).tensors()) group_of[name] = i + 1;
  }
  uint64_t pos = 0;
  for (const auto& t : spec.tensors()) {
    TensorSlot slot;
    slot.name = t.name();
    slot.shape.assign(t.shape().begin(), t.shape().end());
    slot.numel = 1;
    for (int64_t d : slot.shape) slot.numel *= static_cast<uint64_t>(d);
    slot.offset = pos;
    slot.init = t.init();
    slot.init_scale = t.init_scale();
    if (auto it = group_of.find(t.name()); it != group_of.end()) slot.group = it->second;
    pos += (slot.numel + kTensorAlignElems - 1) / kTensorAlignElems * kTensorAlignElems;
    layout.tensors.push_back(std::move(slot));
  }
  layout.used_elems = pos;
  uint64_t b = layout.block_elems;
  layout.total_elems = std::max<uint64_t>(1, (pos + b - 1) / b) * b;
  return layout;
}

std::vector<std::pair<uint32_t, uint32_t>> TensorElements(const Layout& layout, uint64_t begin,
                                                          uint64_t end) {
  std::vector<std::pair<uint32_t, uint32_t>> out;
  // The first tensor that ends after `begin` (offsets grow with the index).
  auto it = std::partition_point(layout.tensors.begin(), layout.tensors.end(),
                                 [begin](const TensorSlot& t) { return t.offset + t.numel <= begin; });
  for (; it != layout.tensors.end() && it->offset < end; ++it) {
    const uint64_t first = std::max(it->offset, begin);
    const uint64_t last = std::min(it->offset + it->numel, end);
    if (first < last) out.emplace_back(first - begin, last - begin);
  }
  return out;
}

std::vector<GroupRun> GroupRuns(const Layout& layout, uint64_t begin, uint64_t end) {
  const auto n = static_cast<uint32_t>(end - begin);
  std::vector<GroupRun> runs;
  auto it = std::partition_point(layout.tensors.begin(), layout.tensors.end(),
                                 [begin](const TensorSlot& t) { return t.offset + t.numel <= begin; });
  for (; it != layout.tensors.end() && it->offset < end; ++it) {
    if (!runs.empty() && runs.back().group == it->group) continue;
    const auto first = static_cast<uint32_t>(it->offset > begin ? it->offset - begin : 0);
    if (!runs.empty()) runs.back().end = first;
    runs.push_back(GroupRun{first, n, it->group});
  }
  if (runs.empty()) runs.push_back(GroupRun{0, n, kNoGroup});
  runs.front().begin = 0;
  return runs;
}

std::string FirstDifference(const v1::JobSpec& a, const v1::JobSpec& b) {
  std::string report;
  bool equal = false;
  {
    // The reporter flushes into `report` when the differencer goes away.
    google::protobuf::util::MessageDifferencer diff;
    diff.ReportDifferencesToString(&report);
    equal = diff.Compare(a, b);
  }
  if (equal) return "";
  // The report's first line reads like "modified: tensors[0].shape[1]: 30 -> 31".
  std::string first = report.substr(0, report.find('\n'));
  return first.empty() ? "the specs differ" : first;
}

size_t DTypeSize(v1::DType dtype) {
  switch (dtype) {
    case v1::DTYPE_FP32: return 4;
    case v1::DTYPE_BF16: return 2;
    case v1::DTYPE_FP16: return 2;
    case v1::DTYPE_INT8: return 1;  // the codes; a chunk adds its scales (int8_wire.h)
    default: return 0;
  }
}

const char* DTypeName(v1::DType dtype) {
  switch (dtype) {
    case v1::DTYPE_FP32: return "fp32";
    case v1::DTYPE_BF16: return "bf16";
    case v1::DTYPE_FP16: return "fp16";
    case v1::DTYPE_INT8: return "int8";
    default: return "unspecified";
  }
}

}  // namespace zerostate
