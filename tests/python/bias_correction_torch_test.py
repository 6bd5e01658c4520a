"""Skipped steps and Adam's bias correction as torch users get them: an
AdamW job on two real zerostate-server processes, trained over gRPC with
steps 2 and 5 sent as skipped (an fp16 overflow) and a checkpoint, delete
and restore at version 4, ends at the weights of torch.optim.AdamW fed the
same gradients, whose step() is not called on a skipped step (as
torch.cuda.amp.GradScaler and DeepSpeed do), within TOLERANCE.

  bias_correction_torch_test.py  (the server binary: $ZEROSTATE_SERVER)
Exits 77 (skip) when protoc, grpc_python_plugin, python3-grpcio,
python3-torch or the server binary is absent.
"""
import os
import tempfile

import numpy as np

import grpc_stubs
import zs_servers

JOB, BLOCK, LR, WD = "skips", 64, 0.01, 0.01
STEPS, SKIPPED, CHECKPOINT = 8, {2, 5}, 4
TOKEN = [("zerostate-job-token", "bias-correction-torch-test-token-0123456789")]
TOLERANCE = 1e-6  # absolute, on weights of order 0.2 (a step counted wrong: ~1e-3)


def train(pb, rpc, addresses, root):
    import grpc
    import torch
    stubs = [rpc.StateServiceStub(grpc.insecure_channel(a)) for a in addresses]
    spec = pb.JobSpec(job_id=JOB, tensors=[pb.TensorSpec(name="w", shape=[10, 20])],
                      optimizer=pb.OptimizerConfig(kind=pb.OPTIMIZER_ADAMW, weight_decay=WD),
                      num_nodes=1, grad_dtype=pb.DTYPE_FP32, weight_dtype=pb.DTYPE_FP32,
                      block_elems=BLOCK, seed=7)
    shards = []
    for i, stub in enumerate(stubs):
        info = stub.RegisterJob(pb.RegisterJobRequest(spec=spec, servers=addresses, shard_index=i),
                                metadata=TOKEN, timeout=10).info
        shards.append(range(info.first_block, info.first_block + info.shard_blocks))
    n, total = 200, info.total_elems

    def gather(version):
        flat = np.zeros(total, np.float32)
        for stub in stubs:
            req = pb.GatherRequest(job_id=JOB, min_version=version, dtype=pb.DTYPE_FP32)
            for c in stub.Gather(req, metadata=TOKEN, timeout=10):
                at = c.block * BLOCK + c.offset
                flat[at:at + len(c.data) // 4] = np.frombuffer(c.data, "<f4")
        return flat[:n]

    gen = torch.Generator().manual_seed(0)
    grads = [torch.randn(n, generator=gen) * 0.1 for _ in range(STEPS)]
    param = torch.nn.Parameter(torch.tensor(gather(0)))
    opt = torch.optim.AdamW([param], lr=LR, betas=(0.9, 0.999), eps=1e-8, weight_decay=WD)
    for step in range(STEPS):
        if step == CHECKPOINT:  # the servers forget the job and get it back from disk
            paths = [s.Checkpoint(pb.CheckpointRequest(job_id=JOB, version=step, root=root),
                                  metadata=TOKEN, timeout=30).path for s in stubs]
            for s in stubs:
                s.DeleteJob(pb.DeleteJobRequest(job_id=JOB), metadata=TOKEN, timeout=10)
            for i, s in enumerate(stubs):
                s.Restore(pb.RestoreRequest(job_id=JOB, path=paths[0], servers=addresses,
                                            shard_index=i), metadata=TOKEN, timeout=30)
        g = grads[step].numpy().astype("<f4")
        for stub, blocks in zip(stubs, shards):
            chunks = [pb.Chunk(job_id=JOB, step=step, node=0, block=b, dtype=pb.DTYPE_FP32,
                               data=g[b * BLOCK:(b + 1) * BLOCK].tobytes()) for b in blocks]
            stub.PushGradients(iter(chunks), metadata=TOKEN, timeout=10)
        for stub in stubs:
            stub.Step(pb.StepRequest(job_id=JOB, step=step, lr=LR, skip=step in SKIPPED),
                      metadata=TOKEN, timeout=10)
        if step not in SKIPPED:  # GradScaler: no optimizer.step() on an overflow
            param.grad = grads[step].clone()
            opt.step()
    return gather(STEPS), param.detach().numpy()


def main():
    grpc_stubs.require("torch")
    with tempfile.TemporaryDirectory() as tmp:
        grpc_stubs.generate(os.path.join(tmp, "gen"), "state_service.proto")
        from zerostate.v1 import state_service_pb2 as pb, state_service_pb2_grpc as rpc
        servers = zs_servers.start(2)
        try:
            got, want = train(pb, rpc, [s.address for s in servers], os.path.join(tmp, "ckpt"))
        finally:
            for s in servers:
                s.stop()
    err = float(np.max(np.abs(got - want)))
    print(f"figure max |server - torch.optim.AdamW| after {STEPS} steps, {len(SKIPPED)} skipped, "
          f"a restore: {err:.3g} (tolerance {TOLERANCE})")
    assert err <= TOLERANCE, f"weights differ from torch's by {err}"
    print("ok")


if __name__ == "__main__":
    main()
