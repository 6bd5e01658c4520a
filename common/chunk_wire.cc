#include "common/chunk_wire.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/convert.h"
#include "common/job_spec.h"

namespace zerostate {
namespace {

// Wire tags: (field number << 3) | wire type.
enum Tag : uint8_t {
  kJobId = (1 << 3) | 2,
  kStep = (2 << 3) | 0,
  kNode = (3 << 3) | 0,
  kBlock = (4 << 3) | 0,
  kOffset = (5 << 3) | 0,
  kDType = (6 << 3) | 0,
  kData = (7 << 3) | 2,
  kVersion = (8 << 3) | 0,
  kElems = (9 << 3) | 0,
};

void PutVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

// proto3: fields equal to their default are not written.
void PutUint(Tag tag, uint64_t v, std::string* out) {
  if (v == 0) return;
  out->push_back(static_cast<char>(tag));
  PutVarint(v, out);
}

// Reads bytes across a sequence of slices.
class SliceReader {
 public:
  explicit SliceReader(const std::vector<grpc::Slice>& slices) : slices_(slices) { Settle(); }
  bool AtEnd() const { return index_ == slices_.size(); }

  bool ReadByte(uint8_t* b) {
    if (AtEnd()) return false;
    *b = slices_[index_].begin()[pos_++];
    Settle();
    return true;
  }

  bool ReadVarint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b;
      if (!ReadByte(&b)) return false;
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }

  // Advances `n` bytes; records the spans passed over in `segments` if set.
  bool Skip(uint64_t n, std::vector<ChunkView::Segment>* segments) {
    while (n > 0) {
      if (AtEnd()) return false;
      size_t take = std::min<uint64_t>(n, slices_[index_].size() - pos_);
      if (segments) segments->push_back({slices_[index_].begin() + pos_, take});
      pos_ += take;
      n -= take;
      Settle();
    }
    return true;
  }

 private:
  // Moves past exhausted (or empty) slices.
  void Settle() {
    while (index_ < slices_.size() && pos_ == slices_[index_].size()) {
      ++index_;
      pos_ = 0;
    }
  }
  const std::vector<grpc::Slice>& slices_;
  size_t index_ = 0;
  size_t pos_ = 0;
};

absl::Status Malformed(const std::string& what) {
  return absl::DataLossError(absl::StrCat("malformed Chunk: ", what));
}

// Reads one length-delimited field's value into `text`, or its spans into `segments`.
absl::Status ReadBytesField(SliceReader& r, std::string* text,
                            std::vector<ChunkView::Segment>* segments, size_t* size) {
  uint64_t len;
  if (!r.ReadVarint(&len)) return Malformed("truncated length");
  std::vector<ChunkView::Segment> spans;
  if (!r.Skip(len, &spans)) return Malformed("field longer than the message");
  if (text) {
    text->clear();
    for (const auto& s : spans) text->append(reinterpret_cast<const char*>(s.data), s.size);
  }
  if (segments) {
    *segments = std::move(spans);
    *size = len;
  }
  return absl::OkStatus();
}

absl::Status SkipField(SliceReader& r, uint64_t tag) {
  uint64_t v;
  switch (tag & 7) {
    case 0:
      return r.ReadVarint(&v) ? absl::OkStatus() : Malformed("truncated varint");
    case 1:
      return r.Skip(8, nullptr) ? absl::OkStatus() : Malformed("truncated fixed64");
    case 5:
      return r.Skip(4, nullptr) ? absl::OkStatus() : Malformed("truncated fixed32");
    case 2:
      return ReadBytesField(r, nullptr, nullptr, nullptr);
    default:
      return Malformed(absl::StrCat("wire type ", tag & 7));
  }
}

absl::Status ReadField(SliceReader& r, uint64_t tag, ChunkView* view) {
  if (tag == kJobId) return ReadBytesField(r, &view->fields.job_id, nullptr, nullptr);
  if (tag == kData) return ReadBytesField(r, nullptr, &view->data, &view->data_bytes);
  uint64_t* u64 = nullptr;
  uint64_t v;
  switch (tag) {
    case kStep: u64 = &view->fields.step; break;
    case kBlock: u64 = &view->fields.block; break;
    case kVersion: u64 = &view->fields.version; break;
    case kNode:
    case kOffset:
    case kElems:
    case kDType: break;
    default: return SkipField(r, tag);
  }
  if (!r.ReadVarint(&v)) return Malformed("truncated varint");
  if (u64) *u64 = v;
  if (tag == kNode) view->fields.node = static_cast<uint32_t>(v);
  if (tag == kOffset) view->fields.offset = static_cast<uint32_t>(v);
  if (tag == kElems) view->fields.elems = static_cast<uint32_t>(v);
  if (tag == kDType) view->fields.dtype = static_cast<v1::DType>(v);
  return absl::OkStatus();
}

}  // namespace

grpc::ByteBuffer MakeChunkBuffer(const ChunkFields& f, grpc::Slice payload) {
  std::string head;
  head.reserve(64 + f.job_id.size());
  if (!f.job_id.empty()) {
    head.push_back(static_cast<char>(kJobId));
    PutVarint(f.job_id.size(), &head);
    head.append(f.job_id);
  }
  PutUint(kStep, f.step, &head);
  PutUint(kNode, f.node, &head);
  PutUint(kBlock, f.block, &head);
  PutUint(kOffset, f.offset, &head);
  PutUint(kDType, f.dtype, &head);
  PutUint(kVersion, f.version, &head);
  PutUint(kElems, f.elems, &head);
  head.push_back(static_cast<char>(kData));
  PutVarint(payload.size(), &head);
  grpc::Slice slices[2] = {grpc::Slice(head), std::move(payload)};
  return grpc::ByteBuffer(slices, 2);
}

absl::StatusOr<ChunkView> ParseChunk(const std::vector<grpc::Slice>& slices) {
  ChunkView view;
  SliceReader r(slices);
  while (!r.AtEnd()) {
    uint64_t tag;
    if (!r.ReadVarint(&tag)) return Malformed("truncated tag");
    if (absl::Status s = ReadField(r, tag, &view); !s.ok()) return s;
  }
  return view;
}

}  // namespace zerostate
