// Data plane frames (common/frame.h) for tests: a well-formed PUSH frame
// and the malformed variants of it that the parser or the server must
// refuse, each with a piece of the error message that must name it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/frame.h"

namespace zerostate::testing {

// A PUSH frame of `payload` for a chunk of `fields`, with `token`.
inline std::string PushFrame(const v1::Chunk& fields, const std::string& token,
                             const std::string& payload) {
  v1::DataFrameMeta meta;
  meta.set_token(token);
  *meta.mutable_chunk() = fields;
  return EncodeFrameStart(FrameType::kPush, meta, payload.size()) + payload;
}

struct BadFrame {
  std::string name;
  std::string bytes;
  std::string error;            // a piece of the message that must name the problem
  bool parser_accepts = false;  // well-formed, but not a frame a client may send
};

// Malformed variants of `good` (a PUSH frame with a non-empty payload).
inline std::vector<BadFrame> BadFrames(const std::string& good) {
  auto with = [&](size_t at, std::string bytes) {
    std::string f = good;
    f.replace(at, bytes.size(), bytes);
    return f;
  };
  auto le = [](uint64_t v, int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s.push_back(static_cast<char>(v >> (8 * i)));
    return s;
  };
  // Field 1 (token) claiming 127 bytes, more than the meta holds.
  std::string garbled_meta = with(kFrameHeaderBytes, "\x0a\x7f");
  return {
      {"bad_magic", with(0, "HTTP"), "bad magic"},
      {"version_2", with(4, std::string(1, '\x02')), "version 2"},
      {"unknown_type", with(5, std::string(1, '\x0b')), "unknown frame type 11"},
      {"reserved_set", with(6, std::string(1, '\x01')), "reserved bytes"},
      {"meta_too_long", with(8, le(kMaxFrameMetaBytes + 1, 4)), "meta_len"},
      {"payload_too_long", with(16, le(kMaxFramePayloadBytes + 1, 8)), "payload_len"},
      {"payload_on_gather", with(5, std::string(1, '\x03')), "carries none"},
      {"garbled_meta", garbled_meta, "malformed meta"},
      {"truncated", good.substr(0, good.size() - 1), "truncated"},
      {"header_only_half", good.substr(0, 10), "truncated"},
      {"ack_from_client", EncodeFrameStart(FrameType::kPushAck, v1::DataFrameMeta(), 0),
       "may send PUSH, GATHER, REPLICA_SUM or SHM_BUFFER", /*parser_accepts=*/true},
  };
}

}  // namespace zerostate::testing
