"""One rank of a DCP save to Gristmill (run by test_torch_memory.py as a subprocess):
``python dcp_rank.py RANK WORLD INIT_URL ENDPOINT PATH MIB [hang]``. With ``hang`` the rank
stops before the checkpoint's metadata is written (as if killed there)."""

import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from gristmill import Client
from gristmill.dcp import GristmillStorageWriter


def state_of(rank: int, mib: int) -> dict:
    g = torch.Generator().manual_seed(1000 + rank)
    per = (mib << 20) // 8 // 4
    return {f"rank{rank}.t{i}": torch.randn(per, generator=g) for i in range(8)}


class HangingWriter(GristmillStorageWriter):
    def finish(self, metadata, results):
        print("data written; hanging before the metadata", flush=True)
        time.sleep(3600)


def main() -> None:
    rank, world, init, endpoint, path, mib = sys.argv[1:7]
    rank, world, mib = int(rank), int(world), int(mib)
    hang = len(sys.argv) > 7 and sys.argv[7] == "hang"
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    writer = (HangingWriter if hang else GristmillStorageWriter)(path, Client(endpoint))
    dcp.save(state_of(rank, mib), storage_writer=writer)
    dist.barrier()
    print("saved", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
