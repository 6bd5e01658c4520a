// Helpers of the data plane's tests (data_plane_test.cc,
// data_plane_tls_test.cc): raw frames on a connection, and a check that a
// job was left as it was.
#pragma once

#include <string>
#include <vector>

#include "client/data_conn.h"
#include "client/client.h"
#include "tests/client/cluster_fixture.h"
#include "tests/client/reference_model.h"

namespace zerostate::testing {

// Sends `bytes` as they are (frames whole, cut or malformed) on `conn`;
// false if the connection broke.
inline bool Write(client::DataConn& conn, const std::string& bytes) {
  iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
  return conn.stream().SendAll(&iov, 1).ok();
}

// 16 elements of node 0's step-0 gradient for block 0 of job `job_id`.
inline v1::Chunk PushFields(const std::string& job_id) {
  v1::Chunk c;
  c.set_job_id(job_id);
  c.set_dtype(v1::DTYPE_FP32);
  return c;
}
inline const std::string kPayload(16 * 4, '\x01');

// After the bad frames, the job must take node 0's full gradient as if
// nothing had come before: a piece of the bad frames applied would make the
// client's chunks partial overlaps or duplicates, and the weights differ.
inline void ExpectJobUntouched(client::JobClient& job) {
  ReferenceModel ref(job.spec());
  const Layout& layout = ref.layout();
  std::vector<float> g = NodeGradient(layout, 0, 0);
  ASSERT_TRUE(job.Push(0, 0, {0, layout.used_elems}, g.data(), v1::DTYPE_FP32).ok());
  ASSERT_TRUE(job.Step(0, 0.01f, 1.0f, false).ok());
  ref.Step(0, {g}, 0.01f, 1.0f);
  std::vector<float> got(layout.total_elems);
  ASSERT_TRUE(job.Gather(1, {0, got.size()}, got.data(), v1::DTYPE_FP32).ok());
  ExpectBitIdentical(got.data(), ref.GatheredWeights().data(), got.size(), "weights");
}

}  // namespace zerostate::testing
