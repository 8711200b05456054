"""What Ringmaster's crash -> first step benchmark measures, for torchrun (Debian's
python3-torch 1.13, /usr/bin/python3): N workers under `torchrun --max_restarts=3
--monitor_interval=0.1` with gloo DDP; after 30 steps one worker is SIGKILLed; the time from the
kill to the first step every restarted worker completes. Several crashes, median reported.

  /usr/bin/python3 bench/torchrun_recovery.py --nproc 2 --kills 3
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


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--kills", type=int, default=3)
    args = p.parse_args()
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torchrun_worker.py")
    with socket.socket() as s:  # torchrun needs a port number; take a free one
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={args.nproc}",
           f"--max_restarts={args.kills}", "--monitor_interval=0.1", "--redirects=1", "--tee=1",
           f"--master_port={port}", worker]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, start_new_session=True)
    lines = []
    lock = threading.Condition()

    def reader():
        for line in proc.stdout:
            with lock:
                lines.append(line)
                lock.notify_all()

    threading.Thread(target=reader, daemon=True).start()

    def wait_for(pred, timeout=120):
        deadline = time.time() + timeout
        with lock:
            while not pred():
                left = deadline - time.time()
                if left <= 0:
                    raise TimeoutError("timed out; last output:\n" + "".join(lines[-20:]))
                lock.wait(left)

    results = []
    for restart in range(args.kills):
        step_re = re.compile(rf"step (\d+) rank (\d+) restart {restart} time ([0-9.]+)")
        wait_for(lambda: any((m := step_re.search(l)) and int(m.group(1)) >= 30 for l in lines))
        pids = {}
        for l in lines:
            m = re.search(rf"worker rank (\d+) pid (\d+) restart {restart}", l)
            if m:
                pids[int(m.group(1))] = int(m.group(2))
        victim = pids[1]
        killed = time.time()
        os.kill(victim, signal.SIGKILL)
        nxt = re.compile(rf"step 1 rank (\d+) restart {restart + 1} time ([0-9.]+)")
        wait_for(lambda: len({m.group(1) for l in lines if (m := nxt.search(l))}) == args.nproc)
        first = max(float(m.group(2)) for l in lines if (m := nxt.search(l)))
        results.append(first - killed)
        print(f"  torchrun {args.nproc} procs, crash {restart + 1}: {first - killed:.2f} s",
              flush=True)
    os.killpg(proc.pid, signal.SIGKILL)
    print(f"torchrun crash -> first step, {args.nproc} processes: median "
          f"{statistics.median(results):.2f} s over {len(results)} crashes", flush=True)


if __name__ == "__main__":
    main()
