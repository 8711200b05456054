"""A plain PyTorch data-parallel training program, as a user writes it: torch.distributed (gloo,
or NCCL with DEVICE=cuda) + DistributedDataParallel + SGD on a tiny regression model, data a
deterministic function of (rank, step). Nothing in it knows Ringmaster (its fault knobs aside,
which read RINGMASTER_GENERATION): it runs the same under torchrun.
tests/pytorch/pytorch_watch_test.cc and bench/pytorch_hang_bench run it as a command
job (`/usr/bin/python3 ddp_train.py`) to prove Ringmaster's zero-code watch (docs/python.md).

Knobs, from the environment (the job's trainer.env); each fault happens in generation 1 only
(RINGMASTER_GENERATION, 1 outside Ringmaster), so the restarted job runs clean:
  STEPS=N                     optimizer steps (default 100)
  COMPUTE_MS=M                each forward also spends M ms in a simulated device kernel (the
                              process waits, as for a GPU kernel), so a slow rank can be made
  SLOW_RANK=R SLOW_FACTOR=F   rank R's simulated kernels take F times as long (a slower device)
  STUCK_RANK=R STUCK_STEP=N   rank R's data loader blocks forever before step N's batch
  INPUT_RANK=R INPUT_MS=M     the batches come through a torch DataLoader (no workers), whose
                              dataset on rank R waits M ms for each (a slow input pipeline)
  STUCK_RANK=R STUCK_BEFORE_INIT=1
                              rank R (its RANK) blocks forever before init_process_group (a
                              dataset download that never ends), its peers waiting in the
                              rendezvous
  STUCK_RANK=R STUCK_BEFORE_DDP=1
                              rank R blocks forever before constructing DDP (a checkpoint load
                              from a dead mount), its peers waiting in DDP's constructor
  SAVE_STEP=N SAVE_SECONDS=S  after step N, rank 0 torch.saves the model to SAVE_PATH through a
                              file whose first write stalls S seconds (a slow network disk)
  EVAL_STEP=N EVAL_SECONDS=S  after step N, every rank evaluates: S seconds of forward passes
                              under no_grad (the thread busy 4/5 of the time, the rest waiting
                              on its data), then about S/2 seconds all-reducing each
                              batch's loss (no optimizer step meanwhile; every generation)
  EVAL_RANK=R                 only rank R spends the S seconds; the others go straight on to
                              the all-reducing and wait for it there (rank 0 evaluating alone)
  AFTER_SECONDS=S             after destroy_process_group, rank 0 works S seconds more (an
                              upload of its results; every generation)
  EXIT_SECONDS=S              rank 0 (its RANK) works S seconds more at exit, in an atexit
                              handler registered before init_process_group (an experiment
                              tracker's upload; every generation)
  DEVICE=cuda                 the model on this rank's GPU (LOCAL_RANK) and NCCL
At the end every rank prints "rank R done N steps params sha256 HEX", the digest of its final
parameters' bytes (equal on every rank: DDP keeps the replicas identical)."""
import atexit
import hashlib
import os
import sys
import threading
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def env_int(name, default):
    return int(os.environ.get(name, default))


class SimulatedKernel(torch.nn.Module):
    """Identity whose forward lasts `seconds`, as a device kernel would (the CPU waits)."""

    def __init__(self, seconds):
        super().__init__()
        self.seconds = seconds

    def forward(self, x):
        if self.seconds > 0:
            time.sleep(self.seconds)
        return x


class Batches:
    """Step n's batch of rank r, deterministic; blocks forever before `stuck_step`."""

    def __init__(self, rank, steps, device, stuck_step):
        self.rank, self.steps, self.device, self.stuck_step = rank, steps, device, stuck_step

    def __iter__(self):
        for step in range(1, self.steps + 1):
            if step == self.stuck_step:
                print(f"rank {self.rank} data loader stuck before step {step} "
                      f"at unix {time.time():.3f}", flush=True)
                threading.Event().wait()  # never set: a loader waiting on a dead worker
            g = torch.Generator().manual_seed(self.rank * 1000003 + step)
            x = torch.randn(16, 8, generator=g)
            yield x.to(self.device), (x.sum(dim=1, keepdim=True) * 0.5).to(self.device)


class SlowInput(torch.utils.data.IterableDataset):
    """Batches (an iterable) through a DataLoader's dataset that waits `seconds` for each."""

    def __init__(self, batches, seconds):
        super().__init__()
        self.batches, self.seconds = batches, seconds

    def __iter__(self):
        for batch in self.batches:
            if self.seconds > 0:
                time.sleep(self.seconds)
            yield batch


class StallingFile:
    """A file whose first write stalls `seconds` (an overloaded network filesystem)."""

    def __init__(self, path, seconds):
        self.file, self.stall = open(path, "wb"), seconds

    def write(self, data):
        if self.stall > 0:
            time.sleep(self.stall)
            self.stall = 0
        return self.file.write(data)

    def flush(self):
        self.file.flush()

    def close(self):
        self.file.close()


def evaluate(model, rank, device, seconds, alone):
    """`seconds` of evaluation outside any collective (by rank `alone` only, if >= 0), busy
    40 ms of each 50, then about seconds / 2 gathering the loss batch by batch (an all-reduce
    each; a batch count, not a deadline: the same on every rank); prints the mean loss."""
    losses, began = [], time.time()

    def batch(gather):
        g = torch.Generator().manual_seed(rank * 7919 + len(losses))
        x = torch.randn(16, 8, generator=g).to(device)
        loss = torch.nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True) * 0.5)
        if gather:
            dist.all_reduce(loss)
        losses.append(loss.item())

    model.eval()
    with torch.no_grad():
        end = time.time() + (seconds if alone < 0 or alone == rank else 0)
        while time.time() < end:
            busy = time.time() + 0.04
            while time.time() < busy:
                batch(False)
            time.sleep(0.01)
        for _ in range(max(1, int(seconds / 0.1))):
            batch(True)
            time.sleep(0.05)
    model.train()
    print(f"rank {rank} evaluated {len(losses)} batches in {time.time() - began:.1f} s, "
          f"loss {sum(losses) / len(losses):.4f}", flush=True)


def work_at_exit(seconds):
    time.sleep(seconds)
    print(f"rank 0 finished its exit work in {seconds:.0f} s", flush=True)


def main():
    device = os.environ.get("DEVICE", "cpu")
    first = env_int("RINGMASTER_GENERATION", "1") <= 1
    if (first and env_int("RANK", "0") == env_int("STUCK_RANK", "-1")
            and env_int("STUCK_BEFORE_INIT", "0")):
        print(f"rank {os.environ['RANK']} stuck before init_process_group at unix "
              f"{time.time():.3f}", flush=True)
        threading.Event().wait()  # never set
    exit_work = float(os.environ.get("EXIT_SECONDS", "0"))
    if env_int("RANK", "0") == 0 and exit_work > 0:
        atexit.register(work_at_exit, exit_work)
    dist.init_process_group("nccl" if device == "cuda" else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if device == "cuda":
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
        torch.cuda.set_device(device)
    steps = env_int("STEPS", "100")
    print(f"rank {rank}/{world} pid {os.getpid()} generation "
          f"{os.environ.get('RINGMASTER_GENERATION', '-')} torch {torch.__version__} "
          f"on {device}", flush=True)

    kernel = env_int("COMPUTE_MS", "0") / 1000.0
    if first and rank == env_int("SLOW_RANK", "-1"):
        kernel *= float(os.environ.get("SLOW_FACTOR", "1"))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), SimulatedKernel(kernel),
                                torch.nn.Linear(32, 1)).to(device)
    if first and rank == env_int("STUCK_RANK", "-1") and env_int("STUCK_BEFORE_DDP", "0"):
        print(f"rank {rank} stuck before DistributedDataParallel at unix {time.time():.3f}",
              flush=True)
        threading.Event().wait()  # never set
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    stuck = env_int("STUCK_STEP", "0") if first and rank == env_int("STUCK_RANK", "-1") else 0
    save_step = env_int("SAVE_STEP", "0") if first else 0

    batches = Batches(rank, steps, device, stuck)
    if "INPUT_MS" in os.environ:
        slow = first and rank == env_int("INPUT_RANK", "-1")
        wait = env_int("INPUT_MS", "0") / 1000.0 if slow else 0.0
        batches = torch.utils.data.DataLoader(SlowInput(batches, wait), batch_size=None)
    for step, (x, y) in enumerate(batches, start=1):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        optimizer.step()
        if step % 100 == 0 or step == steps:
            print(f"rank {rank} step {step}/{steps} loss {loss.item():.6f}", flush=True)
        if step == env_int("EVAL_STEP", "0"):
            evaluate(model, rank, device, float(os.environ.get("EVAL_SECONDS", "0")),
                     env_int("EVAL_RANK", "-1"))
        if step == save_step and rank == 0:
            began = time.time()
            out = StallingFile(os.environ["SAVE_PATH"], float(os.environ.get("SAVE_SECONDS", "0")))
            torch.save({"step": step, "model": model.state_dict()}, out)
            out.close()
            print(f"rank 0 saved step {step} in {time.time() - began:.1f} s", flush=True)

    digest = hashlib.sha256()
    for p in model.parameters():
        digest.update(p.detach().cpu().contiguous().numpy().tobytes())
    print(f"rank {rank} done {steps} steps params sha256 {digest.hexdigest()}", flush=True)
    dist.destroy_process_group()
    after = float(os.environ.get("AFTER_SECONDS", "0"))
    if rank == 0 and after > 0:
        time.sleep(after)
        print(f"rank 0 uploaded its results in {after:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
