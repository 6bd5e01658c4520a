// The memory-traffic floor of replication_bench's jobs (k = 0, 1, 2 backups per shard): the
// bytes each stage of a step reads and writes in host memory, per
// parameter and per step, with the bench's layout: two nodes and three
// servers on one host, bf16 wire (grad_dtype and weight_dtype), the nodes
// pushing fp32 gradients and gathering fp32 weights over the same-host
// (shared memory) plane, AdamW, and for k = 1 one backup per shard that
// gets each block's fp32 sum as a REPLICA_SUM frame on loopback TCP
// (server/replication/shard_replicator.h). Every stage's reads and writes
// are counted once, as if none stayed in cache (a block is 1 MiB of fp32,
// so some may: then both floors are lower), and no write-allocate reads
// are added; a node's pieces that arrive before the node ahead of it was
// folded go through staging, which the floor leaves out. The same
// convention as bench/step/device_all_summary.py's floor_<wire>.<stage>.
#pragma once

namespace zerostate::bench {

struct FloorStage {
  const char* name;
  double k0;            // B/param in the job without backups
  double k1;            // B/param in the job with one backup per shard
  bool on_backup_host;  // in a deployment, on the backup's host, not the primary's
  // Whether the stage is paid once per backup (k = 2 pays it twice), else
  // once per step whatever the backups.
  bool per_backup = false;
  // Whether it is the backup applying a step it holds: outside the step's
  // path (replication_bench's `path` setting holds it out of the timed steps).
  bool backup_pass = false;
  // B/param with `k` backups per shard (0, 1 or 2).
  constexpr double with(int k) const {
    if (k == 0) return k0;
    return per_backup ? k0 + (k1 - k0) * k : k1;
  }
};

inline constexpr FloorStage kFloorStages[] = {
    // Each node's client reads its fp32 gradient (4) and writes it as bf16
    // into the segment (2); two nodes.
    {"push", 12, 12, false},
    // The primary folds node 0's bf16 piece into the fp32 sum (read 2,
    // write 4), then node 1's (read 2, read the sum 4, write it 4).
    {"fold", 16, 16, false},
    // The sum's sum of squares and non-finite count: squared from registers
    // by node 1's fold as it writes the sum (d546c8d), so no read of its own.
    {"grad_stats", 0, 0, false},
    // AdamW: reads p, g, m, v (16), writes p, m, v and the bf16 copy (14).
    {"optimizer", 30, 30, false},
    // The primary copies the bf16 weights into each node's segment (2 + 2).
    {"gather", 8, 8, false},
    // Each node reads them (2) and writes them as fp32 (4).
    {"unpack", 12, 12, false},
    // The primary's send(), straight from the block's accumulator (no copy
    // of the sum first): the kernel copies the frame into socket buffers,
    // read 4, write 4.
    {"send", 0, 8, false, true},
    // The backup's recv() copies the socket buffers into a buffer recycled
    // from an applied step (KeptSums::Buffer: not zero-filled), read 4,
    // write 4.
    {"receive", 0, 8, true, true},
    // The backup's ApplyReplicatedStep copies each sum into its
    // accumulator (GradientAccumulator::SetSum): read 4, write 4.
    {"backup_fold", 0, 8, true, true, true},
    // The backup's statistics of each sum: squared by SetSum as it copies.
    {"backup_grad_stats", 0, 0, true, true, true},
    // The backup's AdamW pass, as the primary's.
    {"backup_optimizer", 0, 30, true, true, true},
};

// Totals of kFloorStages: the job with `k` backups per shard on one host,
// and its bytes on the primary's host only (the backups elsewhere; the
// nodes' stay where the bench has them); `path`, the same less the
// backups' passes (every stage the step's path pays on one host: the sums'
// send and receive included).
struct FloorTotals {
  double all = 0, primary_host = 0, path = 0;
};

constexpr FloorTotals Totals(int k) {
  FloorTotals t;
  for (const FloorStage& s : kFloorStages) {
    t.all += s.with(k);
    if (!s.on_backup_host) t.primary_host += s.with(k);
    if (!s.backup_pass) t.path += s.with(k);
  }
  return t;
}

}  // namespace zerostate::bench
