"""Training compiled with torch.compile (torch 2.x), as a user would write it: a run with the
watch must compile and compute exactly as one without.

Run one process per rank with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set (env://, gloo).
In order: a DDP step compiled whole (forward through DDP with a BatchNorm's buffers, backward,
Adam's step); a custom
optimizer's step compiled alone; a fullgraph=True all-reduce with torch.distributed; with
--disable-watch, the watch turned off as an instrumentation error would (the one place this
script knows of it) and a fullgraph=True all-reduce compiled again; a fullgraph=True forward
through DDP with optimize_ddp="python_reducer". The backend is aot_eager (no C++ compiler
needed) behind a counter of each graph's operations. Writes to --out.RANK (torch.save): the
losses, the graphs' operation counts, TorchDynamo's graph-break and unique-graph counts, the
all-reduced tensors and the final parameters.
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
    from torch._dynamo import lookup_backend
    return lookup_backend("aot_eager")(gm, example_inputs)


class PlainSgd(torch.optim.Optimizer):
    """SGD without momentum, written as users write their own optimizers."""

    def __init__(self, params, lr):
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-group["lr"])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--out", required=True)
    parser.add_argument("--disable-watch", action="store_true")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(1234)
    model = nn.Sequential(nn.Linear(16, 64), nn.BatchNorm1d(64), nn.Tanh(), nn.Linear(64, 64),
                          nn.Tanh(), nn.Linear(64, 1))
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
    # A custom optimizer (no graph break of its own), its step compiled alone.
    small = nn.Linear(16, 4)
    sgd = PlainSgd(small.parameters(), lr=0.1)
    sgd_step = torch.compile(sgd.step, backend=counting_backend)
    for _ in range(3):
        small(torch.randn(8, 16, generator=gen)).square().sum().backward()
        sgd_step()
    reduced = [summed(torch.arange(4.0) + rank).tolist()]
    if args.disable_watch:
        core = sys.modules.get("_ringmaster_watch._core")  # None without the watch.
        if core is not None:
            core.disable("compiled_train.py --disable-watch")

        @torch.compile(backend=counting_backend, fullgraph=True)
        def summed_again(t):
            dist.all_reduce(t)
            return t * 3

        reduced.append(summed_again(torch.arange(4.0) + rank).tolist())
    from torch._dynamo import config as dynamo_config
    dynamo_config.optimize_ddp = "python_reducer"
    other = DDP(nn.Sequential(nn.Linear(16, 8), nn.Tanh(), nn.Linear(8, 1)))
    forward = torch.compile(lambda x: other(x).sum(), backend=counting_backend, fullgraph=True)
    for _ in range(2):
        forward(torch.randn(4, 16, generator=gen)).backward()
    from torch._dynamo.utils import counters
    torch.save({"losses": losses, "graphs": GRAPHS, "reduced": reduced,
                "breaks": sum(counters["graph_break"].values()),
                "unique_graphs": counters["stats"]["unique_graphs"],
                "params": [p.detach().clone() for m in (model, small, other)
                           for p in m.parameters()]},
               "%s.%d" % (args.out, rank))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
