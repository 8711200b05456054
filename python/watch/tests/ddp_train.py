"""A plain PyTorch DDP training script, as a user would write it (it knows nothing of the watch).

Run one process per rank with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set (env://, gloo).
Trains a tiny MLP on seeded random data and writes each rank's final parameters (torch.save) to --out.RANK.
Options make it misbehave the ways the watch's tests need: --stuck-rank/--stuck-step (that rank
blocks before the step's forward until --release exists; step 0: before constructing DDP, as if
loading a checkpoint from a dead mount; step -1: before init_process_group, as if downloading the
data), --save-every, --raise-at,
--dcp-save-at (every rank saves the model with torch.distributed.checkpoint after that step),
--no-sync context|flag (the
micro-batches before the last accumulate under DDP's no_sync(), or with nanoGPT's
require_backward_grad_sync = False), --reinit-at (after that step every rank destroys the process group and makes it again, on a
port rank 0 picked, with DDP again over the same model and optimizer), --buffers (a BatchNorm
layer: DDP broadcasts its buffers before each forward), --device-mesh (torch 2.2+: the
process group made by init_device_mesh, as FSDP2 and tensor-parallel programs make it),
--loader-delay S (each micro-batch comes from a torch DataLoader, in this process, whose items
take S seconds each on rank 1: an input-bound rank).
"""

import argparse
import contextlib
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def wait_for_release(path):
    """Blocks until `path` exists (2 minutes at most)."""
    deadline = time.monotonic() + 120
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--optimizer", default="adam", choices=["adam", "sgd"])
    parser.add_argument("--out", required=True)
    # 300 wide, 4 deep: 1.5 MB of gradients, more than DDP's first 1 MB bucket, so several.
    parser.add_argument("--width", type=int, default=300)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--accumulate", type=int, default=1)
    parser.add_argument("--no-sync", choices=["context", "flag"], default="")
    parser.add_argument("--scheduler", action="store_true")
    parser.add_argument("--bucket-view", action="store_true")
    parser.add_argument("--save-every", type=int, default=0)
    parser.add_argument("--resume", default="")
    parser.add_argument("--stuck-rank", type=int, default=-1)
    parser.add_argument("--stuck-step", type=int, default=0)
    parser.add_argument("--release", default="")
    parser.add_argument("--raise-at", type=int, default=0)
    parser.add_argument("--extra-collectives", action="store_true")
    parser.add_argument("--dcp-save-at", type=int, default=0)
    parser.add_argument("--reinit-at", type=int, default=0)
    parser.add_argument("--buffers", action="store_true")
    parser.add_argument("--device-mesh", action="store_true")
    parser.add_argument("--loader-delay", type=float, default=0.0)
    args = parser.parse_args()

    if int(os.environ["RANK"]) == args.stuck_rank and args.stuck_step == -1:
        wait_for_release(args.release)
    if args.device_mesh:
        from torch.distributed.device_mesh import init_device_mesh
        init_device_mesh("cpu", (int(os.environ["WORLD_SIZE"]),))
    else:
        dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(1234)
    layers = [nn.Linear(16, args.width)]
    layers += [nn.BatchNorm1d(args.width)] if args.buffers else []
    layers += [nn.Tanh()]
    for _ in range(args.depth):
        layers += [nn.Linear(args.width, args.width), nn.Tanh()]
    model = nn.Sequential(*layers, nn.Linear(args.width, 1))
    if rank == args.stuck_rank and args.stuck_step == 0:
        wait_for_release(args.release)
    ddp = DDP(model, bucket_cap_mb=0.001, gradient_as_bucket_view=args.bucket_view)
    if args.optimizer == "adam":
        opt = torch.optim.Adam(ddp.parameters(), lr=1e-2)
    else:
        opt = torch.optim.SGD(ddp.parameters(), lr=1e-2, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5) if args.scheduler else None
    start = 0
    if args.resume:
        state = torch.load(args.resume)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"]
    group = dist.new_group([0, 1]) if args.extra_collectives else None
    gen = torch.Generator().manual_seed(100 + rank)
    batches = iter(torch.utils.data.DataLoader(
        SlowItems(args.loader_delay if rank == 1 else 0.0), batch_size=8)) \
        if args.loader_delay else None
    for step in range(start + 1, start + args.steps + 1):
        if rank == args.stuck_rank and step == args.stuck_step:
            wait_for_release(args.release)
        for micro in range(args.accumulate):
            x = torch.randn(8, 16, generator=gen) if batches is None else next(batches)
            y = x.sum(dim=1, keepdim=True).sin()
            # --no-sync: DDP reduces only the last micro-batch's gradients: no_sync() before it
            # ("context"), or nanoGPT's require_backward_grad_sync ("flag").
            last = micro == args.accumulate - 1
            if args.no_sync == "flag":
                ddp.require_backward_grad_sync = last
            skip = args.no_sync == "context" and not last
            with ddp.no_sync() if skip else contextlib.nullcontext():
                loss = nn.functional.mse_loss(ddp(x), y) / args.accumulate
                loss.backward()
        opt.step()
        opt.zero_grad()
        if sched is not None:
            sched.step()
        if args.extra_collectives:
            t = torch.ones(3) * rank
            dist.all_reduce(t, group=group)
            work = dist.broadcast(t, src=0, async_op=True)
            work.wait()
            dist.barrier()
            if dist.get_backend() == "gloo":  # not init_device_mesh's "cpu:gloo,cuda:nccl"
                dist.monitored_barrier()
        if args.raise_at and step == args.raise_at:
            raise RuntimeError("injected failure at step %d" % step)
        if args.save_every and step % args.save_every == 0 and rank == 0:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step},
                       args.out + ".ckpt")
        if args.reinit_at and step == args.reinit_at:
            reinit()
            ddp = DDP(model, bucket_cap_mb=0.001, gradient_as_bucket_view=args.bucket_view)
            group = dist.new_group([0, 1]) if args.extra_collectives else None
        if args.dcp_save_at and step == args.dcp_save_at:
            dcp_save({"model": model.state_dict()}, args.out + ".dcp")
    torch.save([p.detach().clone() for p in model.parameters()], "%s.%d" % (args.out, rank))
    dist.barrier()
    dist.destroy_process_group()
    return 0


class SlowItems(torch.utils.data.Dataset):
    """Random rows of 16, each taking `delay` seconds to fetch (a slow disk)."""

    def __init__(self, delay):
        self.delay = delay

    def __len__(self):
        return 1 << 20

    def __getitem__(self, i):
        if self.delay:
            time.sleep(self.delay)
        return torch.randn(16, generator=torch.Generator().manual_seed(i))


def reinit():
    """destroy_process_group, then init_process_group on a new port (rank 0's pick, sent
    over the old group: the old store's port may not be free again at once)."""
    import socket
    port = [0]
    if dist.get_rank() == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port[0] = s.getsockname()[1]
    dist.broadcast_object_list(port, src=0)
    dist.destroy_process_group()
    os.environ["MASTER_PORT"] = str(port[0])
    dist.init_process_group("gloo")


def dcp_save(state, path):
    """A distributed checkpoint, every rank: torch 2.x's `save`, 1.13's `save_state_dict`."""
    import torch.distributed.checkpoint as dcp
    writer = dcp.FileSystemWriter(path)
    if hasattr(dcp, "save"):
        dcp.save(state, storage_writer=writer)
    else:
        dcp.save_state_dict(state, storage_writer=writer)


if __name__ == "__main__":
    sys.exit(main())
