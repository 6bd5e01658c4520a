#include "common/frame.h"

#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace zerostate {
namespace {

absl::Status Bad(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("data plane frame: ", what));
}

bool HasPayload(FrameType type) {
  return type == FrameType::kPush || type == FrameType::kGatherPiece ||
         type == FrameType::kReplicaSum;
}

uint64_t LoadLE(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void StoreLE(uint64_t v, int n, uint8_t* p) {
  for (int i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

}  // namespace

std::string FrameTypeName(uint8_t type) {
  switch (static_cast<FrameType>(type)) {
    case FrameType::kPush:
      return "PUSH";
    case FrameType::kPushAck:
      return "PUSH_ACK";
    case FrameType::kGather:
      return "GATHER";
    case FrameType::kGatherPiece:
      return "GATHER_PIECE";
    case FrameType::kGatherEnd:
      return "GATHER_END";
    case FrameType::kError:
      return "ERROR";
    case FrameType::kShmReady:
      return "SHM_READY";
    case FrameType::kReplicaSum:
      return "REPLICA_SUM";
    case FrameType::kReplicaSumAck:
      return "REPLICA_SUM_ACK";
    case FrameType::kShmBuffer:
      return "SHM_BUFFER";
  }
  return absl::StrCat("type ", type);
}

void EncodeFrameHeader(const FrameHeader& h, uint8_t out[kFrameHeaderBytes]) {
  std::memset(out, 0, kFrameHeaderBytes);
  std::memcpy(out, kFrameMagic, 4);
  out[4] = kFrameVersion;
  out[5] = static_cast<uint8_t>(h.type);
  StoreLE(h.meta_len, 4, out + 8);
  StoreLE(h.payload_len, 8, out + 16);
}

absl::StatusOr<FrameHeader> ParseFrameHeader(const uint8_t b[kFrameHeaderBytes]) {
  if (std::memcmp(b, kFrameMagic, 4) != 0) {
    return Bad(absl::StrCat(
        "bad magic '", absl::CHexEscape(absl::string_view(reinterpret_cast<const char*>(b), 4)),
        "' (want 'ZSDP'): not a zerostate data plane client?"));
  }
  if (b[4] != kFrameVersion) {
    return Bad(absl::StrCat("version ", b[4], " (this server speaks ", kFrameVersion, ")"));
  }
  if (b[5] < static_cast<uint8_t>(FrameType::kPush) ||
      b[5] > static_cast<uint8_t>(FrameType::kShmBuffer)) {
    return Bad(absl::StrCat("unknown frame type ", b[5]));
  }
  if (LoadLE(b + 6, 2) != 0 || LoadLE(b + 12, 4) != 0) return Bad("reserved bytes are not zero");
  FrameHeader h;
  h.type = static_cast<FrameType>(b[5]);
  h.meta_len = static_cast<uint32_t>(LoadLE(b + 8, 4));
  h.payload_len = LoadLE(b + 16, 8);
  if (h.meta_len > kMaxFrameMetaBytes) {
    return Bad(absl::StrCat("meta_len ", h.meta_len, " > ", kMaxFrameMetaBytes));
  }
  if (h.payload_len > kMaxFramePayloadBytes) {
    return Bad(absl::StrCat("payload_len ", h.payload_len, " > ", kMaxFramePayloadBytes));
  }
  if (h.payload_len != 0 && !HasPayload(h.type)) {
    return Bad(absl::StrCat(FrameTypeName(b[5]), " frame with payload_len ", h.payload_len,
                            " (this type carries none)"));
  }
  return h;
}

absl::StatusOr<v1::DataFrameMeta> ParseFrameMeta(FrameType type, const uint8_t* bytes,
                                                 size_t size) {
  v1::DataFrameMeta meta;
  if (!meta.ParseFromArray(bytes, static_cast<int>(size))) {
    return Bad(absl::StrCat("malformed meta of a ", FrameTypeName(static_cast<uint8_t>(type)),
                            " frame (", size, " bytes)"));
  }
  return meta;
}

absl::StatusOr<ParsedFrame> ParseFrame(absl::Span<const uint8_t> bytes) {
  if (bytes.size() < kFrameHeaderBytes) {
    return Bad(absl::StrCat("truncated frame: ", bytes.size(), " of ", kFrameHeaderBytes,
                            " header bytes"));
  }
  ParsedFrame f;
  absl::StatusOr<FrameHeader> h = ParseFrameHeader(bytes.data());
  if (!h.ok()) return h.status();
  f.header = *h;
  f.size = kFrameHeaderBytes + h->meta_len + h->payload_len;
  if (bytes.size() < f.size) {
    return Bad(absl::StrCat("truncated frame: ", bytes.size(), " of ", f.size, " bytes"));
  }
  absl::StatusOr<v1::DataFrameMeta> meta =
      ParseFrameMeta(h->type, bytes.data() + kFrameHeaderBytes, h->meta_len);
  if (!meta.ok()) return meta.status();
  f.meta = *std::move(meta);
  f.payload = bytes.subspan(kFrameHeaderBytes + h->meta_len, h->payload_len);
  return f;
}

std::string EncodeFrameStart(FrameType type, const v1::DataFrameMeta& meta, uint64_t payload_len) {
  std::string out(kFrameHeaderBytes, '\0');
  meta.AppendToString(&out);
  FrameHeader h{type, static_cast<uint32_t>(out.size() - kFrameHeaderBytes), payload_len};
  EncodeFrameHeader(h, reinterpret_cast<uint8_t*>(out.data()));
  return out;
}

ChunkView FrameChunkView(const v1::Chunk& c, const void* data, size_t size) {
  ChunkView view;
  view.fields = {c.job_id(), c.step(),  c.node(),    c.block(),
                 c.offset(), c.dtype(), c.version(), c.elems()};
  view.data_bytes = size;
  if (size > 0) view.data.push_back({static_cast<const uint8_t*>(data), size});
  return view;
}

}  // namespace zerostate
