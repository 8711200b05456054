"""An unmodified torch.distributed program: init_process_group("env://") reads the
torchrun-compatible environment the agent sets, then one gloo all-reduce checks every rank."""
import os
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo", init_method="env://")
rank, world = dist.get_rank(), dist.get_world_size()
assert rank == int(os.environ["RANK"]) and world == int(os.environ["WORLD_SIZE"])
value = torch.tensor([float(rank + 1)])
dist.all_reduce(value)
expected = world * (world + 1) / 2
print(f"rank {rank}/{world} local_rank {os.environ['LOCAL_RANK']} "
      f"all_reduce {value.item()} expected {expected}", flush=True)
dist.destroy_process_group()
sys.exit(0 if value.item() == expected else 1)
