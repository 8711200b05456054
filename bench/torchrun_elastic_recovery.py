"""torchrun elastic's node-loss recovery, for Ringmaster's node benchmark (recovery_bench
--parts=node): two torchrun agents on this machine (Debian's python3-torch 1.13 under
/usr/bin/python3), `--nnodes=1:2 --nproc_per_node=1` with the c10d rendezvous on 127.0.0.1, one
gloo DDP worker each (torchrun_worker.py). After 30 steps the second agent's whole process group
and its worker are SIGKILLed (a node gone); the time from the kill to the survivor's first
completed step in its next round, at one node. Several trials, a fresh pair of agents each;
median and range reported.

The first agent hosts the rendezvous store (`is_host=1`), so the kill takes the other: with the
store host gone the survivor cannot rendezvous at all in torchrun 1.13 (the store lives in an
agent). `--max_restarts=3` is needed for any recovery (the default, 0, ends the job); everything
else is torchrun's default unless --tuned: --monitor_interval (default 5 s) and the rendezvous's
last_call_timeout (default 30 s) as a user who wants a fast recovery would set them. The
rendezvous keep-alive (5 s, 3 misses) and join_timeout (600 s) are torchrun's.

  /usr/bin/python3 bench/torchrun_elastic_recovery.py --trials 5
  /usr/bin/python3 bench/torchrun_elastic_recovery.py --trials 5 --tuned
"""
import argparse
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torchrun_worker.py")


class Agent:
    """One torchrun agent in its own session, its output collected line by line."""

    def __init__(self, cmd, env):
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env=env, start_new_session=True)
        self.lines = []
        self.cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            with self.cond:
                self.lines.append(line)
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def wait_for(self, pred, timeout):
        """Waits until pred(lines) is truthy (returns it) or raises after `timeout` seconds."""
        deadline = time.time() + timeout
        with self.cond:
            while True:
                got = pred(self.lines)
                if got:
                    return got
                left = deadline - time.time()
                if left <= 0:
                    raise TimeoutError("timed out; last output:\n" + "".join(self.lines[-30:]))
                self.cond.wait(min(left, 1.0))

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)


def first(pattern, lines, group=None):
    for line in lines:
        m = re.search(pattern, line)
        if m:
            return m if group is None else m.group(group)
    return None


def trial(args, index):
    with socket.socket() as s:  # a free port for the rendezvous store: bind port 0, read it back
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    agents = []
    try:
        for host in (1, 0):
            conf = [f"is_host={host}"]
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1:2",
                   "--nproc_per_node=1", "--rdzv_backend=c10d",
                   f"--rdzv_endpoint=127.0.0.1:{port}", f"--rdzv_id=elastic{index}",
                   "--max_restarts=3", "--redirects=1", "--tee=1"]
            if args.tuned:
                cmd.append(f"--monitor_interval={args.monitor_interval}")
                conf.append(f"last_call_timeout={args.last_call_timeout}")
            cmd += ["--rdzv_conf=" + ",".join(conf), WORKER]
            agents.append(Agent(cmd, env))
        survivor, victim = agents
        # Both workers stepping together (world 2, restart 0), past step 30.
        for a in agents:
            a.wait_for(lambda ls: first(r"step (3\d|[4-9]\d|\d{3,}) rank \d restart 0 ", ls), 180)
        worker = int(victim.wait_for(
            lambda ls: first(r"worker rank \d pid (\d+) restart 0", ls, 1), 10))
        killed = time.time()
        victim.kill()
        try:
            os.kill(worker, signal.SIGKILL)  # the node's worker too, wherever its session is
        except ProcessLookupError:
            pass
        m = survivor.wait_for(
            lambda ls: first(r"step 1 rank (\d) restart ([1-9]) time ([0-9.]+)", ls), 300)
        took = float(m.group(3)) - killed
        print(f"  trial {index + 1}: kill -> survivor's first step of restart {m.group(2)} "
              f"(rank {m.group(1)}, one node): {took:.2f} s", flush=True)
        if args.verbose:
            sys.stdout.write("".join(survivor.lines[-40:]))
        return took
    finally:
        for a in agents:
            a.kill()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--tuned", action="store_true",
                   help="--monitor_interval and last_call_timeout below instead of the defaults")
    p.add_argument("--monitor_interval", type=float, default=0.1)
    p.add_argument("--last_call_timeout", type=int, default=1)
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args()
    if args.trials < 1:
        p.error("--trials must be at least 1")
    settings = (f"--monitor_interval={args.monitor_interval}, last_call_timeout="
                f"{args.last_call_timeout}" if args.tuned else
                "defaults: --monitor_interval=5, last_call_timeout=30")
    print(f"torchrun elastic, 2 agents --nnodes=1:2, {settings}; keep-alive 5 s x 3, "
          f"join_timeout 600 s", flush=True)
    results = [trial(args, i) for i in range(args.trials)]
    print(f"torchrun elastic node kill -> first step at 1 node ({settings}): median "
          f"{statistics.median(results):.2f} s, range {min(results):.2f}-{max(results):.2f} s "
          f"over {len(results)} trials", flush=True)


if __name__ == "__main__":
    main()
