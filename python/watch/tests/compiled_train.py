"""A DDP training script whose whole step is compiled with torch.compile (torch 2.x), as a user
would write it (it knows nothing of the watch).

Run one process per rank with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set (env://, gloo).
The compiled step runs the forward through DDP, backward and the optimizer step; a second
compiled function (fullgraph=True) all-reduces a tensor with torch.distributed. The backend is
aot_eager (no C++ compiler needed) behind a counter of each graph's operations. Writes to
--out.RANK: the losses, the graphs' operation counts, the all-reduced tensor and the final
parameters (torch.save), for a run with the watch to compare with one without.
"""

import argparse
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

GRAPHS = []  # Each compiled graph's operation count, in compile order.


def counting_backend(gm, example_inputs):
    GRAPHS.append(sum(1 for n in gm.graph.nodes
                      if n.op in ("call_function", "call_method", "call_module")))
    import torch._dynamo
    return torch._dynamo.lookup_backend("aot_eager")(gm, example_inputs)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(1234)
    model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(),
                          nn.Linear(64, 1))
    ddp = DDP(model, bucket_cap_mb=0.01)
    opt = torch.optim.Adam(ddp.parameters(), lr=1e-2)

    @torch.compile(backend=counting_backend)
    def train_step(x, y):
        loss = nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach()

    @torch.compile(backend=counting_backend, fullgraph=True)
    def summed(t):
        t = t * 2
        dist.all_reduce(t)
        return t + 1

    gen = torch.Generator().manual_seed(100 + rank)
    losses = []
    for _ in range(args.steps):
        x = torch.randn(8, 16, generator=gen)
        y = x.sum(dim=1, keepdim=True).sin()
        losses.append(train_step(x, y).item())
    reduced = summed(torch.arange(4.0) + rank).tolist()
    torch.save({"losses": losses, "graphs": GRAPHS, "reduced": reduced,
                "params": [p.detach().clone() for p in model.parameters()]},
               "%s.%d" % (args.out, rank))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
