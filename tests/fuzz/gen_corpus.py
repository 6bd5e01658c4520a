#!/usr/bin/env python3
"""Writes the seed corpora of the harnesses into tests/fuzz/corpus/<name>/.

Messages are written in protobuf text format and encoded by protoc
(--encode), so the seeds follow proto/ as it is; configs are copied from
configs/; the checkpoint seed is a valid one-block checkpoint with its
CRC-32C computed here. Run from anywhere: python3 tests/fuzz/gen_corpus.py
"""
import os
import shutil
import struct
import subprocess
import json

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PROTO = "zerostate/v1/state_service.proto"


def encode(message, text):
    return subprocess.run(
        ["protoc", "--encode=zerostate.v1." + message, "-I", os.path.join(ROOT, "proto"), PROTO],
        input=text.encode(), stdout=subprocess.PIPE, check=True).stdout


def frame(tag, data):
    return bytes([tag, len(data) & 0xFF, len(data) >> 8]) + data


def write(name, seed, data):
    d = os.path.join(HERE, "corpus", name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, seed), "wb") as f:
        f.write(data)


SPEC = """spec { job_id: "job" tensors { name: "w" shape: [20, 30] } tensors { name: "b" shape: 20 }
  optimizer { kind: OPTIMIZER_ADAMW weight_decay: 0.01 } num_nodes: 2
  grad_dtype: DTYPE_FP32 weight_dtype: DTYPE_BF16 block_elems: 256 %s }
servers: "a:1" %s"""


def register_job():
    write("register_job", "small", encode("RegisterJobRequest", SPEC % ("seed: 5", "shard_index: 0")))
    write("register_job", "streamed", encode("RegisterJobRequest", SPEC % ("streamed_init: true", "")))
    write("register_job", "two_servers",
          encode("RegisterJobRequest", SPEC % ("", 'servers: "b:2" shard_index: 1')))
    write("register_job", "nvme", encode("RegisterJobRequest", SPEC % ("tier: TIER_NVME", "")))
    write("register_job", "lion_default_block", encode("RegisterJobRequest", """
      spec { job_id: "j-2" tensors { name: "x" shape: [64, 64] init: INIT_NORMAL init_scale: 0.02 }
             optimizer { kind: OPTIMIZER_LION } num_nodes: 1 grad_dtype: DTYPE_BF16
             weight_dtype: DTYPE_FP16 }
      servers: "a:1" """))


def chunk_text(step, node, block, offset, dtype, data):
    esc = "".join("\\x%02x" % b for b in data)
    return ('job_id: "job" step: %d node: %d block: %d offset: %d dtype: %s data: "%s"'
            % (step, node, block, offset, dtype, esc))


def chunks():
    ones = struct.pack("<256f", *([0.5] * 256))
    init = b"".join(frame(1, encode("Chunk", chunk_text(0, 0, b, 0, "DTYPE_FP32", ones)))
                    for b in range(3))
    write("chunk", "init_all", init)
    push = b"".join(frame(0, encode("Chunk", chunk_text(0, n, b, 0, "DTYPE_FP32", ones)))
                    for n in range(2) for b in range(3))
    write("chunk", "push_step0", init + push)
    part = struct.pack("<16f", *([1.0] * 16))
    write("chunk", "partial_and_retry",
          frame(0, encode("Chunk", chunk_text(0, 1, 2, 32, "DTYPE_FP32", part))) * 2)


def gather():
    write("gather", "whole", encode("GatherRequest", 'job_id: "job" dtype: DTYPE_FP32'))
    write("gather", "range_bf16",
          encode("GatherRequest", 'job_id: "job" dtype: DTYPE_BF16 begin: 100 end: 700'))
    write("gather", "future", encode("GatherRequest", 'job_id: "job" dtype: DTYPE_FP32 min_version: 1'))


def step():
    write("step", "step0", encode("StepRequest", 'job_id: "job" step: 0 lr: 0.001 grad_scale: 0.5'))
    write("step", "skip0", encode("StepRequest", 'job_id: "job" step: 0 skip: true'))
    write("step", "step1", encode("StepRequest", 'job_id: "job" step: 1 lr: 0.001'))


def rendezvous():
    req = lambda rank: encode("RendezvousRequest",
                              'job_id: "mlp@run" key: "nccl-id" rank: %d world: 2 value: "id%d"'
                              % (rank, rank))
    write("rendezvous", "two_ranks", frame(0, req(0)) + frame(0, req(1)))
    write("rendezvous", "retry", frame(0, req(1)) * 2)


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def manifest():
    arrays, block = 3, 256
    state = struct.pack("<%df" % (block * arrays), *[(i % 7) * 0.125 for i in range(block * arrays)])
    m = {
        "formatVersion": 1,
        "spec": {"jobId": "job", "tensors": [{"name": "b", "shape": ["20"]}],
                 "optimizer": {"kind": "OPTIMIZER_ADAMW", "beta1": 0.9, "beta2": 0.999,
                               "eps": 1e-8},
                 "numNodes": 1, "gradDtype": "DTYPE_FP32", "weightDtype": "DTYPE_FP32",
                 "blockElems": block},
        "version": "3", "numShards": 1, "shardIndex": 0, "servers": ["a:1"],
        "firstBlock": "0", "numBlocks": "1", "arrays": arrays,
        "dataFile": "shard-0-of-1.state", "dataBytes": str(len(state)),
        "blockCrc32": [crc32c(state)], "createdAt": "2026-01-01T00:00:00Z",
    }
    write("manifest", "one_block", json.dumps(m, indent=1).encode() + b"\0" + state)


def configs():
    shutil.copy(os.path.join(ROOT, "configs", "mlp.textproto"),
                os.path.join(HERE, "corpus", "worker_config", "mlp.textproto"))
    shutil.copy(os.path.join(ROOT, "configs", "ds_config.json"),
                os.path.join(HERE, "corpus", "ds_config", "ds_config.json"))
    write("ds_config", "minimal", b'{"train_micro_batch_size_per_gpu": 4, "zerostate": '
          b'{"train": {"job_id": "x", "steps": 2}}}')


def tls_stream():
    # The peer's moves (tls_stream_fuzzer.cc): 0 raw bytes, 1 sealed data,
    # 2 KeyUpdate, 3 close_notify, 4 a byte flipped, 5 the wire cut.
    data = frame(1, b"PUSH frame bytes " * 40)
    write("tls_stream", "data_close", data + frame(1, b"x" * 3000) + frame(3, b""))
    write("tls_stream", "key_update", data + frame(2, b"\x01") + frame(1, b"after") + frame(3, b""))
    write("tls_stream", "after_close", data + frame(3, b"") + frame(1, b"late"))
    write("tls_stream", "flipped_tag", data + frame(4, b"\xff\xff\x80"))
    write("tls_stream", "cut", data + frame(5, b"\x07\x00"))
    write("tls_stream", "forged", data + frame(0, b"\x17\x03\x03\x00\x20" + b"\x00" * 32))


if __name__ == "__main__":
    for name in ("worker_config", "ds_config"):
        os.makedirs(os.path.join(HERE, "corpus", name), exist_ok=True)
    register_job(); chunks(); gather(); step(); rendezvous(); manifest(); configs()
    tls_stream()
