"""The Python watch's overhead (python/watch, docs/python.md): steps/s of a small DDP model on
N gloo ranks (Debian's python3-torch, /usr/bin/python3) with and without the watch on the
ranks' PYTHONPATH, as the agent would launch them, reporting to a datagram socket this script
binds and reads (the watch tests' fake agent, a stand-in for the agent). Run by the launcher
that tools/torch2_root prints instead, it and its ranks use trixie's torch 2.x.

Each round runs every variant (the order rotating: ABAB...), each a fresh set of ranks:
warm-up steps, then timed steps between two barriers, timed by rank 0. Reported per variant,
as medians over the rounds: the step time (wall), rank 0's training thread's CPU time per step
(thread_time: steadier than wall time on a shared machine, and where the watch's step work
runs), rank 0's process CPU time per step (all threads: gloo's and the watch's included); the
overhead in % and in microseconds per step against the unwatched variant; and the step reports
received per watched run (one per rank and step: the watch was on).

--compare DIR adds a variant watched by another copy of python/watch (an older commit's, to
measure a change: `git archive OLD python/watch | tar -x -C DIR`, then DIR/python/watch).
--reference-hook adds a variant without the watch whose DDP runs PyTorch's own Python comm
hook equal to its default (default_hooks.allreduce_hook): what any Python comm hook costs.
--comm-hook adds a variant watched with DDP followed through the watch's comm hook (its
fallback for process groups that keep no sequence number) instead of the sequence number.
--interleave K instead runs watched runs only (--rounds of them), each alternating blocks of K
steps with the watch on and off (ABBA; both ranks switch at the same step; off: every hook a
pass-through, the side thread left running) in the same processes, and prints per run the
medians of the on and off blocks' step times and of the paired differences (wall and rank 0's
thread CPU): what the watch's work adds, free of the differences between separate runs that
the A/B above cannot resolve. Not in it: the pass-through calls themselves (the off blocks
make them too).
--breakdown instead runs watched runs only (--rounds of them; with --compare, of both copies,
alternating; with --comm-hook, the comm hook's path) and prints the median CPU time per step of
each of the watch's entry points on rank 0 (the DDP tensor hook, engine callback and wait
closing, the step end's snapshot, the flushes; the comm hook and its bucket callbacks), each
timed by a wrapper with time.thread_time_ns, on the training thread and on others (the side
thread's flushes), with their sums: the watch's own work, which the machine's load disturbs
far less than a whole step's wall time. Not in them: the wrappers' pass-through calls (a
Python call each for the forward, backward and optimizer step) and the timing itself.

  /usr/bin/python3 bench/pytorch_watch_overhead.py --rounds 8
  /usr/bin/python3 bench/pytorch_watch_overhead.py --width 1024 --batch 256 --steps 20 --warmup 3
  /usr/bin/python3 bench/pytorch_watch_overhead.py --breakdown
  /usr/bin/python3 bench/pytorch_watch_overhead.py --interleave 10 --steps 1000 --rounds 10
  /usr/bin/python3 bench/pytorch_watch_overhead.py --reference-hook --comm-hook --compare DIR
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
import collections, functools, json, sys, threading, time
import torch, torch.distributed as dist, torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
width, depth, batch, warmup, steps, breakdown, reference_hook, comm_hook, interleave = (
    int(a) for a in sys.argv[1:10])
parts = collections.defaultdict(lambda: [0, 0])  # name -> [calls, thread CPU ns]
main_thread = threading.main_thread()
def timed(name, fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        t = time.thread_time_ns()
        try:
            return fn(*args, **kwargs)
        finally:
            part = parts[name if threading.current_thread() is main_thread
                         else name + " [other threads]"]
            part[0] += 1
            part[1] += time.thread_time_ns() - t
    return wrapper
watch = sys.modules.get("_ringmaster_watch")
if comm_hook and watch is not None:  # --comm-hook: the watch's fallback.
    from _ringmaster_watch import _ddp
    _ddp.DdpWatch.prefer_hook = True
if breakdown and watch is not None:  # The watch's entry points, none inside another.
    from _ringmaster_watch import _ddp
    make_hook = _ddp._allreduce_hook_for
    _ddp._allreduce_hook_for = lambda w: timed("comm hook (all buckets)", make_hook(w))
    for name, part in (("_gradient_hook", "DDP tensor hook"),
                       ("_graph_computed", "DDP engine callback"),
                       ("backward_returned", "DDP wait closed")):
        setattr(_ddp.DdpWatch, name, timed(part, getattr(_ddp.DdpWatch, name)))
dist.init_process_group("gloo")
if breakdown and watch is not None:
    state = watch._watch_state
    state["steps"].step_ended = timed("step end (snapshot)", state["steps"].step_ended)
    comm, reporter = state["comm"], state["reporter"]
    comm.bucket_finished = timed("comm hook's bucket callbacks", comm.bucket_finished)
    reporter.flush = timed("flush", reporter.flush)
torch.manual_seed(0)
layers = [nn.Linear(width, width) for _ in range(depth)]
model = DDP(nn.Sequential(*[m for l in layers for m in (l, nn.ReLU())], nn.Linear(width, 1)))
if reference_hook:  # PyTorch's own Python hook equal to DDP's default: any Python hook's floor.
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    model.register_comm_hook(None, default_hooks.allreduce_hook)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
gen = torch.Generator().manual_seed(dist.get_rank())
x = torch.randn(batch, width, generator=gen)
y = torch.randn(batch, 1, generator=gen)
# The timing's own cost, in the same place (a step's end, caches as cold): a no-op timed once a
# step, so each part above can be read net of it.
noop = timed("(timing itself: a timed no-op)", lambda: None) if breakdown else (lambda: None)
def step():
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    noop()
    opt.zero_grad()
for _ in range(warmup):
    step()
hook_state = model.__dict__.get("_ringmaster_hook")
if breakdown and hook_state is not None and "allreduce" in hook_state:  # The first forward's.
    hook_state["allreduce"] = timed("  allreduce + get_future", hook_state["allreduce"])
parts.clear()
if interleave and watch is not None:
    # --interleave: blocks of steps with the watch on and off in turn, in these same processes
    # (both ranks switch at the same step). Off is _core.enabled = False, every hook a
    # pass-through; the side thread is kept running (it would stop at the first off block).
    import types
    from _ringmaster_watch import _core, _ticker
    _ticker._core = types.SimpleNamespace(enabled=True, is_owner=_core.is_owner,
                                          fail=_core.fail, on_disable=_core.on_disable)
    blocks = {True: [], False: []}
    dist.barrier()
    for b in range(steps // interleave):
        on = (b // 2) % 2 == b % 2  # on, off, off, on, on, off, off, on...: ABBA
        _core.enabled = on
        t, c = time.perf_counter(), time.thread_time()
        for _ in range(interleave):
            step()
        blocks[on].append((1e3 * (time.perf_counter() - t) / interleave,
                           1e3 * (time.thread_time() - c) / interleave))
    _core.enabled = True
    dist.barrier()
    if dist.get_rank() == 0:
        import statistics
        pairs = list(zip(blocks[True], blocks[False]))
        print(json.dumps({
            "on_step_ms": statistics.median(b[0] for b in blocks[True]),
            "off_step_ms": statistics.median(b[0] for b in blocks[False]),
            "on_minus_off_step_us": 1e3 * statistics.median(a[0] - b[0] for a, b in pairs),
            "on_minus_off_thread_cpu_us": 1e3 * statistics.median(a[1] - b[1] for a, b in pairs),
            "blocks": len(pairs)}))
    dist.destroy_process_group()
    sys.exit(0)
dist.barrier()
t0, c0, p0 = time.perf_counter(), time.thread_time(), time.process_time()
for _ in range(steps):
    step()
c1, p1 = time.thread_time(), time.process_time()
dist.barrier()
seconds = time.perf_counter() - t0
if dist.get_rank() == 0:
    print(json.dumps({"step_ms": 1e3 * seconds / steps, "thread_cpu_ms": 1e3 * (c1 - c0) / steps,
                      "process_cpu_ms": 1e3 * (p1 - p0) / steps,
                      "parts_us": {k: [n / steps, ns / 1e3 / steps] for k, (n, ns) in parts.items()}}))
dist.destroy_process_group()
'''


def run(args, worker, watch_dir, breakdown=False, reference_hook=False, comm_hook=False,
        interleave=0):
    """One run of one variant: the ranks without the watch (watch_dir None) or watched by the
    copy of python/watch in watch_dir; returns rank 0's figures and the step reports seen."""
    port = harness.free_port()
    agent = harness.FakeAgent() if watch_dir is not None else None
    try:
        procs = []
        for rank in range(args.nproc):
            env = harness.rank_env(rank, args.nproc, port, agent=agent,
                                   watch=watch_dir is not None)
            if watch_dir is not None:
                env["PYTHONPATH"] = watch_dir
            procs.append(subprocess.Popen(
                [sys.executable, worker, str(args.width), str(args.depth), str(args.batch),
                 str(args.warmup), str(args.steps), str(int(breakdown)),
                 str(int(reference_hook)), str(int(comm_hook)), str(interleave)], env=env,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        outs = [p.communicate(timeout=600) for p in procs]
        for p, (out, err) in zip(procs, outs):
            if p.returncode != 0 or "ringmaster watch" in err:
                raise SystemExit("a rank failed (%d): %s" % (p.returncode, err[-2000:]))
        got = json.loads(outs[0][0].strip().splitlines()[-1])
        if interleave:
            return got
        got["reports"] = 0
        if agent is not None:
            want = args.nproc * (args.warmup + args.steps)
            deadline = time.monotonic() + 5
            while len(agent.reports("step")) < want and time.monotonic() < deadline:
                time.sleep(0.05)
            got["reports"] = len(agent.reports("step"))
        return got
    finally:
        if agent is not None:
            agent.close()


def summary(runs, base, base_runs):
    """Medians of one variant's runs, and their difference from the unwatched variant's."""
    med = {k: statistics.median(r[k] for r in runs)
           for k in ("step_ms", "thread_cpu_ms", "process_cpu_ms")}
    out = {k: round(v, 3) for k, v in med.items()}
    if base is not None:
        for k in ("step_ms", "thread_cpu_ms", "process_cpu_ms"):
            out[k + "_added_us"] = round(1e3 * (med[k] - base[k]), 1)
            out[k + "_added_percent"] = round(100.0 * (med[k] / base[k] - 1.0), 2)
        out["step_reports_per_run"] = [r["reports"] for r in runs]
        # Each run minus the unwatched run of the same round: steadier than the medians'
        # difference when the machine's load drifts between rounds.
        for k in ("step_ms", "thread_cpu_ms"):
            out[k + "_added_us_paired_median"] = round(1e3 * statistics.median(
                r[k] - b[k] for r, b in zip(runs, base_runs)), 1)
    out["all_step_ms"] = [round(r["step_ms"], 2) for r in runs]
    out["all_thread_cpu_ms"] = [round(r["thread_cpu_ms"], 3) for r in runs]
    return out, med


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--compare", metavar="DIR", help="another python/watch copy, a 3rd variant")
    p.add_argument("--reference-hook", action="store_true",
                   help="a variant without the watch, with torch's Python allreduce_hook")
    p.add_argument("--comm-hook", action="store_true",
                   help="a variant watched with the DDP comm hook (the watch's fallback)")
    p.add_argument("--interleave", type=int, default=0, metavar="K",
                   help="watched runs only: blocks of K steps with the watch on and off in turn")
    p.add_argument("--breakdown", action="store_true",
                   help="watched runs only; rank 0's CPU time per step of each part of the watch")
    args = p.parse_args()
    model = "MLP %dx%d, batch %d, %d ranks" % (args.depth, args.width, args.batch, args.nproc)
    directory = tempfile.mkdtemp(prefix="rm-watch-bench-", dir="/tmp")
    try:
        worker = os.path.join(directory, "worker.py")
        with open(worker, "w") as f:
            f.write(WORKER)
        if args.interleave:
            runs = [run(args, worker, harness.WATCH_DIR, comm_hook=args.comm_hook,
                        interleave=args.interleave) for _ in range(args.rounds)]
            result = {"model": model, "rounds": args.rounds, "timed_steps": args.steps,
                      "steps_per_block": args.interleave, "runs": runs}
            for k in ("on_step_ms", "off_step_ms", "on_minus_off_step_us",
                      "on_minus_off_thread_cpu_us"):
                result["median " + k] = round(statistics.median(r[k] for r in runs), 3)
            result["on_minus_off_percent_of_off_step"] = round(
                100 * result["median on_minus_off_step_us"] / 1e3 / result["median off_step_ms"],
                2)
            print(json.dumps(result, indent=2))
            return
        if args.breakdown:
            copies = [("with", harness.WATCH_DIR)] + (
                [("with " + args.compare, args.compare)] if args.compare else [])
            got = {name: [] for name, _ in copies}
            for i in range(args.rounds):
                k = i % len(copies)
                for name, watch_dir in copies[k:] + copies[:k]:
                    got[name].append(run(args, worker, watch_dir, breakdown=True,
                                         comm_hook=args.comm_hook))
            result = {"model": model, "rounds": args.rounds, "timed_steps": args.steps}
            for name, _ in copies:
                runs = got[name]
                result[name] = {
                    "step_ms": round(statistics.median(r["step_ms"] for r in runs), 3),
                    "thread_cpu_ms": round(statistics.median(r["thread_cpu_ms"] for r in runs), 3),
                    "parts_calls_and_cpu_us_per_step (medians)": {
                        part: [round(statistics.median(r["parts_us"].get(part, [0, 0])[0]
                                                       for r in runs), 2),
                               round(statistics.median(r["parts_us"].get(part, [0, 0])[1]
                                                       for r in runs), 1)]
                        for part in sorted({p for r in runs for p in r["parts_us"]})}}
                # Sums per step, and net of the timing (each timed call's share of the no-op's).
                for where, pick in (("training thread", lambda p: "[other" not in p),
                                    ("other threads", lambda p: "[other" in p)):
                    def net(r):
                        noop_us = r["parts_us"].get("(timing itself: a timed no-op)", [1, 0])
                        per_call = noop_us[1] / max(noop_us[0], 1e-9)
                        return sum(v[1] - v[0] * per_call for p, v in r["parts_us"].items()
                                   if pick(p) and not p.startswith("(timing"))
                    total = statistics.median(net(r) for r in runs)
                    result[name]["net_us_per_step, " + where] = round(total, 1)
                    result[name]["net_percent_of_step_wall, " + where] = round(
                        100 * total / 1e3 / result[name]["step_ms"], 2)
            print(json.dumps(result, indent=2))
            return
        variants = [("without", None, False), ("with", harness.WATCH_DIR, False)]
        if args.compare:
            variants.append(("with " + args.compare, args.compare, False))
        if args.reference_hook:
            variants.append(("without, torch's allreduce_hook", None, True))
        if args.comm_hook:
            variants.append(("with, DDP followed by the comm hook", harness.WATCH_DIR, "hook"))
        runs = {name: [] for name, _, _ in variants}
        for i in range(args.rounds):
            k = i % len(variants)
            for name, watch_dir, hook in variants[k:] + variants[:k]:
                runs[name].append(run(args, worker, watch_dir, reference_hook=hook is True,
                                      comm_hook=hook == "hook"))
        result = {"model": model, "rounds": args.rounds, "timed_steps": args.steps}
        base = None
        for name, _, _ in variants:
            result[name], med = summary(runs[name], base, runs["without"])
            base = med if base is None else base
        print(json.dumps(result, indent=2))
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
