"""A minimal DDP training worker for bench/torchrun_recovery.py: a tiny MLP over gloo, one line
per step with the wall time, so the orchestrator can time a restart. Resumes nothing: torchrun
restarts the whole group from scratch (elastic agents rerun the entry point)."""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def main():
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    rank = dist.get_rank()
    print(f"worker rank {rank} pid {os.getpid()} restart {restart}", flush=True)
    model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(64, 256), nn.GELU(),
                                                              nn.Linear(256, 64)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(16, 64)
    for step in range(1, 1000000):
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} rank {rank} restart {restart} time {time.time():.6f}", flush=True)
        time.sleep(0.02)  # about the step time of the Ringmaster benchmark's tiny model


if __name__ == "__main__":
    sys.exit(main())
