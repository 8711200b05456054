"""Test helpers: a fake agent (a real datagram socket decoding WorkerReport JSON) and a launcher
of N ranks of a script over gloo on loopback, with or without the watch on their PYTHONPATH.

Threading: FakeAgent reads on its own daemon thread; its reports list is guarded by a lock.
Every wait has a deadline; every process started is killed on the way out.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WATCH_DIR = os.path.dirname(HERE)  # python/watch: sitecustomize.py and _ringmaster_watch/
PYTHON = "/usr/bin/python3"


def tmpdir():
    return tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))


class FakeAgent:
    """Binds a Unix datagram socket and keeps every WorkerReport it receives, decoded."""

    def __init__(self, directory=None):
        # AF_UNIX paths are limited to 107 bytes, too few under Bazel's TEST_TMPDIR: a short
        # directory in /tmp, as tests/test_cluster.cc does, removed by close().
        del directory
        self._dir = tempfile.mkdtemp(prefix="rm-watch-", dir="/tmp")
        self.path = os.path.join(self._dir, "report.sock")
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.bind(self.path)
        self._sock.settimeout(0.2)
        self._lock = threading.Lock()
        self._reports = []
        self._closed = False
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self):
        while not self._closed:
            try:
                data = self._sock.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                return
            report = json.loads(data.decode())  # Must be valid JSON, else the test fails.
            # A ReportSteps datagram (the watch's deferred steps): each step as the agent takes
            # it, one step report after another.
            reports = ([{"step": s} for s in report["steps"]["steps"]] if "steps" in report
                       else [report])
            with self._lock:
                self._reports.extend(reports)

    def reports(self, kind=None, rank=None):
        with self._lock:
            out = list(self._reports)
        if kind is not None:
            out = [r[kind] for r in out if kind in r]
            if rank is not None:
                out = [r for r in out if r["worker"]["rank"] == rank]
        return out

    def wait_for(self, predicate, timeout=60.0, what="reports"):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate(self):
                return
            time.sleep(0.05)
        raise AssertionError("timed out waiting for %s; got %s" % (what, self.reports()[-5:]))

    def close(self):
        self._closed = True
        self._sock.close()
        self._thread.join(timeout=5)
        shutil.rmtree(self._dir, ignore_errors=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(rank, world, port, agent=None, watch=True, pythonpath=None, extra=None):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RINGMASTER_", "TORCHELASTIC_")) and k != "PYTHONPATH"}
    env.update({"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"})
    paths = []
    if watch:
        paths.append(WATCH_DIR)
        env.update({"RINGMASTER_PYTHON_WATCH": "1", "RINGMASTER_JOB": "job-0001",
                    "RINGMASTER_GENERATION": "2", "RINGMASTER_WORKER_TOKEN": "tok-%d" % rank})
        if agent is not None:
            env["RINGMASTER_REPORT_SOCKET"] = agent.path
    if pythonpath:
        paths.append(pythonpath)
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths)
    env.update(extra or {})
    return env


class Ranks:
    """N rank processes of one script; `wait` returns their (returncode, stderr) pairs."""

    def __init__(self, argv, world, directory, **env_args):
        self.procs = []
        self.logs = []
        port = free_port()
        for rank in range(world):
            log = open(os.path.join(directory, "rank%d.log" % rank), "w+")
            self.logs.append(log)
            self.procs.append(subprocess.Popen(
                [PYTHON] + argv, env=rank_env(rank, world, port, **env_args), stdout=log,
                stderr=subprocess.STDOUT, cwd=directory, start_new_session=True))

    def wait(self, timeout=120.0):
        deadline = time.monotonic() + timeout
        try:
            for proc in self.procs:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        finally:
            self.kill()
        out = []
        for proc, log in zip(self.procs, self.logs):
            log.seek(0)
            out.append((proc.returncode, log.read()))
            log.close()
        return out

    def kill(self):
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout=10)


def run_ranks(argv, world, directory, timeout=120.0, **env_args):
    return Ranks(argv, world, directory, **env_args).wait(timeout)


def train_argv(out, *extra):
    return [os.path.join(HERE, "ddp_train.py"), "--out", out] + list(extra)


def load_params(path):
    """The parameters a rank wrote, as raw bytes per tensor (bitwise comparison)."""
    code = ("import sys, torch; ps = torch.load(sys.argv[1]); "
            "sys.stdout.write(repr([p.numpy().tobytes().hex() for p in ps]))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([PYTHON, "-c", code, path], env=env, check=True,
                          capture_output=True, text=True, timeout=60).stdout


