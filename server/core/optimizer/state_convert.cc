#include "server/core/optimizer/state_convert.h"

#include <algorithm>
#include <cstring>

#include "common/simd_scalar.h"
#include "server/core/optimizer/optimizer.h"
#include "server/core/optimizer/step_loop.h"

namespace zerostate::server {
namespace {

using kernels::MomentCodec;
using Ops = simd::ScalarOps;

// A moment's codes and scales within a block's state.
struct MomentRef {
  void* codes;
  float* scales;
};

template <bool kSecond>
void DecodeTile(MomentFormat format, const MomentRef& m, size_t t, size_t n, float* x) {
  switch (format) {
    case MomentFormat::kBf16:
      return MomentCodec<Ops, MomentFormat::kBf16, kSecond>::Decode(m.codes, m.scales, t, n, x);
    case MomentFormat::kInt8:
      return MomentCodec<Ops, MomentFormat::kInt8, kSecond>::Decode(m.codes, m.scales, t, n, x);
    default:
      return MomentCodec<Ops, MomentFormat::kFp32, kSecond>::Decode(m.codes, m.scales, t, n, x);
  }
}

template <bool kSecond>
void EncodeTile(MomentFormat format, const float* x, size_t t, size_t n, const MomentRef& m) {
  switch (format) {
    case MomentFormat::kBf16:
      return MomentCodec<Ops, MomentFormat::kBf16, kSecond>::Encode(x, t, n, m.codes, m.scales);
    case MomentFormat::kInt8:
      return MomentCodec<Ops, MomentFormat::kInt8, kSecond>::Encode(x, t, n, m.codes, m.scales);
    default:
      return MomentCodec<Ops, MomentFormat::kFp32, kSecond>::Encode(x, t, n, m.codes, m.scales);
  }
}

template <bool kSecond>
void ConvertMoment(const StateLayout& fl, const MomentRef& from, const StateLayout& tl,
                   const MomentRef& to) {
  float tile[kQuantBlock];
  for (size_t t = 0; t < fl.block_elems; t += kQuantBlock) {
    const size_t n = std::min<size_t>(kQuantBlock, fl.block_elems - t);
    DecodeTile<kSecond>(fl.format, from, t, n, tile);
    EncodeTile<kSecond>(tl.format, tile, t, n, to);
  }
}

}  // namespace

void ConvertState(const StateLayout& fl, const float* from, const StateLayout& tl, float* to) {
  std::memset(to, 0, tl.total_floats() * sizeof(float));
  std::memcpy(to, from, size_t{fl.block_elems} * sizeof(float));
  const BlockRefs f = StateRefs(fl, const_cast<float*>(from)), t = StateRefs(tl, to);
  if (fl.moments >= 1) ConvertMoment<false>(fl, {f.m, f.m_scale}, tl, {t.m, t.m_scale});
  if (fl.moments >= 2) ConvertMoment<true>(fl, {f.v, f.v_scale}, tl, {t.v, t.v_scale});
}

}  // namespace zerostate::server
