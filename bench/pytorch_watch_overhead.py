"""The Python watch's overhead (python/watch, docs/python.md): steps/s of a small DDP model on
N gloo ranks (Debian's python3-torch, /usr/bin/python3) with and without the watch on the
ranks' PYTHONPATH, as the agent would launch them, reporting to a datagram socket this script
binds and reads (the watch tests' fake agent, a stand-in for the agent).

Each round runs both variants (order alternating), each a fresh set of ranks: warm-up steps,
then timed steps between two barriers, timed by rank 0. Reported: the median steps/s of each
variant over the rounds, the overhead in % of step time and in microseconds per step, rank 0's
CPU time per step (all its threads: less sensitive than wall time to other load on a shared
machine), and the reports received per watched run (one step report per rank and step, so the
watch was on).

  /usr/bin/python3 bench/pytorch_watch_overhead.py --rounds 5
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The watch tests' fake agent and rank environment (python/watch/tests/harness.py).
sys.path.insert(0, os.path.join(REPO, "python", "watch", "tests"))
import harness  # noqa: E402

WORKER = r'''
import json, sys, time
import torch, torch.distributed as dist, torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
width, depth, batch, warmup, steps = (int(a) for a in sys.argv[1:6])
dist.init_process_group("gloo")
torch.manual_seed(0)
layers = [nn.Linear(width, width) for _ in range(depth)]
model = DDP(nn.Sequential(*[m for l in layers for m in (l, nn.ReLU())], nn.Linear(width, 1)))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
gen = torch.Generator().manual_seed(dist.get_rank())
x = torch.randn(batch, width, generator=gen)
y = torch.randn(batch, 1, generator=gen)
def step():
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
for _ in range(warmup):
    step()
dist.barrier()
t0, c0 = time.perf_counter(), time.process_time()
for _ in range(steps):
    step()
c1 = time.process_time()
dist.barrier()
seconds = time.perf_counter() - t0
if dist.get_rank() == 0:
    print(json.dumps({"steps_per_second": steps / seconds, "cpu_ms": 1e3 * (c1 - c0) / steps}))
dist.destroy_process_group()
'''


def run(args, worker, agent):
    """One variant: the ranks without the watch (agent None) or with it, reporting to agent."""
    port = harness.free_port()
    procs = []
    for rank in range(args.nproc):
        env = harness.rank_env(rank, args.nproc, port, agent=agent, watch=agent is not None)
        procs.append(subprocess.Popen(
            [sys.executable, worker, str(args.width), str(args.depth), str(args.batch),
             str(args.warmup), str(args.steps)], env=env, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs):
        if p.returncode != 0 or "ringmaster watch" in err:
            raise SystemExit("a rank failed (%d): %s" % (p.returncode, err[-2000:]))
    got = json.loads(outs[0][0].strip().splitlines()[-1])
    return got["steps_per_second"], got["cpu_ms"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    directory = tempfile.mkdtemp(prefix="rm-watch-bench-", dir="/tmp")
    try:
        worker = os.path.join(directory, "worker.py")
        with open(worker, "w") as f:
            f.write(WORKER)
        base, watched, reports = [], [], []
        for i in range(args.rounds):
            for variant in ((False, True) if i % 2 == 0 else (True, False)):
                if variant:
                    agent = harness.FakeAgent()
                    try:
                        watched.append(run(args, worker, agent))
                        deadline = time.monotonic() + 5
                        want = args.nproc * (args.warmup + args.steps)
                        while (len(agent.reports("step")) < want and
                               time.monotonic() < deadline):
                            time.sleep(0.05)
                        reports.append(len(agent.reports("step")))
                    finally:
                        agent.close()
                else:
                    base.append(run(args, worker, None))
        b, w = statistics.median(x[0] for x in base), statistics.median(x[0] for x in watched)
        bc, wc = statistics.median(x[1] for x in base), statistics.median(x[1] for x in watched)
        result = {
            "ranks": args.nproc, "model": "MLP %dx%d, batch %d" % (args.depth, args.width,
                                                                  args.batch),
            "rounds": args.rounds, "timed_steps": args.steps,
            "steps_per_second_without": round(b, 2), "steps_per_second_with": round(w, 2),
            "step_ms_without": round(1e3 / b, 3), "step_ms_with": round(1e3 / w, 3),
            "overhead_percent": round(100.0 * (b / w - 1.0), 2),
            "overhead_us_per_step": round(1e6 * (1 / w - 1 / b), 1),
            "rank0_cpu_ms_per_step_without": round(bc, 3),
            "rank0_cpu_ms_per_step_with": round(wc, 3),
            "cpu_overhead_percent": round(100.0 * (wc / bc - 1.0), 2),
            "step_reports_per_watched_run": reports,
            "all_rounds_without": [round(x[0], 2) for x in base],
            "all_rounds_with": [round(x[0], 2) for x in watched],
        }
        print(json.dumps(result, indent=2))
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
