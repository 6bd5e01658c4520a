"""Where this process sits in the job, from torchrun's variables: RANK,
WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, and GROUP_RANK or NODE_RANK.
A node is one contributing node of the job (JobSpec.num_nodes): its
LOCAL_WORLD_SIZE ranks reduce their gradients among themselves with
torch.distributed, and each pushes its slice."""

import os

import torch.distributed as dist


class Topology:
    def __init__(self, env=None):
        env = os.environ if env is None else env
        self.rank = int(env.get("RANK", "0"))
        self.world = int(env.get("WORLD_SIZE", "1"))
        self.local_rank = int(env.get("LOCAL_RANK", str(self.rank)))
        self.local_world = int(env.get("LOCAL_WORLD_SIZE", str(self.world)))
        if self.world < 1 or self.local_world < 1 or self.world % self.local_world:
            raise ValueError(f"WORLD_SIZE={self.world} is not a multiple of "
                             f"LOCAL_WORLD_SIZE={self.local_world}")
        node = env.get("GROUP_RANK", env.get("NODE_RANK"))
        self.node = int(node) if node is not None else self.rank // self.local_world
        self.num_nodes = self.world // self.local_world
        self.local_group = None
        if self.world > 1:
            if not dist.is_initialized():
                raise RuntimeError(f"WORLD_SIZE={self.world}: call torch.distributed."
                                   "init_process_group before zerostate.torch.initialize")
            if dist.get_world_size() != self.world or dist.get_rank() != self.rank:
                raise RuntimeError("torch.distributed's rank/world size differ from "
                                   "RANK/WORLD_SIZE")
            if self.local_world > 1:
                # Every rank creates every node's group (new_group is collective).
                for n in range(self.num_nodes):
                    ranks = list(range(n * self.local_world, (n + 1) * self.local_world))
                    group = dist.new_group(ranks)
                    if self.rank in ranks:
                        self.local_group = group

    @property
    def coordinator(self):
        return self.rank == 0

    def broadcast(self, value):
        """Rank 0's value on every rank (pickled)."""
        if self.world == 1:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def broadcast_tensors(self, tensors):
        """Rank 0's values into `tensors` on every rank, in place."""
        if self.world == 1:
            return
        for t in tensors:
            dist.broadcast(t.data, src=0)

    def barrier(self):
        if self.world > 1:
            dist.barrier()
