"""Every copy of every shard of a job, compared bit for bit: run on a host
of a namespaced cluster (netns_partition_test.py starts it on a trainer's
host), it reads each shard from each server (ReplicaService.ReadShard,
stubs generated from the proto; tests/python/grpc_stubs.py) and prints one
JSON object: {"shards": N, "copies": [per shard, the servers holding it],
"blocks": [per shard, its block count], "version": V, "mismatches": [...]}. A copy differs when a block's state
(masters and moments), version or applied-step count differs from the
first copy's; every block must also be at version `--version` with as
many applied steps (no step applied twice or skipped).

    netns_copies.py --servers A,B,C --job J --token T --version V --stubs DIR
"""

import argparse
import json
import os
import sys

import grpc

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
import grpc_stubs  # noqa: E402


def read_copy(stub, job, shard, token):
    """{block: (version, applied_steps, state)} of the server's copy of
    `shard`; None when it holds none (NOT_FOUND)."""
    from zerostate.v1 import replica_pb2
    try:
        blocks = stub.ReadShard(replica_pb2.ReadShardRequest(job_id=job, shard=shard),
                                metadata=[("zerostate-job-token", token)], timeout=60)
        return {b.block: (b.version, b.applied_steps, b.state) for b in blocks}
    except grpc.RpcError as e:
        if e.code() == grpc.StatusCode.NOT_FOUND:
            return None
        raise


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--servers", required=True)
    p.add_argument("--job", required=True)
    p.add_argument("--token", required=True)
    p.add_argument("--version", type=int, required=True)
    p.add_argument("--stubs", required=True, help="where the generated stubs go")
    args = p.parse_args()
    grpc_stubs.generate(args.stubs, "replica.proto", "state_service.proto", "data_plane.proto")
    from zerostate.v1 import replica_pb2_grpc
    servers = args.servers.split(",")
    stubs = [replica_pb2_grpc.ReplicaServiceStub(grpc.insecure_channel(s)) for s in servers]
    holders, blocks, mismatches = [], [], []
    for shard in range(len(servers)):
        copies = {s: read_copy(stubs[i], args.job, shard, args.token)
                  for i, s in enumerate(servers)}
        copies = {s: c for s, c in copies.items() if c is not None}
        holders.append(sorted(copies))
        first = next(iter(copies.values()), {})
        blocks.append(len(first))
        for server, copy in copies.items():
            if copy != first:
                mismatches.append(f"shard {shard}: {server}'s copy differs from "
                                  f"{next(iter(copies))}'s")
            for block, (version, applied, _) in copy.items():
                if version != args.version or applied != args.version:
                    mismatches.append(f"shard {shard} on {server}: block {block} at version "
                                      f"{version} with {applied} steps applied, not {args.version}")
    print(json.dumps({"shards": len(servers), "copies": holders, "blocks": blocks,
                      "version": args.version, "mismatches": mismatches}))


if __name__ == "__main__":
    main()
