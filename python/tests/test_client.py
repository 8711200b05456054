"""ringmaster.Client and ringmaster.worker against a real coordinator and agent on loopback.

Starts the coordinator (with a tokens file) and one agent with two CPU slots from the Bazel
runfiles (RINGMASTER_TEST_BIN), or from bazel-bin when run by hand:

    bazel build //coordinator //agent && python/generate_stubs.sh && \
      PYTHONPATH=python /usr/bin/python3 -m unittest discover -s python/tests
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import grpc

import ringmaster
import ringmaster.worker
from ringmaster import Client, RingmasterError

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("RINGMASTER_TEST_BIN", os.path.join(ROOT, "bazel-bin"))
ADMIN_TOKEN = "python-test-admin-token"
AGENT_TOKEN = "python-test-agent-token"
DEADLINE = 60.0  # Seconds any one wait may take.


def wait_for(what, condition, timeout=DEADLINE, interval=0.05):
    """Polls `condition` until it returns something truthy; fails the test after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.0f s waiting for %s" % (timeout, what))
        time.sleep(interval)


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


class ClusterTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="python-test-", dir=os.environ.get("TEST_TMPDIR"))
        cls.procs = []
        try:
            cls._start()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def _start(cls):
        tokens = os.path.join(cls.dir, "tokens")
        with open(tokens, "w") as f:
            f.write("%s alice admin\n%s agent-0 agent\n" % (ADMIN_TOKEN, AGENT_TOKEN))
        agent_token = os.path.join(cls.dir, "agent-token")
        with open(agent_token, "w") as f:
            f.write(AGENT_TOKEN + "\n")
        coordinator_log = os.path.join(cls.dir, "coordinator.log")
        cls.procs.append(cls._spawn(coordinator_log, [
            os.path.join(BIN, "coordinator", "coordinator"), "--insecure",
            "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
            "--state=" + os.path.join(cls.dir, "coordinator.db"), "--tokens=" + tokens]))
        pattern = re.compile(r"gRPC listening on ([0-9.]+:[0-9]+)")
        cls.address = wait_for("the coordinator's address in " + coordinator_log,
                               lambda: (pattern.search(read(coordinator_log)) or [None, None])[1]
                               if cls.procs[0].poll() is None else cls._died(coordinator_log))
        # A Unix socket path has at most 107 bytes: TEST_TMPDIR's is often longer.
        cls.socket_dir = tempfile.mkdtemp(prefix="rm-py-", dir="/tmp")
        agent_log = os.path.join(cls.dir, "agent.log")
        cls.procs.append(cls._spawn(agent_log, [
            os.path.join(BIN, "agent", "agent"), "--insecure", "--coordinator=" + cls.address,
            "--node_name=py-agent-0", "--devices=cpu:2",
            "--work_dir=" + os.path.join(cls.dir, "agent-0"), "--metrics_listen=127.0.0.1:0",
            "--token_file=" + agent_token, "--stop_grace=2",
            "--worker_socket=" + os.path.join(cls.socket_dir, "agent.sock")]))
        cls.client = Client(cls.address, token=ADMIN_TOKEN, insecure=True)

        def node_up():
            if cls.procs[1].poll() is not None:
                cls._died(agent_log)
            return [n for n in cls.client.nodes() if n.name == "py-agent-0" and n.alive]

        wait_for("the agent to register", node_up)

    @classmethod
    def _spawn(cls, log, argv):
        with open(log, "wb") as out:
            return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)

    @staticmethod
    def _died(log):
        raise AssertionError("process exited; its log:\n" + read(log)[-4000:])

    @classmethod
    def tearDownClass(cls):
        if getattr(cls, "client", None) is not None:
            cls.client.close()
        for p in reversed(cls.procs):  # Agent first: it stops its workers.
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        if getattr(cls, "socket_dir", None) is not None:
            shutil.rmtree(cls.socket_dir, ignore_errors=True)
        if os.environ.get("TEST_TMPDIR") is None:
            shutil.rmtree(cls.dir, ignore_errors=True)

    def job(self, name, argv, **trainer):
        return {"name": name, "nodes": 1, "devices_per_node": 1,
                "restart": {"max_restarts": 0},
                "trainer": dict({"command": argv, "steps": 1}, **trainer)}

    def watch_to_end(self, job_id):
        updates = list(self.client.watch(job_id))
        self.assertTrue(updates, "watch yielded nothing")
        return updates

    def test_submit_watch_logs(self):
        job = self.client.submit(self.job("py-hello", ["/bin/sh", "-c", "echo hello from rank $RANK"]))
        self.assertTrue(job.job_id)
        self.assertEqual(job.owner, "alice")
        updates = self.watch_to_end(job.job_id)
        self.assertEqual(updates[-1].state, "SUCCEEDED",
                         [(u.state, u.event.kind if u.event else None) for u in updates])
        kinds = [u.event.kind for u in updates if u.event is not None]
        self.assertTrue(kinds, "no events")
        sequences = [u.event.sequence for u in updates if u.event is not None]
        self.assertEqual(sequences, sorted(sequences))
        got = self.client.get(job.job_id)
        self.assertEqual(ringmaster.state_name(got.job.state), "SUCCEEDED")
        log = b"".join(self.client.logs(job.job_id, 0))
        self.assertIn(b"hello from rank 0", log)
        self.assertIn(job.job_id, [j.job_id for j in self.client.list(states=["succeeded"])])
        self.assertNotIn(job.job_id, [j.job_id for j in self.client.list(states=["RUNNING"])])

    def test_cancel_a_long_job(self):
        job = self.client.submit(self.job("py-long", ["/bin/sleep", "600"]))
        wait_for("the job to run", lambda: ringmaster.state_name(
            self.client.get(job.job_id).job.state) == "RUNNING")
        cancelled = self.client.cancel(job.job_id, reason="python test")
        self.assertEqual(ringmaster.state_name(cancelled.state), "CANCELLED")
        self.assertEqual(self.watch_to_end(job.job_id)[-1].state, "CANCELLED")
        # Idempotent.
        self.assertEqual(ringmaster.state_name(self.client.cancel(job.job_id).state), "CANCELLED")

    def test_worker_reports_reach_the_agent(self):
        # A rank running Python with ringmaster.worker: its step report becomes the job's
        # progress, and the rendezvous store round-trips a value.
        script = (
            "import ringmaster.worker as w\n"
            "assert w.enabled()\n"
            "w.rendezvous_set('k', b'v1')\n"
            "print('rendezvous', w.rendezvous_get('k'), w.rendezvous_wait('k', 5),"
            " w.rendezvous_get('missing'), flush=True)\n"
            "with w.phase('checkpoint'):\n"
            "    pass\n"
            "w.step(loss=2.5, tokens=64)\n"
            "assert w.enabled()\n"
            "print('reported', flush=True)\n")
        pythonpath = os.path.dirname(os.path.dirname(os.path.abspath(ringmaster.__file__)))
        job = self.client.submit(self.job("py-worker", [sys.executable, "-c", script],
                                          env={"PYTHONPATH": pythonpath}))
        updates = self.watch_to_end(job.job_id)
        log = b"".join(self.client.logs(job.job_id, 0)).decode(errors="replace")
        self.assertEqual(updates[-1].state, "SUCCEEDED", log)
        self.assertIn("rendezvous b'v1' b'v1' None", log)
        self.assertIn("reported", log)
        self.assertNotIn("ringmaster.worker:", log)  # Nothing was disabled.
        got = self.client.get(job.job_id)
        self.assertEqual(got.job.progress.step, 1)
        self.assertAlmostEqual(got.job.progress.loss, 2.5)

    def test_bad_spec_names_the_field(self):
        with self.assertRaises(ValueError) as cm:
            self.client.submit({"name": "bad", "trainer": {"stepz": 1, "command": ["/bin/true"]}})
        self.assertIn('trainer.stepz: unknown key, did you mean "steps"?', str(cm.exception))
        # The coordinator's own rules: INVALID_ARGUMENT naming the field.
        with self.assertRaises(RingmasterError) as cm:
            self.client.submit(self.job("bad", ["/bin/true"], steps=-1))
        self.assertEqual(cm.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("trainer.steps", cm.exception.message)

    def test_wrong_token_is_unauthenticated(self):
        with Client(self.address, token="not-a-token", insecure=True) as bad:
            with self.assertRaises(RingmasterError) as cm:
                bad.list()
        self.assertEqual(cm.exception.code, grpc.StatusCode.UNAUTHENTICATED)

    def test_unknown_job_is_not_found(self):
        with self.assertRaises(RingmasterError) as cm:
            self.client.get("no-such-job")
        self.assertEqual(cm.exception.code, grpc.StatusCode.NOT_FOUND)

    def test_environment_defaults(self):
        env = {"RINGMASTER_COORDINATOR": self.address, "RINGMASTER_TOKEN": ADMIN_TOKEN,
               "RINGMASTER_INSECURE": "1"}
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            with Client() as c:
                self.assertIn("py-agent-0", [n.name for n in c.nodes()])
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


class WorkerOutsideARankTest(unittest.TestCase):
    def test_calls_are_no_ops(self):
        for var in ("RINGMASTER_AGENT_SOCKET", "RINGMASTER_WORKER_TOKEN"):
            self.assertNotIn(var, os.environ)
        w = ringmaster.worker
        self.assertFalse(w.enabled())
        w.step(loss=1.0, tokens=10)
        with w.phase("checkpoint"):
            pass
        w.exit_reason("done", 0)
        w.rendezvous_set("k", b"v")
        self.assertIsNone(w.rendezvous_get("k"))
        start = time.monotonic()
        self.assertIsNone(w.rendezvous_wait("k", timeout=30))
        self.assertLess(time.monotonic() - start, 1.0)
        with self.assertRaises(ValueError):
            with w.phase("lunch"):
                pass

    def test_unreachable_agent_is_logged_once_and_never_raises(self):
        script = (
            "import ringmaster.worker as w\n"
            "for i in range(3):\n"
            "    w.step(loss=1.0)\n"
            "with w.phase('eval'):\n"
            "    pass\n"
            "print(w.rendezvous_get('k'), w.rendezvous_wait('k', 1), w.enabled())\n")
        env = dict(os.environ, RINGMASTER_AGENT_SOCKET=os.path.join(tempfile.gettempdir(),
                                                                     "no-such-agent.sock"),
                   RINGMASTER_WORKER_TOKEN="t", RINGMASTER_JOB="j", RINGMASTER_GENERATION="1",
                   RANK="0")
        result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                                text=True, timeout=DEADLINE)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.strip(), "None None False")
        self.assertEqual(result.stderr.count("ringmaster.worker:"), 1, result.stderr)


if __name__ == "__main__":
    unittest.main()
