"""Tests of the zero-code Python watch (python/watch) with real PyTorch (gloo on loopback).

Each rank is a real /usr/bin/python3 process running an unmodified DDP script
(ddp_train.py) with python/watch first on its PYTHONPATH, as the agent launches it; a fake
agent (a real Unix datagram socket) decodes the WorkerReport JSON they send.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import unittest
import unittest.mock

import harness

sys.path.insert(0, harness.WATCH_DIR)
from _ringmaster_watch import (  # noqa: E402
    _collectives, _comm, _core, _device, _reporter, _stack, _steps, _ticker)

STEPS = 6
TRAIN_ARGS = ["--steps", str(STEPS), "--accumulate", "2", "--scheduler", "--extra-collectives",
              "--save-every", "3"]


def steps_by_rank(agent, world):
    return {r: sorted(agent.reports("step", r), key=lambda s: int(s["step"])) for r in range(world)}


class ReporterTest(unittest.TestCase):
    def test_sends_json_and_never_blocks(self):
        d = tempfile.mkdtemp(prefix="rm-watch-", dir="/tmp")  # AF_UNIX: a short path.
        self.addCleanup(shutil.rmtree, d, True)
        receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        path = os.path.join(d, "s")
        receiver.bind(path)
        reporter = _reporter.Reporter(path, {"jobId": "j", "generation": "1", "rank": 0,
                                             "token": "t"})
        self.assertTrue(reporter.send("step", {"step": "1", "loss": _reporter.json_double(
            float("nan"))}))
        got = json.loads(receiver.recv(65536))
        self.assertEqual(got["step"]["step"], "1")
        self.assertEqual(got["step"]["loss"], "NaN")
        self.assertEqual(got["step"]["worker"]["jobId"], "j")
        # Nobody reads: the agent's queue fills, sends never block; what the socket cannot
        # take is held, at most MAX_DEFERRED, the oldest dropped beyond (counted).
        with unittest.mock.patch.object(_reporter, "MAX_DEFERRED", 8):
            for _ in range(1000):
                self.assertTrue(reporter.send("collectives",
                                              {"collectiveEntered": {"world": "1"}}))
            self.assertEqual(len(reporter._held), 8)
            self.assertEqual(reporter.sent + 8 + reporter.dropped, 1001)
            self.assertGreater(reporter.dropped, 0)
        receiver.close()
        os.unlink(path)
        self.assertFalse(reporter.send("step", {"step": "2"}))  # No agent: dropped, no raise.
        reporter.close()

    def agent_and_reporter(self):
        """A bound datagram socket (an agent's, in a short /tmp path) and a Reporter to it."""
        d = tempfile.mkdtemp(prefix="rm-watch-", dir="/tmp")  # AF_UNIX: a short path.
        self.addCleanup(shutil.rmtree, d, True)
        path = os.path.join(d, "s")
        receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        receiver.bind(path)
        self.addCleanup(receiver.close)
        reporter = _reporter.Reporter(path, {"jobId": "j", "generation": "1", "rank": 0,
                                             "token": "t"})
        self.addCleanup(reporter.close)
        return path, receiver, reporter

    def test_reconnects_to_an_agent_restarted_on_the_same_path(self):
        # The socket is connected once; a new agent socket on the same path must still get the
        # reports (the connected peer is gone: connect again and retry).
        path, first, reporter = self.agent_and_reporter()
        self.assertTrue(reporter.send("step", {"step": "1"}))
        self.assertEqual(json.loads(first.recv(65536))["step"]["step"], "1")
        first.close()
        os.unlink(path)
        self.assertFalse(reporter.send("step", {"step": "2"}))  # Nobody: dropped.
        second = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        second.bind(path)
        self.addCleanup(second.close)
        second.settimeout(5)
        self.assertTrue(reporter.send("step", {"step": "3"}))
        self.assertEqual(json.loads(second.recv(65536))["step"]["step"], "3")
        self.assertEqual((reporter.sent, reporter.dropped), (2, 1))

    def test_a_stack_read_before_a_step_or_phase_goes_without_it(self):
        # The side thread reads the stack, then the training thread steps: the step goes
        # first, and a stack after it would tell the agent of a stall that is over.
        _, receiver, reporter = self.agent_and_reporter()
        receiver.settimeout(5)
        reporter.deferring = True
        stalled = {"collectiveEntered": {"world": "1"}, "stack": "a.py:1 in f"}
        moves = reporter.moves
        self.assertTrue(reporter.send("collectives", dict(stalled), moves=moves))
        self.assertEqual(json.loads(receiver.recv(65536))["collectives"]["stack"], "a.py:1 in f")
        reporter.defer("step", lambda raw: '"step":"%d"' % raw, 5)
        self.assertTrue(reporter.send("collectives", dict(stalled), moves=moves))
        self.assertEqual(json.loads(receiver.recv(65536))["step"]["step"], "5")
        got = json.loads(receiver.recv(65536))["collectives"]
        self.assertNotIn("stack", got)
        self.assertEqual(got["collectiveEntered"], {"world": "1"})
        moves = reporter.moves
        reporter.send("phase", {"phase": "WORKER_PHASE_CHECKPOINT"})
        receiver.recv(65536)
        self.assertTrue(reporter.send("collectives", dict(stalled), moves=moves))
        self.assertNotIn("stack", json.loads(receiver.recv(65536))["collectives"])

    def test_deferred_reports_go_first_in_order_and_only_from_their_process(self):
        _, receiver, reporter = self.agent_and_reporter()
        receiver.settimeout(5)
        encode = lambda raw: '"step":"%d"' % raw  # noqa: E731
        reporter.defer("step", encode, 1)  # No flusher: sent at once.
        self.assertEqual(json.loads(receiver.recv(65536))["step"]["step"], "1")
        reporter.deferring = True
        reporter.defer("step", encode, 2)
        reporter.defer("step", encode, 3)
        receiver.setblocking(False)
        with self.assertRaises(BlockingIOError):
            receiver.recv(65536)  # Queued, not sent.
        receiver.settimeout(5)
        # A forked child (a DataLoader worker) never sends its copy of the queue.
        pid = os.fork()
        if pid == 0:
            reporter.flush()
            os._exit(0)
        os.waitpid(pid, 0)
        # A direct report sends the queue first, the steps in one datagram: the agent sees
        # them in order.
        reporter.send("phase", {"phase": "WORKER_PHASE_CHECKPOINT"})
        batch, phase = [json.loads(receiver.recv(65536)) for _ in range(2)]
        self.assertEqual([(s["step"], s["worker"]["token"]) for s in batch["steps"]["steps"]],
                         [("2", "t"), ("3", "t")])
        self.assertEqual(phase["phase"]["phase"], "WORKER_PHASE_CHECKPOINT")
        # A batch stays under the agent's datagram limit: more steps than fit go in several.
        big = '"step":"%d","pad":"' + "x" * 20000 + '"'
        for step in range(5, 9):
            reporter.defer("step", lambda raw: big % raw, step)
        reporter.flush()
        got = [json.loads(receiver.recv(65536)) for _ in range(2)]
        self.assertEqual([[s["step"] for s in g["steps"]["steps"]] for g in got],
                         [["5", "6"], ["7", "8"]])
        reporter.defer("step", encode, 4)
        reporter.flush()
        self.assertEqual(json.loads(receiver.recv(65536))["step"]["worker"]["jobId"], "j")
        self.assertEqual((reporter.sent, reporter.dropped), (9, 0))

    def test_reports_a_busy_agent_refused_go_first_once_it_reads(self):
        # The agent's queue is full (it stalled): no report is lost, none blocks, and once it
        # reads again the agent gets every one in the order they happened.
        _, receiver, reporter = self.agent_and_reporter()
        reporter.deferring = True
        sent = 0
        while not reporter._held and sent < 100000:  # Direct reports until the queue is full.
            reporter.send("collectives", {"collectiveEntered": {"world": str(sent)}})
            sent += 1
        self.assertTrue(reporter._held)
        for step in range(1, 51):
            reporter.defer("step", lambda raw: '"step":"%d"' % raw, step)
        reporter.flush()
        self.assertTrue(reporter.send("phase", {"phase": "WORKER_PHASE_CHECKPOINT"}))
        got = []
        receiver.setblocking(False)
        for _ in range(1000):  # Bounded: each round the agent reads all it has.
            while True:
                try:
                    got.append(json.loads(receiver.recv(65536)))
                except BlockingIOError:
                    break
            if not reporter._held:
                break
            reporter.flush()
        self.assertFalse(reporter._held)
        collectives = [int(g["collectives"]["collectiveEntered"]["world"])
                       for g in got if "collectives" in g]
        self.assertEqual(collectives, list(range(sent)))
        steps = [int(s["step"]) for g in got if "steps" in g or "step" in g
                 for s in (g["steps"]["steps"] if "steps" in g else [g["step"]])]
        self.assertEqual(steps, list(range(1, 51)))
        self.assertIn("phase", got[-1])
        self.assertEqual(reporter.dropped, 0)
        self.assertEqual(reporter.sent, sent + 50 + 1)

    def fill_agent_queue(self, reporter):
        """Direct reports until the agent's queue is full (a report held); how many sent."""
        sent = 0
        while not reporter._held and sent < 100000:
            reporter.send("collectives", {"collectiveEntered": {"world": str(sent)}})
            sent += 1
        self.assertTrue(reporter._held)
        return sent

    def read_all(self, receiver):
        out = []
        while True:
            try:
                out.append(json.loads(receiver.recv(65536)))
            except BlockingIOError:
                return out

    def test_a_report_sent_from_within_a_send_repeats_or_loses_none(self):
        # A signal handler's report (the send lock is reentrant) runs right after a socket
        # send inside a flush of held reports: every report once, in the order they happened.
        _, receiver, reporter = self.agent_and_reporter()
        reporter.deferring = True
        sent = self.fill_agent_queue(reporter)
        for step in range(1, 31):
            reporter.defer("step", lambda raw: '"step":"%d"' % raw, step)
        reporter.flush()
        real_send = reporter._send
        nested = []

        def send_then_handler(data):
            result = real_send(data)
            if result and not nested:
                nested.append(True)
                reporter.send("phase", {"phase": "WORKER_PHASE_CHECKPOINT"})
            return result

        reporter._send = send_then_handler
        receiver.setblocking(False)
        got = []
        for _ in range(1000):
            got += self.read_all(receiver)
            if not reporter._held:
                break
            reporter.flush()
        got += self.read_all(receiver)
        self.assertEqual(nested, [True])
        kinds = [next(k for k in g if k != "worker") for g in got]
        self.assertEqual([int(g["collectives"]["collectiveEntered"]["world"])
                          for g in got if "collectives" in g], list(range(sent)))
        steps = [int(s["step"]) for g in got if "steps" in g or "step" in g
                 for s in (g["steps"]["steps"] if "steps" in g else [g["step"]])]
        self.assertEqual(steps, list(range(1, 31)))
        self.assertEqual(kinds[-1], "phase")
        self.assertEqual(reporter.dropped, 0)

    def test_drain_at_exit_waits_briefly_for_a_busy_agent(self):
        _, receiver, reporter = self.agent_and_reporter()
        sent = self.fill_agent_queue(reporter)
        receiver.setblocking(False)
        got = []
        reader = threading.Timer(0.05, lambda: got.extend(self.read_all(receiver)))
        reader.start()
        reporter.drain(seconds=5)  # The agent reads again after 0.05 s: all of them go.
        reader.join()
        got += self.read_all(receiver)
        self.assertFalse(reporter._held)
        self.assertEqual(len(got), sent)
        self.assertEqual(reporter.dropped, 0)
        # Nobody reads: bounded, and what is left is counted as dropped.
        self.fill_agent_queue(reporter)
        held = len(reporter._held)
        reporter.drain(seconds=0.1)
        self.assertFalse(reporter._held)
        self.assertEqual(reporter.dropped, held)

    def test_identity_errors_name_the_variable(self):
        env = {"RINGMASTER_JOB": "j", "RINGMASTER_GENERATION": "x", "RANK": "0",
               "RINGMASTER_WORKER_TOKEN": "t", "RINGMASTER_REPORT_SOCKET": "/s"}
        with self.assertRaisesRegex(ValueError, "RINGMASTER_GENERATION"):
            _reporter.identity_from_env(env)
        del env["RANK"]
        with self.assertRaisesRegex(ValueError, "RANK not set"):
            _reporter.identity_from_env(env)


class TimeoutTest(unittest.TestCase):
    """The process group's timeout the side thread sends: init_process_group's, else torch's
    default for the backend."""

    @staticmethod
    def timeout(dist, *args, **kwargs):
        def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1,
                               rank=-1, store=None):
            pass

        collectives = _collectives.Collectives(dist, _comm.Comm())
        timeout = _collectives.locator(init_process_group, "timeout")(args, kwargs)
        backend = _collectives.locator(init_process_group, "backend")(args, kwargs)
        return collectives._timeout_seconds(timeout, backend)

    def test_the_programs_own_then_the_backends_default(self):
        import datetime
        minutes = datetime.timedelta(minutes=1)
        constants = type("constants", (), {"default_pg_nccl_timeout": 10 * minutes})
        dist = type("dist", (), {"default_pg_timeout": 30 * minutes, "constants": constants})
        self.assertEqual(self.timeout(dist, "gloo", timeout=2 * minutes), 120.0)
        self.assertEqual(self.timeout(dist, "nccl", None, 45 * minutes), 2700.0)
        self.assertEqual(self.timeout(dist, "gloo"), 1800.0)
        # Torch's rule: NCCL's own default for exactly "nccl"; a mixed backend gets the other.
        self.assertEqual(self.timeout(dist, backend="cpu:gloo,cuda:nccl"), 1800.0)
        self.assertEqual(self.timeout(dist, backend="NCCL"), 600.0)
        self.assertEqual(self.timeout(dist, "nccl"), 600.0)
        constants.default_pg_nccl_timeout = None  # A torch built without NCCL.
        self.assertEqual(self.timeout(dist, "nccl"), 1800.0)
        self.assertEqual(self.timeout(type("old", (), {})), 0.0)  # No default: unknown.
        self.assertEqual(self.timeout(dist, unexpected=1), 1800.0)  # Unbound: the default.
        # The program may have changed torch's default in distributed_c10d (where torch reads it).
        dist.distributed_c10d = type("c10d", (), {"default_pg_timeout": 5 * minutes})
        self.assertEqual(self.timeout(dist, "gloo"), 300.0)


class InitWrapperTest(unittest.TestCase):
    """init_process_group's wrapper, over a stand-in torch.distributed: the rendezvous is
    entered at the call, reported at once, and done when the call returns or raises, whatever
    the instrumentation does meanwhile."""

    def setUp(self):
        self._enabled = _core.enabled
        _core.enabled = True  # Disabled again by _core.fail, or by tearDown.
        self.initialized = False
        test = self

        def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1,
                               rank=-1, store=None):
            test.seen_inside = comm.sequences()
            if test.fail_with is not None:
                raise test.fail_with
            test.initialized = True

        self.fail_with = None
        self.seen_inside = None
        self.dist = type("dist", (), {
            "is_initialized": staticmethod(lambda: test.initialized),
            "get_world_size": staticmethod(lambda group=None: 2),
            "default_pg_timeout": __import__("datetime").timedelta(minutes=30)})
        comm = self.comm = _comm.Comm()
        self.collectives = _collectives.Collectives(self.dist, comm)
        self.sent = []
        self.collectives.on_init.append(lambda: self.sent.append(comm.sequences()[:3]))
        self.init = self.collectives._wrap_init(init_process_group)

    def tearDown(self):
        _core.enabled = self._enabled

    def test_entered_and_reported_at_the_call_done_at_its_return(self):
        self.init("gloo")
        self.assertEqual(self.sent, [({"rendezvous": "1"}, {"rendezvous": "0"}, True)])
        self.assertEqual(self.seen_inside[:3], self.sent[0])
        self.assertEqual(self.comm.sequences()[:3],
                         ({"rendezvous": "1", "world": "0"}, {"rendezvous": "1", "world": "0"},
                          False))
        self.assertEqual(self.comm.timeout_seconds, 1800.0)
        # Called again while initialised: torch's own error, nothing entered or reported.
        self.fail_with = RuntimeError("trying to initialize the default process group twice")
        with self.assertRaises(RuntimeError):
            self.init("gloo", timeout=__import__("datetime").timedelta(seconds=5))
        self.assertEqual(len(self.sent), 1)
        self.assertEqual(self.comm.timeout_seconds, 1800.0)  # The running group's, still.
        self.assertTrue(_core.enabled)

    def test_a_call_that_raises_leaves_the_rendezvous_done(self):
        self.fail_with = RuntimeError("Timed out initializing process group")
        with self.assertRaises(RuntimeError):
            self.init("gloo", timeout=__import__("datetime").timedelta(seconds=5))
        self.assertEqual(self.comm.sequences()[:3],
                         ({"rendezvous": "1"}, {"rendezvous": "1"}, False))
        self.assertEqual(self.comm.timeout_seconds, 5.0)
        self.assertTrue(_core.enabled)

    def test_an_instrumentation_failure_still_calls_torch_and_ends_the_wait(self):
        def broken():
            raise ValueError("a surprise")

        self.collectives.on_init.insert(0, broken)
        with unittest.mock.patch("sys.stderr"):
            self.init("gloo")
        self.assertTrue(self.initialized)  # The program's call went through.
        self.assertFalse(_core.enabled)  # The watch disabled itself.
        self.assertEqual(self.comm.sequences()[2], False)  # Not left blocked.


class SplitGroupTest(unittest.TestCase):
    """split_group's wrapper over a stand-in torch.distributed (torch's needs NCCL and a GPU:
    bench/gpu_torch_marks.py runs it there, through init_device_mesh): rank 2 of 4 names the
    group of its split as a new_group per split, in their order, would have named it."""

    class Group:
        def __init__(self, ranks):
            self.ranks = ranks

        def size(self):
            return len(self.ranks)

    def setUp(self):
        self._enabled = _core.enabled
        _core.enabled = True  # Disabled again by _core.fail, or by tearDown.
        self.fresh()

    def fresh(self):
        """A new process's wrappers (its groups not yet named)."""
        self.rank = 2
        test = self
        Group = self.Group

        def get_rank(group=None):
            return test.rank if group is None else group.ranks.index(test.rank)

        def new_group(ranks=None, timeout=None, backend=None, pg_options=None):
            return Group(ranks) if test.rank in ranks else None

        def split_group(parent_pg=None, split_ranks=None, timeout=None, pg_options=None,
                        group_desc=None):
            me = get_rank(parent_pg)
            parent = parent_pg.ranks if parent_pg is not None else list(range(4))
            mine = next((s for s in split_ranks if me in s), None)
            return Group([parent[r] for r in mine]) if mine is not None else None

        self.dist = type("dist", (), {
            "get_rank": staticmethod(get_rank),
            "get_world_size": staticmethod(
                lambda group=None: 4 if group is None else group.size())})
        self.comm = _comm.Comm()
        collectives = _collectives.Collectives(self.dist, self.comm)
        self.new_group = collectives._wrap_new_group(new_group)
        self.split_group = collectives._wrap_split_group(split_group)

    def tearDown(self):
        _core.enabled = self._enabled

    def name(self, pg):
        return self.comm.group(pg, lambda pg: pg.size()).name

    def test_the_callers_split_takes_its_new_group_name(self):
        everyone = self.new_group([0, 1, 2, 3])
        pair = self.split_group(split_ranks=[[0, 1], [2, 3]])
        outside = self.split_group(split_ranks=[[0, 1]])  # Rank 2 is in none of them.
        # Torch reads the splits until the caller's: the watch reads all of them all the same.
        lazily = self.split_group(split_ranks=iter([[0, 1], [2, 3]]))
        last = self.new_group([2])
        self.assertIsNone(outside)
        self.assertEqual([self.name(g) for g in (everyone, pair, lazily, last)],
                         ["pg1", "pg3", "pg6", "pg7"])
        self.assertEqual(pair.ranks, [2, 3])
        # The same groups by new_group, one per split: the same names.
        self.fresh()
        groups = [self.new_group(r) for r in ([0, 1, 2, 3], [0, 1], [2, 3], [0, 1], [0, 1],
                                              [2, 3], [2])]
        self.assertEqual([self.name(groups[i]) for i in (0, 2, 5, 6)],
                         ["pg1", "pg3", "pg6", "pg7"])
        self.assertTrue(_core.enabled)

    def test_a_split_of_a_subgroup_is_named_after_it(self):
        # Only the subgroup's ranks split it (ranks 0 and 1 split theirs too, or not): its
        # splits are named after it, positionally by the subgroup's own ranks (rank 2 is the
        # pair's rank 0), and the world's numbering, which every rank shares, does not move.
        pair = self.split_group(split_ranks=[[0, 1], [2, 3]])
        alone = self.split_group(pair, [[0], [1]])
        other = self.split_group(parent_pg=pair, split_ranks=[[1], [0]])
        after = self.new_group([2, 3])
        self.assertEqual([self.name(g) for g in (pair, alone, other, after)],
                         ["pg2", "pg2.1", "pg2.4", "pg3"])
        self.assertEqual((alone.ranks, other.ranks), ([2], [2]))
        self.assertTrue(_core.enabled)

    def test_a_surprise_disables_the_watch_and_returns_torchs_group(self):
        self.dist.get_rank = staticmethod(lambda group=None: 1 / 0)
        with unittest.mock.patch("sys.stderr"):
            pair = self.split_group(split_ranks=[[0, 1], [2, 3]])
        self.assertEqual(pair.ranks, [2, 3])
        self.assertFalse(_core.enabled)


class CommTest(unittest.TestCase):
    def test_completed_is_the_highest_with_all_before_done(self):
        comm = _comm.Comm()
        comm.set_world(None, 2)
        world = comm.group(None, lambda pg: 2)
        first, second = comm.enter(world), comm.enter(world)
        comm.complete(world, second, "all_reduce", 8, 0.5)
        entered, completed, _, _ = comm.sequences()
        self.assertEqual((entered["world"], completed["world"]), ("2", "0"))
        comm.complete(world, first, "all_reduce", 8, 0.25)
        self.assertEqual(comm.sequences()[1]["world"], "2")
        blocked, stats = comm.take_step()
        self.assertEqual(blocked, 0.75)
        self.assertEqual(stats[0]["count"], "2")
        self.assertEqual(stats[0]["bytes"], "16")

    def test_destroyed_groups_are_reported_as_they_ended_until_the_next_init(self):
        # After destroy_process_group the rank's reports still say where its groups ended, every
        # collective over (it is outside any: busy to its agent, not silent, while it uploads),
        # a subgroup destroyed alone is reported no more, and the next init_process_group counts
        # afresh from 0.
        comm = _comm.Comm()
        rendezvous = comm.rendezvous()
        comm.rendezvous_done(rendezvous)
        comm.set_world(None, 2)
        world = comm.group(None, lambda pg: 2)
        sub = object()
        pg1 = comm.group(sub, lambda pg: 2)
        for _ in range(3):
            comm.complete(world, comm.enter(world), "all_reduce", 8, 0.0)
        comm.complete(pg1, comm.enter(pg1), "all_reduce", 8, 0.0)
        comm.enter(world)  # An async all-reduce never waited for: over with its group.
        comm.destroyed(sub)
        self.assertEqual(comm.sequences()[0], {"rendezvous": "1", "world": "4"})
        comm.destroyed(None)
        entered, completed, inside, _ = comm.sequences()
        self.assertEqual(entered, {"rendezvous": "1", "world": "4"})
        self.assertEqual(completed, entered)
        self.assertFalse(inside)
        again = comm.rendezvous()  # A second init_process_group.
        self.assertEqual(comm.sequences()[:2], ({"rendezvous": "1"}, {"rendezvous": "0"}))
        comm.rendezvous_done(again)
        comm.set_world(None, 2)
        world = comm.group(None, lambda pg: 2)
        comm.complete(world, comm.enter(world), "all_reduce", 8, 0.0)
        self.assertEqual(comm.sequences()[:2], ({"rendezvous": "1", "world": "1"},
                                                {"rendezvous": "1", "world": "1"}))


    def test_members_json_is_take_step_and_sequences_as_json(self):
        # The step report writes its JSON by hand from a snapshot (take_raw): it must say what
        # the dict path (take_step, sequences and json.dumps) says, DDP buckets included.
        def filled():
            comm = _comm.Comm(clock=iter([10.0, 10.25]).__next__)
            comm.set_world(None, 2)
            world, pg = comm.group(None, lambda pg: 2), comm.group(object(), lambda pg: 3)
            comm.complete(pg, comm.enter(pg), "broadcast", 12, 1e-7)
            comm.complete(world, comm.enter(world), "barrier", 0, 0.0)
            comm.bucket_finished((10.5, world, comm.bucket_launched(world, True), 4096))
            return comm
        blocked, stats, groups, late = filled().take_raw()
        self.assertEqual(late, 0.0)
        members = _comm.members_json(stats, groups)
        comm = filled()
        want_blocked, want_stats = comm.take_step()
        entered, completed, _, _ = comm.sequences()
        self.assertEqual(blocked, want_blocked)
        self.assertAlmostEqual(blocked, 0.5 + 1e-7)  # The bucket tail and the broadcast.
        self.assertEqual(json.loads("{%s}" % members), {
            "collectives": json.loads(json.dumps(want_stats)), "collectiveEntered": entered,
            "collectiveCompleted": completed})
        self.assertEqual(entered, {"world": "2", "pg1": "1"})
        self.assertEqual(completed, entered)
        self.assertEqual(members.count('"op"'), 3)
        self.assertEqual(_comm.members_json(*_comm.Comm().take_raw()[1:3]), "")

    def test_ddp_counted_by_the_process_groups_sequence_number(self):
        comm = _comm.Comm(clock=lambda: 0.0)
        comm.set_world(None, 2)
        world = comm.group(None, lambda pg: 2)
        comm.complete(world, comm.enter(world), "barrier", 0, 0.0)  # Seen before DDP: #1.
        comm.count_from(world, 1000, None)  # DDP's first forward: torch's number is 1000.
        comm.count_from(world, 5000, None)  # Only the first counts.
        comm.sync(world, 1002)  # The forward's 2 broadcasts, returned.
        self.assertEqual(comm.sequences()[:3], ({"world": "3"}, {"world": "3"}, False))
        comm.ddp_done(world, 1002, 100, 0.0)  # no_sync(): no bucket launched, nothing counted.
        world.ddp_waiting = 1005  # Graph done, 3 buckets launched (_ddp.py's engine callback).
        # The side thread sees this rank inside #4-#6, and the step end would too.
        self.assertEqual(comm.sequences()[:3], ({"world": "6"}, {"world": "3"}, True))
        self.assertEqual(comm.take_raw()[2], [("world", 2, 6, 3)])  # (Takes the barrier.)
        comm.ddp_done(world, 1005, 100, 0.25)  # backward() returned.
        self.assertEqual(comm.sequences()[:3], ({"world": "6"}, {"world": "6"}, False))
        self.assertEqual(world.ddp_waiting, 0)
        async_seq = comm.enter(world)  # An async all_reduce: #7, outstanding.
        comm.watch_work("work", world, async_seq, "all_reduce", 4)
        comm.sync(world, 1008)  # The step's end: 2 more made out of sight (#8, #9).
        self.assertEqual(comm.sequences()[:2], ({"world": "9"}, {"world": "6"}))
        comm.waited("work", 0.0)
        self.assertEqual(comm.sequences()[1], {"world": "9"})
        # A wrapped send (#10) that torch does not number, and an all_gather_object (#11) made
        # of two: the offset follows, and the next backward's 3 buckets are 3, not 2 or 4.
        comm.complete(world, comm.enter(world), "send", 4, 0.0)
        comm.adjust(world, 0)
        comm.complete(world, comm.enter(world), "all_gather", 4, 0.0)
        comm.adjust(world, 2)
        comm.ddp_done(world, 1013, 100, 0.0)
        self.assertEqual(comm.sequences()[:2], ({"world": "14"}, {"world": "14"}))
        blocked, stats = comm.take_step()
        self.assertEqual(blocked, 0.25)
        self.assertEqual([(s["op"], s["count"], s["bytes"]) for s in stats],
                         [("all_gather", "1", "4"), ("all_reduce", "7", "204"),
                          ("send", "1", "4")])
        uncounted = comm.group(object(), lambda pg: 2)
        comm.sync(uncounted, 50)  # Never count_from: its own count stays.
        comm.ddp_done(uncounted, 50, 4, 0.0)
        self.assertEqual(comm.sequences()[0]["pg1"], "0")

    def test_gpu_collectives_complete_when_the_gpu_passes_their_mark(self):
        # NCCL: a call returns once queued. Its number stays outstanding until the GPU passes
        # the CUDA event after it (FakeMarks stands in for the events: no GPU here).
        comm, marks, world = gpu_comm(3)
        comm.complete(world, comm.enter(world), "all_reduce", 8, 0.001, marks.mark("gpu0"))
        comm.complete(world, comm.enter(world), "broadcast", 8, 0.001, marks.mark("gpu0"))
        self.assertEqual(comm.sequences()[:2], ({"world": "2"}, {"world": "0"}))
        marks.made[1][0] = True  # The later one alone says done: the earlier holds it back.
        comm.poll_device()
        self.assertEqual(comm.sequences()[1], {"world": "0"})
        marks.made[0][0] = True
        comm.poll_device()
        self.assertEqual(comm.sequences()[1], {"world": "2"})
        self.assertEqual(marks.released, marks.made)  # Their events go back for reuse.
        blocked, stats = comm.take_step()  # The host's time, counted when the call returned.
        self.assertAlmostEqual(blocked, 0.002)
        self.assertEqual([s["count"] for s in stats], ["1", "1"])
        # DDP's buckets (counted by torch's number, #3-#5), and what a step end found (#6).
        comm.count_from(world, 1002, None)
        comm.ddp_done(world, 1005, 100, 0.0, marks.mark("gpu0"))
        comm.sync(world, 1006, marks.mark("gpu0"))
        self.assertEqual(comm.sequences()[:2], ({"world": "6"}, {"world": "2"}))
        # An async_op work: its wait() returned (queued), its mark not yet passed.
        work = object()
        comm.watch_work(work, world, comm.enter(world), "all_reduce", 8, "gpu0")
        self.assertEqual(comm.watched(work), ("gpu0",))
        self.assertIsNone(comm.watched(object()))
        comm.waited(work, 0.5, marks.mark("gpu0"))
        marks.made[2][0] = True
        self.assertEqual(comm.sequences()[1], {"world": "2"})  # Not before a poll...
        marks.own_device = False
        comm.poll()  # ... nor by the training thread's where it cannot take their device...
        self.assertEqual(comm.sequences()[1], {"world": "2"})
        self.assertFalse(marks.bound)  # (It never binds to it for good.)
        marks.own_device = True
        comm.poll()  # ... but where it can (its own, or switched to and back: _device.py).
        self.assertEqual(comm.sequences()[1], {"world": "5"})
        self.assertFalse(marks.bound)
        # The side thread asks before each report: the training thread may be stuck elsewhere.
        reporter = SentReports()
        marks.made[3][0] = marks.made[4][0] = True
        marks.own_device = False
        _ticker.Ticker(reporter, comm).tick()
        self.assertTrue(marks.bound)  # The side thread took the marks' device first.
        self.assertEqual(reporter.sent[-1][1]["collectiveCompleted"], {"world": "7"})
        self.assertEqual(reporter.sent[-1][1]["collectiveEntered"], {"world": "7"})
        # A host-side wait still counts as it did, and a failed call (no mark) completes.
        comm.complete(world, comm.enter(world), "all_reduce", 8, 0.0)
        self.assertEqual(comm.sequences()[1], {"world": "8"})

    def test_gpu_time_counts_where_longer_than_the_hosts(self):
        # Timed on the GPU (a mark before the call too): where the GPU waited longer than the
        # host (NCCL: the host only queued it), the GPU's time counts, once the GPU is through:
        # the host's time blocked at once, the excess found late (take_raw's last), and the
        # collective's row (count, bytes and the longer time) when the GPU is through.
        comm, marks, world = gpu_comm()

        def timed(gpu_seconds):
            start, end = marks.mark("gpu0"), marks.mark("gpu0")
            end[2] = gpu_seconds
            return start, end

        start, end = timed(0.3)
        comm.complete(world, comm.enter(world), "all_reduce", 8, 0.001, end, start)
        blocked, stats, _, late = comm.take_raw()
        self.assertEqual((blocked, stats, late), (0.001, {}, 0.0))  # No row yet.
        start[0] = end[0] = True
        comm.poll_device()
        blocked, stats, _, late = comm.take_raw()
        self.assertEqual(blocked, 0.0)
        self.assertAlmostEqual(late, 0.299)
        self.assertEqual(stats, {("all_reduce", "world"): [1, 8, 0.3]})  # Its row, its bytes.
        self.assertEqual(marks.released, [end, start])  # Both events go back for reuse.
        fast = timed(0.0005)  # GPU quicker than the host: the host's time.
        comm.complete(world, comm.enter(world), "all_reduce", 8, 0.001, fast[1], fast[0])
        fast[0][0] = fast[1][0] = True
        comm.poll_device()
        self.assertEqual(comm.take_raw()[::3], (0.001, 0.0))
        # DDP: from the graph's end to after backward() returned, beyond the host's wait.
        comm.count_from(world, 100, None)
        graph_end, returned = timed(0.5)
        comm.ddp_done(world, 103, 64, 0.1, returned, graph_end)
        graph_end[0] = returned[0] = True
        comm.poll_device()
        blocked, stats, _, late = comm.take_raw()
        self.assertEqual(blocked, 0.1)
        self.assertAlmostEqual(late, 0.4)
        self.assertEqual(stats, {("all_reduce", "world"): [3, 64, 0.5]})
        self.assertEqual(comm.sequences()[:2], ({"world": "5"}, {"world": "5"}))
        # An async work's wait(), timed like a call.
        work = object()
        comm.watch_work(work, world, comm.enter(world), "broadcast", 4, "gpu0")
        before, after = timed(0.2)
        comm.waited(work, 0.0, after, before)
        before[0] = after[0] = True
        comm.poll_device()
        blocked, stats = comm.take_step()  # (take_step: late included.)
        self.assertAlmostEqual(blocked, 0.2)
        self.assertEqual([(s["op"], s["count"], s["bytes"], s["seconds"]) for s in stats],
                         [("broadcast", "1", "4", 0.2)])
        # An end passed with its start not (another stream): no GPU time, no error.
        start, end = timed(9.0)
        comm.complete(world, comm.enter(world), "all_reduce", 8, 0.001, end, start)
        end[0] = True
        comm.poll_device()
        self.assertEqual(comm.take_raw()[::3], (0.001, 0.0))
        self.assertEqual(comm.sequences()[1], {"world": "7"})
        # Beyond MAX_DEVICE, a timed entry dropped keeps its row, at the host's time.
        old_max = _comm.MAX_DEVICE
        _comm.MAX_DEVICE = 1
        self.addCleanup(setattr, _comm, "MAX_DEVICE", old_max)
        for _ in range(2):
            start, end = timed(1.0)
            comm.complete(world, comm.enter(world), "all_reduce", 8, 0.002, end, start)
        self.assertEqual(comm.take_raw()[1], {("all_reduce", "world"): [1, 8, 0.002]})

    def test_gpu_marks_count_in_number_order_whatever_the_order_they_were_made(self):
        comm, marks, world = gpu_comm()
        work = object()  # An irecv (#1), then an all_reduce (#2), then the irecv's wait().
        comm.watch_work(work, world, comm.enter(world), "recv", 4, "gpu0")
        comm.complete(world, comm.enter(world), "all_reduce", 8, 0.0, marks.mark("gpu0"))
        comm.waited(work, 0.0, marks.mark("gpu0"))
        history = [comm.sequences()[1]["world"]]
        for mark in marks.made:  # #2's mark passes first: #1's still holds both back.
            mark[0] = True
            comm.poll_device()
            history.append(comm.sequences()[1]["world"])
        self.assertEqual(history, ["0", "0", "2"])

    def test_no_gpu_query_or_mark_while_a_cuda_graph_is_captured(self):
        class Graph:
            def capture_begin(self, pool=None):
                self.began = True

            def capture_end(self):
                if getattr(self, "fail_end", False):
                    raise RuntimeError("capture failed")

        cuda = type("cuda", (), {"CUDAGraph": Graph, "Event": None,
                                 "current_stream": None, "set_device": None,
                                 "current_device": None})
        self.addCleanup(setattr, _device, "_captures", 0)  # Even if an assertion fails.
        _device.watch_captures(cuda)
        comm, marks, world = gpu_comm()
        asked = []
        marks.done = lambda mark: asked.append(mark) or mark[0]
        comm.complete(world, comm.enter(world), "all_reduce", 8, 0.0, marks.mark("gpu0"))
        marks.made[0][0] = True
        graph = Graph()
        graph.capture_begin()
        self.assertTrue(graph.began and _device.capturing())
        comm.poll_device()
        self.assertEqual((asked, comm.sequences()[1]), ([], {"world": "0"}))
        self.assertIsNone(_device.Marks(type("c", (), {
            "Event": None, "current_stream": None, "set_device": None,
            "current_device": None, "default_stream": None})).mark("gpu0"))
        graph.fail_end = True
        with self.assertRaises(RuntimeError):  # The capture ends, even when it fails.
            graph.capture_end()
        self.assertFalse(_device.capturing())
        comm.poll_device()
        self.assertEqual((len(asked), comm.sequences()[1]), (1, {"world": "1"}))

    def test_a_capture_that_begins_waits_for_a_poll_in_flight(self):
        order = []

        class Graph:
            def capture_begin(self):
                order.append("capture")

            def capture_end(self):
                pass

        _device.watch_captures(type("cuda", (), {"CUDAGraph": Graph}))
        self.addCleanup(setattr, _device, "_captures", 0)
        comm, marks, world = gpu_comm()
        inside, release = threading.Event(), threading.Event()

        def done(mark):  # The side thread's query, held until the test lets it go.
            inside.set()
            release.wait(30)
            order.append("query")
            return True

        marks.done = done
        comm.complete(world, comm.enter(world), "all_reduce", 8, 0.0, marks.mark("gpu0"))
        poll = threading.Thread(target=comm.poll_device, kwargs={"side": True})
        poll.start()
        self.assertTrue(inside.wait(30))
        capture = threading.Thread(target=Graph().capture_begin)
        capture.start()
        # While the query runs, the capture cannot begin. (A wait that can only pass early if
        # the capture is wrongly let through: never a false failure.)
        capture.join(0.5)
        self.assertEqual(order, [])
        release.set()
        poll.join(30)
        capture.join(30)
        self.assertEqual(order, ["query", "capture"])
        self.assertEqual(comm.sequences()[1], {"world": "1"})

    def test_two_polls_never_overlap(self):
        # The side thread's poll and a step end's: the second waits for the first, pops
        # included, so an event taken back for reuse is never still being asked by the other.
        comm, marks, world = gpu_comm()
        inside, release = threading.Event(), threading.Event()
        asked = []

        def done(mark):  # The first poll's query is held until the test lets it go.
            asked.append(mark)
            if threading.current_thread().name == "first":
                inside.set()
                release.wait(30)
            return True

        marks.done = done
        gated = []  # Whether the gate was held as each event was taken back.
        marks.release = lambda mark: (gated.append(_device._capture_lock.locked()),
                                      FakeMarks.release(marks, mark))
        start, end = marks.mark("gpu0"), marks.mark("gpu0")
        end[2] = 0.5
        comm.complete(world, comm.enter(world), "all_reduce", 8, 0.1, end, start)
        first = threading.Thread(target=comm.poll_device, kwargs={"side": True}, name="first")
        first.start()
        self.assertTrue(inside.wait(30))
        second = threading.Thread(target=comm.poll_device, name="second")
        second.start()
        second.join(0.5)  # (Can pass early only if the second is wrongly let through.)
        self.assertEqual((len(asked), marks.released, comm._on_device), (1, [], 1))
        release.set()
        first.join(30)
        second.join(30)
        self.assertEqual(len(asked), 2)  # The end and its start; the second found none.
        self.assertEqual(marks.released, [end, start])  # Taken back once, under the gate.
        self.assertEqual(gated, [True, True])
        blocked, stats, _, late = comm.take_raw()
        self.assertAlmostEqual(late, 0.4)  # Counted once.
        self.assertEqual(stats, {("all_reduce", "world"): [1, 8, 0.5]})

    def test_gpu_marks_are_bounded_and_go_with_their_group(self):
        comm, marks, world = gpu_comm()
        pg = object()
        pg1 = comm.group(pg, lambda pg: 2)
        old_max = _comm.MAX_DEVICE
        _comm.MAX_DEVICE = 3
        self.addCleanup(setattr, _comm, "MAX_DEVICE", old_max)
        for _ in range(5):  # Beyond 3 awaiting: the oldest count as passed.
            comm.complete(world, comm.enter(world), "all_reduce", 8, 0.0, marks.mark("gpu0"))
        self.assertEqual(comm.sequences()[1], {"world": "2", "pg1": "0"})
        comm.complete(pg1, comm.enter(pg1), "all_reduce", 8, 0.0, marks.mark("gpu0"))
        comm.destroyed(pg)  # Its marks go with it; the world's stay.
        for m in marks.made:
            m[0] = True
        comm.poll_device()
        self.assertEqual(comm.sequences()[:2], ({"world": "5"}, {"world": "5"}))
        self.assertEqual(len(marks.released), 3)  # The world's last 3: the others were dropped.
        self.assertEqual(comm._on_device, 0)

    def test_marks_are_events_on_the_current_stream_reused_per_device(self):
        class Event:
            made = 0

            def __init__(self, enable_timing=False):
                Event.made += 1
                self.timing = enable_timing
                self.stream = None

            def record(self, stream):
                self.stream = stream

            def query(self):
                return self.stream[1] == "gpu0"

            def elapsed_time(self, end):  # Milliseconds, as torch's.
                return 250.0 if self.timing and end.timing else float("nan")

        class Device(str):  # A stand-in torch.device: its name, and .index as a torch.device.
            pass

        gpu0, gpu1 = Device("gpu0"), Device("gpu1")
        gpu0.index, gpu1.index = 0, 1
        capturing = [False]
        devices = []
        current = [1]
        switches = []

        def exchange(index):
            switches.append(index)
            previous, current[0] = current[0], index
            return previous

        cuda = type("cuda", (), {"Event": Event, "current_stream": staticmethod(
            lambda device: ("stream", device)), "is_current_stream_capturing": staticmethod(
                lambda: capturing[0]), "set_device": staticmethod(devices.append),
            "current_device": staticmethod(lambda: current[0]),
            "default_stream": staticmethod(lambda device: ("stream", device)),
            "_exchange_device": staticmethod(exchange),
            "_maybe_exchange_device": staticmethod(exchange)})
        marks = _device.Marks(cuda)
        with marks.on_device() as ok:
            self.assertFalse(ok)  # Nothing marked yet: no device to be on.
        marks.bind_thread()  # Nothing marked yet: no device to take.
        self.assertEqual(devices, [])
        first = marks.mark(gpu0)
        self.assertEqual(first[0].stream, ("stream", gpu0))
        self.assertTrue(marks.done(first))
        self.assertEqual(marks.seconds(first, marks.mark(gpu0)), 0.25)
        marks.release(first)
        self.assertIs(marks.mark(gpu1)[0].__class__, Event)
        self.assertEqual(Event.made, 3)  # Another device's event is not reused...
        again = marks.mark(gpu0)
        self.assertIs(again[0], first[0])  # ... its own device's is.
        with marks.on_device() as ok:  # "gpu0" (a stand-in device) is index 0.
            self.assertTrue(ok)
            self.assertEqual(current, [0])  # Switched to for the poll...
        self.assertEqual((current, switches), ([1], [0, 1]))  # ... and back.
        current[0] = 0
        with marks.on_device() as ok:
            self.assertTrue(ok)
        self.assertEqual(switches, [0, 1])  # Already on it: no switch.
        current[0] = 1
        marks._exchange = None  # A torch without _exchange_device: no poll there.
        with marks.on_device() as ok:
            self.assertFalse(ok)
        self.assertIsNotNone(marks.start(gpu0))  # The default stream: timed...
        cuda.default_stream = staticmethod(lambda device: ("default", device))
        marks._default_stream = cuda.default_stream
        self.assertIsNone(marks.start(gpu0))  # ... a side stream (FSDP's...): not.
        marks.bind_thread()
        marks.bind_thread()  # Once per thread: the first mark's device.
        self.assertEqual(devices, ["gpu0"])
        other = threading.Thread(target=marks.bind_thread)
        other.start()
        other.join()
        self.assertEqual(devices, ["gpu0", "gpu0"])
        self.assertFalse(marks.done(marks.mark(gpu1)))
        capturing[0] = True  # A CUDA graph being captured: no mark.
        self.assertIsNone(marks.mark(gpu0))
        for _ in range(_device.FREE_EVENTS + 5):
            marks.release(("event", "gpu2"))
        self.assertEqual(marks._kept, _device.FREE_EVENTS)

    def test_cuda_device_of_a_collectives_tensors(self):
        gpu = type("T", (), {"is_cuda": True, "device": "cuda:1"})()
        cpu = type("T", (), {"is_cuda": False, "device": "cpu"})()
        self.assertEqual(_device.cuda_device(gpu), "cuda:1")
        self.assertEqual(_device.cuda_device([gpu, cpu]), "cuda:1")
        self.assertEqual(_device.cuda_device([[gpu]]), "cuda:1")
        for value in (cpu, [cpu], [], [[]], None, 3):
            self.assertIsNone(_device.cuda_device(value))

    def test_json_number_is_json_dumps(self):
        for value in (0.0, 1e-07, 0.1, 123456789.125, 1e300, -2.5):
            self.assertEqual(_reporter.json_number(value), json.dumps(value))
        for value, text in ((float("nan"), '"NaN"'), (float("inf"), '"Infinity"'),
                            (float("-inf"), '"-Infinity"')):
            self.assertEqual(_reporter.json_number(value), text)


def skip_before_torch_2(test, expression, what):
    """Skips `test` where the ranks' torch lacks `what` (`expression`, Python over torch and
    importlib.util, is false): allowed before torch 2.0 only, a failure from 2.0 on."""
    probe = subprocess.run(
        [harness.PYTHON, "-c", "import importlib.util, torch; print(torch.__version__, "
         "bool(%s))" % expression], capture_output=True, text=True, timeout=60)
    version, found = probe.stdout.split()
    if found != "True":
        test.assertLess(int(version.split(".")[0]), 2, "torch %s has no %s" % (version, what))
        test.skipTest("torch %s has no %s" % (version, what))


def agent_in_tmpdir(test):
    """(a new directory, a FakeAgent closed when `test` ends)."""
    d = harness.tmpdir()
    agent = harness.FakeAgent(d)
    test.addCleanup(agent.close)
    return d, agent


class FakeMarks:
    """_device.Marks for a CPU test: each mark is [passed, device, GPU time], the test sets
    passed and the time (0 when made)."""

    def __init__(self, own_device=True):
        self.made = []
        self.released = []
        self.bound = False
        # The training thread can make the marks' device its current one (a torch with
        # _exchange_device, or the same device already).
        self.own_device = own_device

    def mark(self, device):
        self.made.append([False, device, 0.0])
        return self.made[-1]

    @staticmethod
    def done(mark):
        return mark[0]

    @staticmethod
    def seconds(start, end):
        return end[2] - start[2]

    def bind_thread(self):
        self.bound = True

    def start(self, device):
        return self.mark(device)

    def on_device(self):
        own = self.own_device

        class OnDevice:
            def __enter__(self):
                return own

            def __exit__(self, *exc):
                pass

        return OnDevice()

    def release(self, mark):
        self.released.append(mark)


def gpu_comm(size=2):
    """A Comm with FakeMarks for its GPU marks, and its world group of `size` ranks."""
    comm = _comm.Comm(clock=lambda: 0.0)
    comm.marks = marks = FakeMarks()
    comm.set_world(None, size)
    return comm, marks, comm.group(None, lambda pg: size)


class SentReports:
    """A reporter stand-in for _ticker.Ticker: keeps what it sends."""

    def __init__(self):
        self.sent = []
        self.moves = 0

    def flush(self):
        pass

    def send(self, kind, body, moves=None):
        del moves
        self.sent.append((kind, body))
        return True


class NoGroups:
    """A Comm stand-in before init_process_group: no group known."""

    @staticmethod
    def sequences():
        return {}, {}, False, 0

    @staticmethod
    def poll_device(side=False):
        del side


class TickerBeforeInitTest(unittest.TestCase):
    def test_before_init_only_a_stalled_stack_goes_with_no_numbers(self):
        # begin() (as torch.distributed is instrumented) starts the thread and takes this
        # thread for the training thread: nothing goes until the rank has stalled
        # STACK_SECONDS, then its stack with no numbers and nothing said of a wait.
        saved = (_core.enabled, _core._owner_pid)
        _core.enabled, _core._owner_pid = True, os.getpid()
        reporter = SentReports()
        reporter.deferring = False
        ticker = _ticker.Ticker(reporter, NoGroups(), interval=3600, flush=3600)
        clock = [50.0]
        try:
            with unittest.mock.patch.object(_ticker, "_monotonic", lambda: clock[0]):
                ticker.begin()
                self.assertTrue(ticker._thread.is_alive())
                self.assertTrue(reporter.deferring)  # Steps go through the thread from now on.
                self.assertFalse(ticker._exit_registered)  # That waits for init_process_group.
                ticker.send()
                clock[0] += _ticker.STACK_SECONDS - 0.1
                ticker.send()
                self.assertEqual(reporter.sent, [])
                clock[0] += 0.2
                ticker.send()
        finally:
            ticker.stop()
            _core.enabled, _core._owner_pid = saved
        (kind, body), = reporter.sent
        self.assertEqual(kind, "collectives")
        self.assertEqual(sorted(body), ["collectiveCompleted", "collectiveEntered", "stack"])
        self.assertEqual((body["collectiveEntered"], body["collectiveCompleted"]), ({}, {}))
        self.assertRegex(body["stack"].split("\n")[-1],
                         r"in test_before_init_only_a_stalled_stack_goes_with_no_numbers$")


class TickerExitTest(unittest.TestCase):
    """The side thread at exit (_ticker.Ticker.exiting): the GPU's last collectives waited for,
    a bounded time, then reports that never call into torch."""

    def setUp(self):
        saved = (_core.enabled, _core._owner_pid)
        _core.enabled, _core._owner_pid = True, os.getpid()
        self.addCleanup(lambda: setattr(_core, "enabled", saved[0]))
        self.addCleanup(lambda: setattr(_core, "_owner_pid", saved[1]))
        self.comm, self.marks, self.world = gpu_comm(2)
        self.reporter = SentReports()
        self.ticker = _ticker.Ticker(self.reporter, self.comm)
        self.polls = []
        poll = self.comm.poll_device

        def counted(side=False):
            self.polls.append(side)
            poll(side)

        self.comm.poll_device = counted

    def queue(self):
        """A collective on GPU tensors, returned on the host, its mark not yet passed."""
        mark = self.marks.mark("gpu0")
        self.comm.complete(self.world, self.comm.enter(self.world), "all_reduce", 8, 0.001, mark)
        return mark

    def test_polls_until_the_gpu_is_through_then_reports_without_torch(self):
        mark = self.queue()
        poll = self.comm.poll_device

        def third_look(side=False):
            mark[0] = len(self.polls) >= 2  # The GPU gets through by the third look.
            poll(side)

        self.comm.poll_device = third_look
        self.ticker.exiting()
        self.assertEqual(self.polls, [False] * 3)  # The calling (training) thread's polls.
        self.assertEqual(self.comm.sequences()[1], {"world": "1"})
        self.queue()[0] = True  # Passed, but no one asks the GPU any more.
        self.ticker.tick()
        self.assertEqual(len(self.polls), 3)
        self.assertEqual(self.reporter.sent[-1][1]["collectiveEntered"], {"world": "2"})
        self.assertEqual(self.reporter.sent[-1][1]["collectiveCompleted"], {"world": "1"})

    def test_a_gpu_that_never_gets_through_is_waited_for_a_bounded_time(self):
        self.queue()
        with unittest.mock.patch.object(_ticker, "EXIT_POLL_SECONDS", 0.05):
            self.ticker.exiting()
        self.assertGreaterEqual(len(self.polls), 1)
        self.assertEqual(self.comm.sequences()[1], {"world": "0"})
        self.ticker.tick()
        self.assertEqual(self.reporter.sent[-1][1]["collectiveCompleted"], {"world": "0"})

    def test_a_forked_child_neither_waits_for_the_lock_nor_polls(self):
        # A child forked while the side thread ticked holds a copy of the lock, taken for good.
        self.assertTrue(self.ticker._tick_lock.acquire(timeout=1))
        self.addCleanup(self.ticker._tick_lock.release)
        _core._owner_pid = os.getpid() + 1
        self.queue()[0] = True
        self.ticker.exiting()  # Returns at once (a wait would hang this test: bazel's timeout).
        self.assertEqual(self.polls, [])


class StepNumbers:
    """A reporter stand-in for _steps.Steps: keeps the numbers of the step reports deferred."""

    def __init__(self):
        self.steps = []

    def defer(self, kind, encode, raw):
        self.steps.append(int(json.loads("{%s}" % encode(raw))["step"]))


class StepCountTest(unittest.TestCase):
    """The optimizer's step count, read again only when the state's step may have jumped."""

    def test_count_follows_the_optimizers_state_through_loads(self):
        import torch  # Debian's python3-torch, as the ranks use.
        from _ringmaster_watch import _steps

        reporter = StepNumbers()
        steps = _steps.Steps(torch, reporter, _comm.Comm())
        param = torch.nn.Parameter(torch.ones(3))
        opt = torch.optim.AdamW([param], lr=0.1)

        def step():
            param.grad = torch.ones(3)
            opt.step()
            steps.step_ended(opt)

        for _ in range(3):
            step()
        saved = opt.state_dict()  # At step 3.
        saved["state"][0]["step"] = torch.tensor(40.0)  # A checkpoint of a later run.
        opt.load_state_dict(saved)
        step()  # 41: the loaded state's count, not the watch's own 4.
        step()
        next(iter(opt.state.values()))["step"] = torch.tensor(99.0)  # Replaced by the program.
        step()
        sgd = torch.optim.SGD([param], lr=0.1)  # No state step: counts on from the watch's.
        steps._primary = None
        param.grad = torch.ones(3)
        sgd.step()
        steps.step_ended(sgd)
        self.assertEqual(reporter.steps, [1, 2, 3, 41, 42, 100, 101])

    def test_gpu_waits_found_late_are_charged_and_carried(self):
        # A step end polls the GPU marks before its snapshot; a GPU wait found then (of an
        # earlier step) fills what the step has left, the rest goes with the next steps (at
        # most one step's worth). Host time beyond a step (before the first) is not carried.
        import torch
        from _ringmaster_watch import _steps

        class Reports:
            def __init__(self):
                self.comm, self.rows = [], []

            def defer(self, kind, encode, raw):
                report = json.loads("{%s}" % encode(raw))
                self.comm.append(round(report["commSeconds"], 6))
                self.rows.append([(c["op"], c["count"], c["bytes"], round(c["seconds"], 6))
                                  for c in report.get("collectives", [])])

        comm, marks, world = gpu_comm()
        now = [10.0]
        reports = Reports()
        steps = _steps.Steps(torch, reports, comm, clock=lambda: now[0])
        steps._activated = now[0]
        opt = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)

        def step():
            now[0] += 1.0  # Each step lasts 1 s.
            steps.step_ended(opt)

        comm.complete(world, comm.enter(world), "barrier", 0, 5.0)  # Before the first step.
        step()
        start, end = marks.mark("gpu0"), marks.mark("gpu0")
        comm.complete(world, comm.enter(world), "all_reduce", 8, 0.25, end, start)
        step()  # Its GPU not through yet: the host's 0.25 s.
        start[0] = end[0] = True
        end[2] = 3.25  # The GPU waited 3.25 s in it.
        for _ in range(3):
            step()
        self.assertEqual(reports.comm, [1.0, 0.25, 1.0, 1.0, 0.0])
        self.assertEqual(reports.rows[:3], [[("barrier", "1", "0", 5.0)], [],
                                            [("all_reduce", "1", "8", 3.25)]])

    def test_another_optimizer_takes_the_clock_only_when_the_first_goes_quiet(self):
        # The first optimizer to step is the clock. A second stepping twice per clock step (a
        # GAN's critic) does not take it. When only the second steps on (a program's new
        # optimizer for a second phase, the first still referenced), it takes the clock once
        # the first has been quiet for more than SWITCH_INTERVALS of its usual step time, its
        # steps since counted then: else no progress, a false hang.
        import torch
        from _ringmaster_watch import _steps

        now = [0.0]
        reporter = StepNumbers()
        steps = _steps.Steps(torch, reporter, _comm.Comm(), clock=lambda: now[0])
        param = torch.nn.Parameter(torch.ones(3))
        first = torch.optim.SGD([param], lr=0.1)
        second = torch.optim.SGD([param], lr=0.1)

        def step(opt):
            now[0] += 1.0
            param.grad = torch.ones(3)
            opt.step()
            steps.step_ended(opt)

        for _ in range(4):  # The clock's steps take 1, 3, 3, 3 s: its usual time 2.16 s.
            step(first)
            step(second)
            step(second)
        self.assertEqual(reporter.steps, [1, 2, 3, 4])
        for _ in range(4):  # Quiet 3 to 6 s: within 3 x 2.16 s.
            step(second)
        self.assertEqual(reporter.steps, [1, 2, 3, 4])
        step(second)  # Quiet 7 s: the clock now, its 7 steps since counted (5 to 11).
        step(second)
        step(first)  # Once between two of the clock's: not counted.
        step(second)
        self.assertEqual(reporter.steps, [1, 2, 3, 4, 11, 12, 13])


class DdpTest(unittest.TestCase):
    """One baseline run without the watch; the watched runs compare with it bit for bit."""

    @classmethod
    def setUpClass(cls):
        cls.dir = harness.tmpdir()
        cls.base = os.path.join(cls.dir, "base")
        results = harness.run_ranks(harness.train_argv(cls.base, *TRAIN_ARGS), 2, cls.dir,
                                    watch=False)
        for rc, log in results:
            assert rc == 0, log
        cls.base_params = [harness.load_params("%s.%d" % (cls.base, r)) for r in range(2)]

    def run_watched(self, name, argv_prefix=(), extra_args=(), world=2, timeout=120):
        d, agent = agent_in_tmpdir(self)
        out = os.path.join(d, name)
        argv = list(argv_prefix) + harness.train_argv(out, *TRAIN_ARGS, *extra_args)
        results = harness.run_ranks(argv, world, d, agent=agent, timeout=timeout)
        for rc, log in results:
            self.assertEqual(rc, 0, log)
        return agent, out, results

    def test_reports_steps_collectives_and_identical_results(self):
        agent, out, results = self.run_watched("watched", argv_prefix=[write_wrapper("")])
        for rank in range(2):
            self.assertIn("followed by: the sequence number", results[rank][1])
            self.assertEqual(harness.load_params("%s.%d" % (out, rank)), self.base_params[rank],
                             "rank %d's parameters differ with the watch" % rank)
            self.assertNotIn("ringmaster watch", results[rank][1])
            self.assertNotIn("lr_scheduler.step()", results[rank][1])  # The scheduler still sees steps.
        agent.wait_for(lambda a: all(len(a.reports("step", r)) == STEPS for r in range(2)),
                       what="every step report")
        steps = steps_by_rank(agent, 2)
        for rank in range(2):
            self.assertEqual([int(s["step"]) for s in steps[rank]], list(range(1, STEPS + 1)))
            first = steps[rank][0]
            self.assertEqual(first["startStep"], "0")
            self.assertGreater(int(first["processStartUnixNanos"]), 0)
            self.assertGreater(first["rendezvousSeconds"], 0)
            self.assertEqual(first["worker"], {"jobId": "job-0001", "generation": "2",
                                               "rank": rank, "token": "tok-%d" % rank})
            for s in steps[rank]:
                self.assertGreater(s["stepSeconds"], 0)
                self.assertGreater(s["commSeconds"], 0)
                self.assertGreater(s["computeSeconds"], 0)
                self.assertAlmostEqual(s["computeSeconds"] + s["commSeconds"], s["stepSeconds"])
                self.assertIsInstance(s["loss"], float)
                ops = {(c["op"], c["group"]) for c in s["collectives"]}
                if int(s["step"]) > 1:
                    self.assertLessEqual({("all_reduce", "world"), ("all_reduce", "pg1"),
                                          ("broadcast", "world"), ("barrier", "world")}, ops)
                    barriers = [c for c in s["collectives"] if c["op"] == "barrier"]
                    self.assertEqual(barriers[0]["count"], "2")  # barrier, monitored_barrier
        # The same collectives in the same order on both ranks: equal sequence numbers.
        for a, b in zip(steps[0], steps[1]):
            self.assertEqual(a["collectiveEntered"], b["collectiveEntered"])
            self.assertEqual(a["collectiveCompleted"], a["collectiveEntered"])
        last = steps[0][-1]["collectiveEntered"]
        # Each step: DDP's buckets (more than one) for 2 backward passes, then 4 calls.
        self.assertGreater(int(last["world"]), STEPS * 2 * 2)
        self.assertEqual(last["pg1"], str(STEPS - 1))  # The script's own come after opt.step().
        # Checkpoints: rank 0 saved at steps 3 and 6, every rank its parameters at the end.
        phases = agent.reports("phase", 0)
        self.assertEqual([p["phase"] for p in phases],
                         ["WORKER_PHASE_CHECKPOINT", "WORKER_PHASE_STEP"] * 3)
        self.assertEqual([p.get("checkpointStep") for p in phases[1::2]], ["3", "6", "6"])

        # A resumed run continues the optimizer's count and says where it started.
        agent2, _, _ = self.run_watched(
            "resumed", extra_args=["--resume", out + ".ckpt", "--steps", "2"])
        agent2.wait_for(lambda a: len(a.reports("step", 1)) == 2, what="resumed steps")
        resumed = steps_by_rank(agent2, 2)[1]
        self.assertEqual([s["step"] for s in resumed], ["7", "8"])
        self.assertEqual(resumed[0]["startStep"], "6")
        self.assertGreater(resumed[0]["restoreSeconds"], 0)

    def test_ddp_buffer_broadcasts_count_as_broadcasts(self):
        # A BatchNorm's buffers, broadcast by DDP before each forward: a "broadcast" row with
        # their bytes and time, every collective in exactly one row, and the same results.
        d = harness.tmpdir()
        base = os.path.join(d, "base")
        for rc, log in harness.run_ranks(harness.train_argv(base, *TRAIN_ARGS, "--buffers"), 2,
                                         d, watch=False):
            self.assertEqual(rc, 0, log)
        agent, out, _ = self.run_watched("buffers", extra_args=["--buffers"])
        for rank in range(2):
            self.assertEqual(harness.load_params("%s.%d" % (out, rank)),
                             harness.load_params("%s.%d" % (base, rank)))
        agent.wait_for(lambda a: all(len(a.reports("step", r)) == STEPS for r in range(2)),
                       what="every step report")
        buffer_bytes = 2 * 4 * 300 + 8  # running mean and variance, float32; the count.
        for rank, steps in steps_by_rank(agent, 2).items():
            for before, s in zip(steps, steps[1:]):
                rows = {(c["op"], c["group"]): c for c in s["collectives"]}
                world = sum(int(c["count"]) for (_, g), c in rows.items() if g == "world")
                self.assertEqual(world, int(s["collectiveEntered"]["world"])
                                 - int(before["collectiveEntered"]["world"]), s)
                broadcast = rows[("broadcast", "world")]
                # The script's own broadcast, and DDP's at each of the 2 forwards.
                self.assertGreaterEqual(int(broadcast["count"]), 3)
                self.assertGreaterEqual(int(broadcast["bytes"]), 2 * buffer_bytes)
                self.assertGreater(broadcast["seconds"], 0)

    def test_init_device_mesh_is_seen_as_init_process_group(self):
        # torch.distributed.device_mesh took init_process_group by name while torch.distributed
        # imported, before the watch patched it: init_device_mesh's call is seen all the same
        # (its rendezvous, the side thread's reports), with the same results.
        skip_before_torch_2(self, "importlib.util.find_spec('torch.distributed.device_mesh') "
                            "is not None", "torch.distributed.device_mesh")
        agent, out, _ = self.run_watched("mesh", extra_args=["--device-mesh"])
        for rank in range(2):
            self.assertEqual(harness.load_params("%s.%d" % (out, rank)), self.base_params[rank])
        agent.wait_for(lambda a: all(len(a.reports("step", r)) == STEPS for r in range(2)),
                       what="every step report")
        for rank, steps in steps_by_rank(agent, 2).items():
            self.assertGreater(steps[0]["rendezvousSeconds"], 0)
            self.assertEqual(steps[0]["collectiveEntered"]["rendezvous"], "1")
            self.assertTrue([r for r in agent.reports("collectives", rank)
                             if r.get("blockedKnown")], "no side thread's report")

    def test_accumulation_under_no_sync_reduces_once_per_step(self):
        # The usual gradient accumulation: DDP reduces only the last micro-batch's gradients
        # (no_sync() before it). The same results as without the watch, every step reported,
        # and the world group's count moving by one backward's buckets, not two, per step.
        # nanoGPT's require_backward_grad_sync = False: the same as no_sync(), bit for bit.
        d = harness.tmpdir()
        base = os.path.join(d, "base")
        for rc, log in harness.run_ranks(
                harness.train_argv(base, *TRAIN_ARGS, "--no-sync", "context"), 2, d,
                watch=False):
            self.assertEqual(rc, 0, log)
        flagged, flagged_out, _ = self.run_watched("flag", extra_args=["--no-sync", "flag"])
        agent, out, _ = self.run_watched("nosync", extra_args=["--no-sync", "context"])
        for rank in range(2):
            want = harness.load_params("%s.%d" % (base, rank))
            self.assertEqual(harness.load_params("%s.%d" % (out, rank)), want)
            self.assertEqual(harness.load_params("%s.%d" % (flagged_out, rank)), want)
        agent.wait_for(lambda a: all(len(a.reports("step", r)) == STEPS for r in range(2)),
                       what="every step report")
        flagged.wait_for(lambda a: len(a.reports("step", 1)) == STEPS, what="flagged steps")
        for a, b in zip(steps_by_rank(flagged, 2)[1], steps_by_rank(agent, 2)[1]):
            self.assertEqual(a["collectiveEntered"], b["collectiveEntered"])
        steps = steps_by_rank(agent, 2)
        for a, b in zip(steps[0], steps[1]):
            self.assertEqual(a["collectiveEntered"], b["collectiveEntered"])
            self.assertEqual(a["collectiveCompleted"], a["collectiveEntered"])
        world = [int(s["collectiveEntered"]["world"]) for s in steps[0]]
        # Per step: DDP's buckets once (half a synced accumulation's), then the script's
        # broadcast, barrier and monitored_barrier on the world group (its all_reduce is pg1's).
        synced, _, _ = self.run_watched("synced")
        synced.wait_for(lambda a: len(a.reports("step", 0)) == STEPS, what="synced steps")

        def buckets(reports, step):
            return sum(int(c["count"]) for c in reports[step]["collectives"]
                       if (c["op"], c["group"]) == ("all_reduce", "world"))

        for later in range(2, STEPS):
            once = buckets(steps[0], later)
            self.assertGreater(once, 1)  # more than one bucket: 1.5 MB of gradients
            self.assertEqual(buckets(steps_by_rank(synced, 1)[0], later), 2 * once)
            self.assertEqual(world[later] - world[later - 1], once + 3, world)
            self.assertGreater(steps[0][later]["commSeconds"], 0)

    def test_every_step_of_a_fast_run_arrives_in_order(self):
        # Steps of a few milliseconds: their reports leave in batches (one datagram for the
        # steps of ~0.5 s), none lost to the agent's datagram queue, the last ones at exit.
        steps = 60
        agent, _, _ = self.run_watched("fast", extra_args=["--steps", str(steps)])
        agent.wait_for(lambda a: all(len(a.reports("step", r)) == steps for r in range(2)),
                       what="every step report")
        for rank in range(2):
            self.assertEqual([int(s["step"]) for s in agent.reports("step", rank)],
                             list(range(1, steps + 1)))

    def test_distributed_checkpoint_is_the_checkpoint_phase(self):
        # torch.distributed.checkpoint's save (1.13: save_state_dict) on every rank after step 2
        # is the checkpoint phase, its own collectives counted alike on both ranks. Also in the
        # phases: rank 0's torch.save at step 3 (--save-every) and every rank's at the end.
        # Debian's 1.13 ships without the module: skipped there, required from 2.0 on.
        skip_before_torch_2(self, "importlib.util.find_spec('torch.distributed.checkpoint') "
                            "is not None", "torch.distributed.checkpoint")
        agent, out, _ = self.run_watched("dcp", extra_args=["--steps", "4", "--dcp-save-at", "2"])
        self.assertTrue(os.path.exists(os.path.join(out + ".dcp", ".metadata")))
        agent.wait_for(lambda a: all(len(a.reports("step", r)) == 4 for r in range(2)),
                       what="every step report")
        for rank, saved in ((0, ["2", "3", "4"]), (1, ["2", "4"])):
            phases = agent.reports("phase", rank)
            self.assertEqual([p["phase"] for p in phases],
                             ["WORKER_PHASE_CHECKPOINT", "WORKER_PHASE_STEP"] * len(saved), rank)
            self.assertEqual([p.get("checkpointStep") for p in phases[1::2]], saved, rank)
        steps = steps_by_rank(agent, 2)
        for a, b in zip(steps[0], steps[1]):
            self.assertEqual(a["collectiveEntered"], b["collectiveEntered"])

    def test_a_process_group_made_again_is_counted_afresh(self):
        # After step 3 every rank destroys the process group and makes it again (DDP again over
        # the same model): the counts start again from 0, DDP's buckets counted by the new
        # group's own number (not the destroyed one's, which no longer moves), equal on both
        # ranks; the group made by new_group again takes the next name.
        agent, _, _ = self.run_watched("reinit", extra_args=["--reinit-at", "3"])
        agent.wait_for(lambda a: all(len(a.reports("step", r)) == STEPS for r in range(2)),
                       what="every step report")
        steps = steps_by_rank(agent, 2)
        for a, b in zip(steps[0], steps[1]):
            self.assertEqual(a["collectiveEntered"], b["collectiveEntered"])
        world = [int(s["collectiveEntered"]["world"]) for s in steps[0]]
        self.assertLess(world[3], world[2], world)  # Step 4: the new group's, from 0.
        # Each step after it: DDP's buckets of 2 backward passes, then the script's calls.
        self.assertEqual(world[4] - world[3], world[2] - world[1], world)
        self.assertEqual(world[5] - world[4], world[2] - world[1], world)
        # The rendezvous of the second init_process_group, counted afresh too.
        self.assertEqual(set(steps[0][-1]["collectiveEntered"]), {"rendezvous", "world", "pg2"})
        self.assertEqual(steps[0][-1]["collectiveEntered"]["rendezvous"], "1")
        self.assertEqual([int(s["step"]) for s in steps[0]], list(range(1, STEPS + 1)))

    def test_unknown_torch_disables_and_leaves_results_identical(self):
        # A torch unlike any the watch knows, in each of the two ways DDP is followed: a
        # process group whose sequence number is not a number, and (the comm hook) a
        # GradBucket without is_last. The first forward finds out.
        for name, breakage, said in (
                ("seq", "torch._C._distributed_c10d.ProcessGroup._get_sequence_number_for_group"
                        " = lambda self: 'seven'", "invalid literal for int()"),
                ("hook", "del torch._C._distributed_c10d.GradBucket.is_last",
                 "GradBucket.is_last is missing")):
            with self.subTest(name):
                wrapper = write_wrapper(breakage, prefer_hook=name == "hook")
                agent, out, results = self.run_watched("broken", argv_prefix=[wrapper])
                for rank in range(2):
                    self.assertEqual(harness.load_params("%s.%d" % (out, rank)),
                                     self.base_params[rank])
                    log = results[rank][1]
                    self.assertEqual(log.count("ringmaster watch: disabled:"), 1, log)
                    self.assertIn(said, log)
                self.assertEqual(agent.reports("step"), [])
                # Each rank said its watch ended: its silence is no hang (local_watchdog.h).
                agent.wait_for(lambda a: len([r for r in a.reports("collectives")
                                              if r.get("watchEnded")]) == 2,
                               what="both ranks' last word")

    def test_comm_hook_reports_steps_and_same_arithmetic_as_ddp(self):
        # The fallback for groups that keep no sequence number: the comm hook. 1/3 is not
        # exact: the hook must multiply as DDP's reducer does, bit for bit.
        d = harness.tmpdir()
        args = ["--steps", "3", "--optimizer", "sgd"]
        base = os.path.join(d, "base")
        for rc, log in harness.run_ranks(harness.train_argv(base, *args), 3, d, watch=False):
            self.assertEqual(rc, 0, log)
        agent = harness.FakeAgent(d)
        self.addCleanup(agent.close)
        out = os.path.join(d, "watched")
        wrapper = write_wrapper("", prefer_hook=True)
        for rc, log in harness.run_ranks([wrapper] + harness.train_argv(out, *args), 3, d,
                                         agent=agent):
            self.assertEqual(rc, 0, log)
            self.assertIn("followed by: the comm hook", log)
        for rank in range(3):
            self.assertEqual(harness.load_params("%s.%d" % (out, rank)),
                             harness.load_params("%s.%d" % (base, rank)))
        agent.wait_for(lambda a: len(a.reports("step", 2)) == 3, what="steps of rank 2")
        steps = steps_by_rank(agent, 3)
        # SGD keeps no step count: counted from 1.
        self.assertEqual([s["step"] for s in steps[2]], ["1", "2", "3"])
        for rank in range(3):
            for s in steps[rank]:
                self.assertGreater(s["commSeconds"], 0)
                self.assertEqual(s["collectives"][0]["op"], "all_reduce")
        for a, b in zip(steps[0], steps[2]):
            self.assertEqual(a["collectiveEntered"], b["collectiveEntered"])
        self.assertGreater(int(steps[2][-1]["collectiveEntered"]["world"]), 3)


def write_wrapper(code, prefer_hook=False):
    """A script that runs `code` (after importing torch.distributed, so after the watch has
    instrumented it), then the training script given after it; at exit it prints how the watch
    followed DDP ("followed by: the sequence number" or "... the comm hook")."""
    wrapper = os.path.join(harness.tmpdir(), "wrapper.py")
    with open(wrapper, "w") as f:
        f.write(textwrap.dedent("""\
            import atexit, runpy, sys
            import torch, torch.distributed
            watch = sys.modules.get("_ringmaster_watch")
            if {prefer_hook} and watch is not None:
                watch._ddp.DdpWatch.prefer_hook = True
            def said():
                ddp = watch._watch_state.get("ddp") if watch is not None else None
                if ddp is not None:
                    sys.stderr.write("followed by: %s\\n" % (
                        "the sequence number" if ddp.counted else "the comm hook"))
            atexit.register(said)
            {code}
            sys.argv = sys.argv[1:]
            runpy.run_path(sys.argv[0], run_name="__main__")
            """).format(prefer_hook=prefer_hook, code=code))
    return wrapper


class CompilerMarksTest(unittest.TestCase):
    def test_every_code_object_of_the_watch_is_kept_out_once(self):
        from _ringmaster_watch import _collectives, _compiler, _steps  # noqa: F401
        marked = []
        fake_torch = type(sys)("fake_torch")
        fake_torch._C = type(sys)("fake_torch._C")
        fake_torch._C._dynamo = type(sys)("fake_torch._C._dynamo")
        fake_torch._C._dynamo.eval_frame = type(sys)("eval_frame")
        fake_torch._C._dynamo.eval_frame.skip_code = marked.append
        self.assertEqual(_compiler.keep_out(type(sys)("torch_without_dynamo")), 0)
        _compiler.keep_out(fake_torch)  # Whatever an earlier test left unmarked...
        self.assertEqual(_compiler.keep_out(fake_torch), 0)  # ... once only.
        codes = set(_compiler._kept_out)
        names = {c.co_name for c in codes}
        # Module functions, methods, and the closures inside them: the collectives' wrapper
        # (a frame of ours run eagerly is skipped; traced, it is inlined: not an entry).
        self.assertLessEqual({"encode_step", "step_ended", "_wrap", "wrapper",
                              "_watched_step_for", "keep_out"}, names)
        self.assertIn(_collectives.Collectives._wrap.__code__, codes)
        self.assertTrue(any(getattr(c, "co_name", None) == "wrapper" and c in codes
                            for c in _collectives.Collectives._wrap.__code__.co_consts))
        watch_dir = os.path.dirname(os.path.abspath(_compiler.__file__))
        for code in codes:
            self.assertEqual(os.path.dirname(os.path.abspath(code.co_filename)), watch_dir)
        self.assertFalse(hasattr(_collectives.Collectives._wrap, "_torchdynamo_disable"))
        self.assertTrue(_compiler.entry(lambda: None)._torchdynamo_disable)


class CompileTest(unittest.TestCase):
    def test_a_compiled_step_compiles_as_without_the_watch(self):
        # compiled_train.py: torch.compile over DDP's forward, backward and Adam's step, a
        # custom optimizer's step, fullgraph=True all-reduces (the second after the watch has
        # disabled itself) and a fullgraph=True DDP forward (python_reducer). TorchDynamo must
        # never trace or compile the watch's own code (its break tracebacks would name it),
        # break and compile the same graphs as without the watch, print no warning of ours,
        # and the results must be the same bit for bit, while the watch still reports each
        # step and DDP's buckets. torch 1.13 has no torch.compile: skipped there.
        skip_before_torch_2(self, "callable(getattr(torch, 'compile', None))",
                            "torch.compile")
        d, agent = agent_in_tmpdir(self)
        steps = 6
        logs = {}
        for name, watch in (("base", False), ("watched", True)):
            argv = [os.path.join(harness.HERE, "compiled_train.py"), "--steps", str(steps),
                    "--out", os.path.join(d, name), "--disable-watch"]
            results = harness.run_ranks(argv, 2, d, timeout=300, watch=watch,
                                        agent=agent if watch else None,
                                        extra={"TORCH_LOGS": "graph_breaks"})
            for rc, log in results:
                self.assertEqual(rc, 0, log)
            logs[name] = [log for _, log in results]
        for rank in range(2):
            base, watched = (load_saved(os.path.join(d, "%s.%d" % (name, rank)))
                             for name in ("base", "watched"))
            self.assertEqual(watched, base, "rank %d differs with the watch" % rank)
            self.assertTrue(base["graphs"])
            log = logs["watched"][rank]
            self.assertIn("Graph break", log)  # TORCH_LOGS took: the test sees the breaks.
            # The watch's files show in break tracebacks only as the traced pass-throughs of
            # DDP's forward and buffer wrappers (a break inside the watch names its own line).
            lines = log.splitlines()
            for i, line in enumerate(lines):
                if "_ringmaster_watch" in line:
                    self.assertRegex(line, r'File ".*/_ringmaster_watch/_ddp\.py", line \d+, '
                                           r'in wrapper$')
                    self.assertIn(lines[i + 1].split("]")[-1].strip(),
                                  ("return forward(ddp, *args, **kwargs)",
                                   "return sync_buffers(ddp, *args, **kwargs)"))
            self.assertEqual([line for line in log.splitlines() if "ringmaster watch" in line],
                             ["ringmaster watch: disabled: compiled_train.py --disable-watch"])
            warnings = {line for line in log.splitlines() if "Warning" in line}
            self.assertEqual(warnings - set(logs["base"][rank].splitlines()), set())
        agent.wait_for(lambda a: all(len(a.reports("step", r)) == steps for r in range(2)),
                       what="every step report")
        ranks = steps_by_rank(agent, 2)
        for rank in range(2):
            self.assertEqual([int(s["step"]) for s in ranks[rank]], list(range(1, steps + 1)))
            for s in ranks[rank][1:]:
                counts = {c["op"]: int(c["count"]) for c in s["collectives"]}
                self.assertGreaterEqual(counts.get("all_reduce", 0), 1, s)
                self.assertGreater(s["commSeconds"], 0)
        for a, b in zip(ranks[0], ranks[1]):
            self.assertEqual(a["collectiveEntered"], b["collectiveEntered"])


def load_saved(path):
    """compiled_train.py's results: losses, graphs and the all-reduced tensor as they are,
    parameters as raw bytes (bitwise comparison)."""
    code = ("import json, sys, torch; r = torch.load(sys.argv[1]); "
            "r['params'] = [p.numpy().tobytes().hex() for p in r['params']]; "
            "r['losses'] = [repr(x) for x in r['losses']]; "
            "sys.stdout.write(json.dumps(r))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return json.loads(subprocess.run([harness.PYTHON, "-c", code, path], env=env, check=True,
                                     capture_output=True, text=True, timeout=60).stdout)


class ThreadCpuTest(unittest.TestCase):
    def test_a_threads_own_cpu_is_read_and_an_unknown_thread_reads_zero(self):
        # The side thread's reports give the training thread's CPU (threadCpuSeconds): this
        # thread's grows as it runs, while an idle thread's does not (it is per thread, not the
        # process's); no thread, or one not in this process, reads 0 (unknown).
        idle_id, ready, done = [], threading.Event(), threading.Event()

        def idle():
            idle_id.append(threading.get_native_id())
            ready.set()
            done.wait(60)

        other = threading.Thread(target=idle, daemon=True)
        other.start()
        try:
            self.assertTrue(ready.wait(30))
            me = threading.get_native_id()
            before, idle_before = (_ticker.thread_cpu_seconds(me),
                                   _ticker.thread_cpu_seconds(idle_id[0]))
            self.assertGreater(before, 0)
            deadline, x = time.monotonic() + 30, 0
            while (_ticker.thread_cpu_seconds(me) < before + 0.3
                   and time.monotonic() < deadline):
                for i in range(20000):
                    x += i
            self.assertGreaterEqual(_ticker.thread_cpu_seconds(me), before + 0.3)
            self.assertLess(_ticker.thread_cpu_seconds(idle_id[0]) - idle_before, 0.1)
        finally:
            done.set()
            other.join(30)
        self.assertEqual(_ticker.thread_cpu_seconds(None), 0.0)
        self.assertEqual(_ticker.thread_cpu_seconds(2 ** 31 - 1), 0.0)


class StuckRankTest(unittest.TestCase):
    def test_side_thread_reports_while_blocked(self):
        self.check_blocked_while_a_peer_is_stuck()

    def test_side_thread_reports_while_in_the_forwards_buffer_broadcast(self):
        # A module with buffers (BatchNorm): DDP broadcasts them before each forward's
        # compute, so rank 0 waits there, not in the backward's buckets.
        self.check_blocked_while_a_peer_is_stuck("--buffers")

    def test_side_thread_reports_while_in_the_ddp_constructor(self):
        # Rank 1 blocks before constructing DDP (a checkpoint load from a dead mount): rank 0
        # waits in DDP's constructor, blocked inside the collectives the group's number says it
        # entered, while rank 1 says it is at #0 and not blocked; once released, both count the
        # constructor's collectives alike and train on.
        def while_stuck(agent):
            def waiting(a):
                mine = a.reports("collectives", 0)
                theirs = a.reports("collectives", 1)
                return (len(mine) >= 2 and theirs and all(
                    r.get("blocked") is True
                    # (The rendezvous' reports come first, without "world".)
                    and int(r["collectiveEntered"].get("world", 0))
                    > int(r["collectiveCompleted"].get("world", 0)) for r in mine[-2:])
                    and theirs[-1].get("blocked") is False
                    and theirs[-1]["collectiveEntered"].get("world") == "0")

            agent.wait_for(waiting, timeout=30, what="rank 0 blocked in DDP's constructor")
            self.assertEqual(agent.reports("step", 0), [])  # before any step
            # With the wait torch allows it (init_process_group's default, gloo: 30 min).
            self.assertEqual(agent.reports("collectives", 0)[-1]["timeoutSeconds"], 1800.0)
            self.assertEqual(agent.reports("collectives", 0)[-1]["collectiveCompleted"]["world"],
                             "0")
            return agent.reports("collectives", 0)[-1]["collectiveEntered"]["world"]

        agent, entered = self.run_stuck(3, 0, while_stuck)
        # The same numbering on both ranks, the constructor's collectives in it: from the first
        # step on, and past what rank 0 had entered while it waited in the constructor.
        for which in (0, -1):
            numbers = [agent.reports("step", r)[which]["collectiveEntered"]["world"]
                       for r in (0, 1)]
            self.assertEqual(numbers[0], numbers[1])
            self.assertGreater(int(numbers[0]), int(entered))

    def test_side_thread_reports_while_in_init_process_groups_rendezvous(self):
        # Rank 1 blocks before init_process_group (a download): rank 0 waits in its
        # rendezvous, and says so from the call on (at once: on torch 1.13 its side thread is
        # silent there, the store's wait holding the GIL); rank 1 has no numbers to report (the
        # coordinator names it, coordinator/hang_analysis.h), but once stalled for
        # STACK_SECONDS its side thread, started as torch.distributed was instrumented, says
        # where its main thread is, in reports with no numbers that say nothing of a wait.
        # Released, both pass it and train.
        def while_stuck(agent):
            def waiting(a):
                # (A loaded machine may have its side thread send a stalled stack between the
                # import of torch and init_process_group: no numbers, no blockedKnown.)
                mine = [r for r in a.reports("collectives", 0) if r.get("blockedKnown")]
                return mine and all(
                    r.get("blocked") is True and r["collectiveEntered"] == {"rendezvous": "1"}
                    and r["collectiveCompleted"] == {"rendezvous": "0"} for r in mine)

            agent.wait_for(waiting, timeout=30, what="rank 0 blocked in the rendezvous")
            # With the wait torch allows it (init_process_group's default, gloo: 30 min).
            self.assertEqual(agent.reports("collectives", 0)[-1]["timeoutSeconds"], 1800.0)
            # (On a loaded host an earlier one may have caught the rest of its import of torch.)
            agent.wait_for(lambda a: a.reports("collectives", 1) and a.reports(
                "collectives", 1)[-1]["stack"].endswith(" in wait_for_release"), timeout=30,
                what="rank 1's stack in wait_for_release")
            for report in agent.reports("collectives", 1):
                self.assertEqual(report["collectiveEntered"], {})
                self.assertEqual(report["collectiveCompleted"], {})
                self.assertNotIn("blockedKnown", report)
                self.assertNotIn("blocked", report)
            frames = agent.reports("collectives", 1)[-1]["stack"].split("\n")
            self.assertRegex(frames[0], r"/ddp_train\.py:\d+ in <module>$")
            self.assertRegex(frames[1], r"/ddp_train\.py:\d+ in main$")
            self.assertRegex(frames[-1], r"ddp_train\.py:\d+ in wait_for_release$")
            self.assertEqual(agent.reports("step", 0), [])

        agent, _ = self.run_stuck(3, -1, while_stuck)
        for r in (0, 1):
            step = agent.reports("step", r)[-1]
            self.assertEqual(step["collectiveEntered"]["rendezvous"], "1")
            self.assertEqual(step["collectiveCompleted"]["rendezvous"], "1")
            # Not a collective: nothing of it in the step's waits.
            self.assertNotIn("rendezvous", [c["group"] for c in step.get("collectives", [])])

    def test_a_stalled_ranks_reports_say_where_its_training_thread_is(self):
        # Rank 1 stalls outside any collective (polling for the release), rank 0 waits for it
        # inside DDP's backward: after STACK_SECONDS without a move, each one's reports carry
        # its training thread's stack, outermost first, without the watch's own frames.
        def while_stuck(agent):
            def stacks(a):  # (Not a stack sent before init_process_group, on a loaded host.)
                return [[r.get("stack", "") for r in a.reports("collectives", rank)
                         if r.get("blockedKnown")] for rank in (0, 1)]

            agent.wait_for(lambda a: all(any(s) for s in stacks(a)), timeout=40,
                           what="both ranks' stacks")
            self.assertEqual(len(agent.reports("step", 1)), 2)  # still stuck at step 3
            return {rank: [s for s in got if s][-1] for rank, got in enumerate(stacks(agent))}

        _, stacks = self.run_stuck(4, 3, while_stuck)
        for rank, stack in stacks.items():
            frames = stack.split("\n")
            for frame in frames:
                self.assertRegex(frame, r"^[^\n]+:\d+ in \S+$")
            self.assertNotIn("_ringmaster_watch", stack)
            # The script (not under the ranks' working directory) is named in full; the
            # outermost frame is the module's.
            self.assertRegex(frames[0], r"/ddp_train\.py:\d+ in <module>$")
            self.assertRegex(frames[1], r"/ddp_train\.py:\d+ in main$")
        self.assertRegex(stacks[1].split("\n")[-1], r"ddp_train\.py:\d+ in wait_for_release$")
        # Rank 0 waits in the backward: torch's files named from its library directory.
        self.assertRegex(stacks[0], r"\ntorch/[^\n]*\.py:\d+ in backward")
        self.assertNotRegex(stacks[0], r"(^|\n)/[^\n]*/torch/")

    def run_stuck(self, steps, stuck_step, while_stuck, *extra):
        """Two ranks of ddp_train.py for `steps` steps, rank 1 stuck at `stuck_step` (its
        --stuck-step); while_stuck(agent) checks the reports meanwhile, then rank 1 is released
        and every step must arrive. Returns (the FakeAgent, what while_stuck returned)."""
        d, agent = agent_in_tmpdir(self)
        release = os.path.join(d, "release")
        ranks = harness.Ranks(harness.train_argv(
            os.path.join(d, "out"), "--steps", str(steps), "--stuck-rank", "1", "--stuck-step",
            str(stuck_step), "--release", release, *extra), 2, d, agent=agent)
        try:
            got = while_stuck(agent)
            open(release, "w").close()
            results = ranks.wait(timeout=60)
        finally:
            ranks.kill()
        for rc, log in results:
            self.assertEqual(rc, 0, log)
        agent.wait_for(lambda a: all(len(a.reports("step", r)) == steps for r in (0, 1)),
                       what="the run to finish")
        return agent, got

    def check_blocked_while_a_peer_is_stuck(self, *extra):
        def while_stuck(agent):
            agent.wait_for(lambda a: len(a.reports("step", 0)) == 2, what="rank 0's step 2")
            n = len(agent.reports("collectives", 0))

            def blocked_reports(a):
                reports = a.reports("collectives", 0)[n:]
                return len(reports) >= 2 and all(
                    int(r["collectiveEntered"]["world"]) > int(r["collectiveCompleted"]["world"])
                    and r.get("blocked") is True for r in reports)

            # Rank 0 waits in step 3's first collective; its side thread keeps saying so.
            agent.wait_for(blocked_reports, timeout=30, what="rank 0 blocked in a collective")
            waiting = agent.reports("collectives", 0)[-1]
            stuck = agent.reports("step", 1)[-1]
            # Rank 1, stuck outside any collective, says it is not blocked in one.
            agent.wait_for(
                lambda a: (a.reports("collectives", 1) or [{}])[-1].get("blocked") is False,
                timeout=30, what="rank 1 not blocked")
            # Its training thread, stuck (polling for the release), uses next to no CPU over
            # three reports (two report intervals: about 2 s), where one that worked would use
            # most of them; rank 0's reports say its thread's CPU too.
            m = len(agent.reports("collectives", 1))
            agent.wait_for(lambda a: len(a.reports("collectives", 1)) >= m + 3, timeout=30,
                           what="three more reports of rank 1")
            cpu = [r["threadCpuSeconds"] for r in agent.reports("collectives", 1)[m:m + 3]]
            self.assertGreater(cpu[0], 0)
            self.assertLess(cpu[2] - cpu[0], 0.2)
            self.assertGreater(agent.reports("collectives", 0)[-1]["threadCpuSeconds"], 0)
            self.assertEqual(stuck["step"], "2")
            self.assertLess(int(stuck["collectiveEntered"]["world"]),
                            int(waiting["collectiveEntered"]["world"]))

        self.run_stuck(4, 3, while_stuck, *extra)


def _recurse(depth, then):
    return then() if depth == 0 else _recurse(depth - 1, then)


class InputTest(unittest.TestCase):
    def test_a_ranks_wait_for_its_data_loader_is_its_input_seconds(self):
        # Rank 1's DataLoader items take 10 ms each (8 per batch): each of its steps waits at
        # least 80 ms for its batch in the loader's __next__, part of its compute; rank 0's
        # loader, as fast as memory, makes a small share of that.
        d, agent = agent_in_tmpdir(self)
        results = harness.run_ranks(harness.train_argv(
            os.path.join(d, "out"), "--steps", "4", "--loader-delay", "0.01"), 2, d,
            agent=agent)
        for rc, log in results:
            self.assertEqual(rc, 0, log)
        agent.wait_for(lambda a: all(len(a.reports("step", r)) == 4 for r in (0, 1)),
                       what="every step")
        steps = steps_by_rank(agent, 2)
        # From the second step on: the first one's window starts at its first forward, after
        # its first batch, and its thread is the one whose waits count from then on.
        self.assertNotIn("inputSeconds", steps[1][0])
        for s in steps[1][1:]:
            self.assertGreaterEqual(s["inputSeconds"], 0.08, s)
            self.assertLessEqual(s["inputSeconds"], s["computeSeconds"], s)
        waited = [sum(s.get("inputSeconds", 0) for s in steps[r][1:]) for r in (0, 1)]
        self.assertLess(waited[0], waited[1] / 4, waited)


    def test_only_the_stepping_threads_outermost_waits_count(self):
        # The wrapper (_steps.Steps._wrap_next) on a fake clock: a DataLoader inside another's
        # __next__ counts once; another thread's, and any with the watch off, not at all; its
        # iterator's values and exceptions (StopIteration too) pass through unchanged.
        clock = [0.0]
        steps = _steps.Steps(None, None, None, clock=lambda: clock[0])
        steps._stepping_thread = threading.get_ident()

        def inner(it):
            clock[0] += 0.25
            return it * 2

        wrapped_inner = steps._wrap_next(inner)

        def outer(it):
            clock[0] += 1.0
            return wrapped_inner(it) + 1

        with unittest.mock.patch.object(_core, "enabled", True):  # (as in a watched rank)
            wrapped = steps._wrap_next(outer)
            self.assertEqual(wrapped(3), 7)
            self.assertEqual(steps._input, 1.25)
            self.assertEqual(steps._input_depth, 0)

            def ends(it):
                clock[0] += 0.5
                raise StopIteration

            with self.assertRaises(StopIteration):
                steps._wrap_next(ends)(None)
            self.assertEqual(steps._input, 1.75)
            done = []
            other = threading.Thread(target=lambda: done.append(wrapped(1)))
            other.start()
            other.join(timeout=10)
            self.assertEqual((done, steps._input), ([3], 1.75))
            with unittest.mock.patch.object(_core, "enabled", False):
                self.assertEqual(wrapped(1), 3)
            self.assertEqual(steps._input, 1.75)


class StackTest(unittest.TestCase):
    """_stack.stack_of's lines, and the side thread's rule for sending them (_ticker.py)."""

    def test_a_stack_names_each_frame_and_is_bounded(self):
        me = threading.get_ident()
        stack = _stack.stack_of(me)
        frames = stack.split("\n")
        self.assertRegex(frames[-1],
                         r"test_watch\.py:\d+ in test_a_stack_names_each_frame_and_is_bounded$")
        self.assertNotIn("_ringmaster_watch", stack)  # its own frames are left out
        self.assertTrue(any(f.startswith("unittest/") for f in frames), frames)  # stdlib
        self.assertEqual(_stack.stack_of(-12345), "")  # no such thread
        # Deep recursion: the innermost frames kept, within the bound.
        deep = _recurse(400, lambda: _stack.stack_of(me))
        self.assertLessEqual(len(deep.encode()), _stack.MAX_BYTES)
        self.assertGreater(len(deep.encode()), _stack.MAX_BYTES - 100)
        self.assertRegex(deep.split("\n")[-1], r"in <lambda>$")
        self.assertRegex(deep.split("\n")[0], r"in _recurse$")

    def test_names_are_short_clean_and_utf8(self):
        cwd = "/home/u/proj/"
        self.assertEqual(_stack.short_name("/home/u/proj/train.py", cwd), "train.py")
        self.assertEqual(_stack.short_name("/opt/x/train.py", cwd), "/opt/x/train.py")
        import unittest as library_module
        self.assertEqual(_stack.short_name(library_module.__file__, cwd), "unittest/__init__.py")
        self.assertEqual(_stack._clean("a\x1b[2Jb\tc\x7f\x9bd\u2028e"), "a?[2Jb?c??d?e")
        self.assertEqual(_stack._clean("f\udcffile.py:3 in g"), "f?ile.py:3 in g")
        long = _stack._clean("/" + "d" * 500 + "/t.py:1 in f")
        self.assertEqual(len(long), _stack.MAX_LINE)
        self.assertTrue(long.startswith("...") and long.endswith("/t.py:1 in f"))

    def test_only_a_rank_that_has_not_moved_sends_its_stack(self):
        reporter = SentReports()
        ticker = _ticker.Ticker(reporter, comm=None)
        ticker._training_ident = threading.get_ident()
        clock = [100.0]
        with unittest.mock.patch.object(_ticker, "_monotonic", lambda: clock[0]):
            self.assertEqual(ticker._stalled_stack(7, reporter.moves), "")  # first seen
            clock[0] += _ticker.STACK_SECONDS - 0.1
            self.assertEqual(ticker._stalled_stack(7, reporter.moves), "")
            clock[0] += 0.2
            stalled = ticker._stalled_stack(7, reporter.moves)
            self.assertRegex(stalled.split("\n")[-1],
                             r"in test_only_a_rank_that_has_not_moved_sends_its_stack$")
            clock[0] += _ticker.STACK_SECONDS - 0.1
            # The same, not read again ...
            self.assertEqual(ticker._stalled_stack(7, reporter.moves), stalled)
            clock[0] += 0.2
            # ... until STACK_SECONDS later (another line).
            again = ticker._stalled_stack(7, reporter.moves)
            self.assertNotEqual(again, stalled)
            self.assertEqual(again.split("\n")[:-1], stalled.split("\n")[:-1])
            reporter.moves += 1  # a step or a phase (the first: setup's gap is no step time)
            self.assertEqual(ticker._stalled_stack(7, reporter.moves), "")
            clock[0] += _ticker.STACK_SECONDS + 0.1
            self.assertNotEqual(ticker._stalled_stack(7, reporter.moves), "")
            self.assertEqual(ticker._stalled_stack(8, reporter.moves), "")  # its numbers moved
            # Steps of 10 s (a large model: a forward of several seconds without collectives):
            # still 3 s after a step is no stall; 2 steps' time is.
            for _ in range(8):
                clock[0] += 10
                reporter.moves += 1
                self.assertEqual(ticker._stalled_stack(8, reporter.moves), "")
            clock[0] += _ticker.STACK_SECONDS + 1
            self.assertEqual(ticker._stalled_stack(8, reporter.moves), "")
            clock[0] += 2 * 10 - _ticker.STACK_SECONDS
            self.assertNotEqual(ticker._stalled_stack(8, reporter.moves), "")
            # Steps of 1 s, a 300 s evaluation between two of them, three more: the stall rule
            # is back to 3 s (one long gap does not raise it).
            for gap in [1] * 8 + [300, 1, 1, 1]:
                clock[0] += gap
                reporter.moves += 1
                self.assertEqual(ticker._stalled_stack(8, reporter.moves), "")
            clock[0] += _ticker.STACK_SECONDS + 0.1
            self.assertNotEqual(ticker._stalled_stack(8, reporter.moves), "")


# A rank whose tensors the watch takes for GPU tensors (_device.cuda_device swapped) and whose
# CUDA events are stand-ins the script passes itself: the wrappers, DDP and the side thread on
# the path they take on NCCL, with real torch over gloo.
GPU_PATH = textwrap.dedent("""\
    import json, os, sys, time
    import sitecustomize
    import torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    import _ringmaster_watch as w
    from _ringmaster_watch import _device

    sys.path.insert(0, sys.argv[2])  # This test's directory.
    from test_watch import FakeMarks

    class Marks(FakeMarks):
        @staticmethod
        def seconds(start, end):
            return 0.25  # Each timed one: a quarter second on the "GPU".
        def pass_all(self):
            for mark in self.made:
                mark[0] = True

    comm = w._watch_state["comm"]
    comm.marks = marks = Marks()
    _device.cuda_device = lambda value: "gpu0" if value is not None else None
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)

    def numbers():
        entered, completed, _, _ = comm.sequences()
        return [int(entered["world"]), int(completed["world"])]

    out = {}
    t = torch.ones(4)
    dist.all_reduce(t)
    out["sync"] = numbers()
    dist.barrier()  # No tensor: done when it returns (NCCL's barrier syncs the device).
    work = dist.all_reduce(t, async_op=True)
    work.wait()
    out["async"] = numbers()
    marks.pass_all()
    comm.poll_device()
    out["passed"] = numbers()
    out["marks"] = len(marks.made)
    out["blocked"] = comm.take_step()[0]
    model = DistributedDataParallel(torch.nn.Linear(4, 4))
    model(torch.ones(2, 4)).sum().backward()
    out["ddp"] = numbers()
    out["ddp_marks"] = len(marks.made) - out["marks"]
    for mark in marks.made[out["marks"]:]:
        mark[0] = True
    comm.poll()  # The step end's poll, on this thread (its device is the marks').
    out["ddp_blocked"] = comm.take_step()[0]
    out["ddp_passed"] = numbers()
    model(torch.ones(2, 4)).sum().backward()  # Its marks are left to the side thread.
    out["ddp_again"] = numbers()
    out["enabled"] = w._core.enabled
    print(json.dumps(out), flush=True)
    marks.pass_all()  # Only the side thread asks now (this thread waits outside torch).
    deadline = time.monotonic() + 60
    while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
        time.sleep(0.05)
    """)


class GpuPathTest(unittest.TestCase):
    def test_collectives_on_gpu_tensors_complete_when_the_gpu_passes_them(self):
        d, agent = agent_in_tmpdir(self)
        release = os.path.join(d, "release")
        env = harness.rank_env(0, 1, harness.free_port(), agent=agent)
        proc = subprocess.Popen([harness.PYTHON, "-c", GPU_PATH, release, harness.HERE],
                                env=env, cwd=d, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            def caught_up(a):
                reports = a.reports("collectives", 0)
                return reports and int(reports[-1]["collectiveEntered"].get("world", 0)) > 3 and (
                    reports[-1]["collectiveEntered"] == reports[-1]["collectiveCompleted"])

            # The training thread sleeps; the side thread found the GPU through DDP's buckets.
            agent.wait_for(caught_up, timeout=60, what="the side thread's poll of the marks")
            open(release, "w").close()
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        self.assertEqual(proc.returncode, 0, err)
        self.assertEqual(err, "")
        got = json.loads(out.strip().splitlines()[-1])
        self.assertTrue(got["enabled"])
        self.assertEqual(got["sync"], [1, 0])  # Returned on the host, not yet on the GPU.
        self.assertEqual(got["async"], [3, 0])  # The barrier (#2) waits behind #1.
        self.assertEqual(got["passed"], [3, 3])
        # Before and after each all_reduce (the async one: around its wait); not the barrier.
        self.assertEqual(got["marks"], 4)
        # The GPU's 0.25 s each (the stand-in's) counted as their time blocked, not the host's.
        self.assertGreaterEqual(got["blocked"], 0.5)
        self.assertLess(got["blocked"], 1.0)
        entered, completed = got["ddp"]
        self.assertEqual(completed, 3)  # DDP's buckets: backward() returned, the GPU not yet.
        self.assertGreater(entered, 3)
        # Graph end to backward's return: 0.25 s on the "GPU", more than the host's wait.
        self.assertGreaterEqual(got["ddp_blocked"], 0.25)
        self.assertLess(got["ddp_blocked"], 0.5)
        self.assertEqual(got["ddp_passed"], [entered, entered])
        entered, completed = got["ddp_again"]
        self.assertEqual(completed, got["ddp_passed"][0])
        self.assertGreater(entered, completed)
        # After DDP's constructor (its collectives wait for it: completed stays at 3 above),
        # then at the graph's end and after backward() returned, for all the buckets.
        self.assertEqual(got["ddp_marks"], 3)
        last = agent.reports("collectives", 0)[-1]
        self.assertEqual(int(last["collectiveEntered"]["world"]), entered)


class ExitTest(unittest.TestCase):
    def test_uncaught_exception_is_reported(self):
        d, agent = agent_in_tmpdir(self)
        results = harness.run_ranks(harness.train_argv(
            os.path.join(d, "out"), "--steps", "4", "--raise-at", "2"), 2, d, agent=agent)
        for rc, log in results:
            self.assertEqual(rc, 1, log)
            self.assertIn("RuntimeError: injected failure at step 2", log)  # Still printed.
        agent.wait_for(lambda a: len(a.reports("exit")) == 2, what="both exit reports")
        for report in agent.reports("exit"):
            self.assertEqual(report["exitCode"], 1)
            self.assertEqual(report["reason"], "RuntimeError: injected failure at step 2")

    def test_exit_work_registered_before_init_is_heard(self):
        # An atexit handler registered before init_process_group (as an experiment tracker's
        # upload is) runs after the watch's side thread's own: the rank still reports while it
        # works, outside any collective (busy, not silent: agent/local_watchdog.h).
        d, agent = agent_in_tmpdir(self)
        began, release = os.path.join(d, "began"), os.path.join(d, "release")
        ranks = harness.Ranks(["-c", EXIT_WORK, began, release], 1, d, agent=agent)
        self.addCleanup(ranks.kill)
        try:
            agent.wait_for(lambda a: os.path.exists(began), what="the exit work")
            heard = len(agent.reports("collectives", 0))
            agent.wait_for(lambda a: len(a.reports("collectives", 0)) >= heard + 3,
                           timeout=30, what="reports during the exit work")
        finally:
            open(release, "w").close()
        (rc, log), = ranks.wait(60)
        self.assertEqual(rc, 0, log)
        self.assertNotIn("ringmaster watch", log)
        last = agent.reports("collectives", 0)[-1]
        self.assertFalse(last["blocked"])
        self.assertEqual(last["collectiveCompleted"], last["collectiveEntered"])
        self.assertEqual(len(agent.reports("step", 0)), 1)

    def test_under_a_shell_only_the_process_that_took_the_rank_says_why(self):
        # A shell runs a helper script that fails (the shell goes on), then the training
        # program, which fails: in "shell" mode the rank's exit reason is the training
        # program's; with the watch's plain mode the helper's would be reported too.
        line = ("%s -c 'raise ValueError(\"helper\")'; "
                "exec %s -c 'import torch; raise RuntimeError(\"trainer\")'"
                % (harness.PYTHON, harness.PYTHON))
        for mode, reasons in (("shell", ["RuntimeError: trainer"]),
                              ("1", ["ValueError: helper", "RuntimeError: trainer"])):
            with self.subTest(mode=mode):
                d, agent = agent_in_tmpdir(self)
                env = harness.rank_env(0, 1, 1, agent=agent,
                                       extra={"RINGMASTER_PYTHON_WATCH": mode})
                proc = subprocess.run(["/bin/sh", "-c", line], env=env, capture_output=True,
                                      text=True, timeout=120, cwd=d)
                self.assertEqual(proc.returncode, 1, proc.stderr)
                self.assertIn("ValueError: helper", proc.stderr)  # Printed as ever.
                agent.wait_for(lambda a: any(r["reason"] == "RuntimeError: trainer"
                                             for r in a.reports("exit")),
                               what="the training program's exit report")
                self.assertEqual([r["reason"] for r in agent.reports("exit")], reasons)
                # Under the shell, the training program's watch says it ended (the shell may
                # go on); the helper, which never imported torch, says nothing.
                def ended(a):
                    return [r for r in a.reports("collectives") if r.get("watchEnded")]

                if mode == "shell":  # Sent after the exit report: waited for.
                    agent.wait_for(ended, what="the training program's last word")
                self.assertEqual(len(ended(agent)), 1 if mode == "shell" else 0)


class LauncherTest(unittest.TestCase):
    """A launcher a rank's command starts where the coordinator cannot see it (a shell script):
    refused when it imports torch, before it starts anything (docs/python.md)."""

    def test_launchers_are_told_by_main_module_or_script_name(self):
        import _ringmaster_watch as w
        for argv, main, want in (
                (["-m", "--nproc_per_node=1"], "torch.distributed.run", "torchrun"),
                (["/usr/bin/torchrun", "t.py"], None, "torchrun"),
                (["/opt/bin/accelerate", "launch", "t.py"], None, "accelerate launch"),
                (["-m"], "accelerate.commands.launch", "accelerate launch"),
                (["/v/bin/deepspeed", "t.py"], None, "the deepspeed launcher"),
                (["-m"], "deepspeed.launcher.launch", "the deepspeed launcher"),
                (["/opt/bin/accelerate", "config"], None, None),
                (["train.py", "torchrun"], None, None),
                (["-c"], None, None),
                ([], None, None)):
            self.assertEqual(w.launcher_of(argv, main), want, argv)
        for orig, want in ((["python3", "-um", "accelerate.commands.launch", "t.py"],
                            "accelerate.commands.launch"),
                           (["python3", "-X", "dev", "-W", "ignore", "-m", "m.n"], "m.n"),
                           (["python3", "-Xdev", "-mm"], "m"),
                           (["python3", "--check-hash-based-pycs", "always", "-m", "m"], "m"),
                           (["python3", "t.py", "-m", "m"], None),
                           (["python3", "-c", "x", "-m", "m"], None),
                           (["python3", "-m"], None),
                           (["python3"], None)):
            self.assertEqual(w.module_of(orig), want, orig)

    def test_a_python_m_launcher_is_known_as_its_packages_import_torch(self):
        # `python -m accelerate.commands.launch`: accelerate's package imports torch before
        # runpy makes the module __main__; a stand-in package here (accelerate is not
        # installed), whose module would leave a mark.
        d, agent = agent_in_tmpdir(self)
        ran = os.path.join(d, "ran")
        package = os.path.join(d, "pkgs", "accelerate", "commands")
        os.makedirs(package)
        with open(os.path.join(d, "pkgs", "accelerate", "__init__.py"), "w") as f:
            f.write("import torch\n")
        open(os.path.join(package, "__init__.py"), "w").close()
        with open(os.path.join(package, "launch.py"), "w") as f:
            f.write("open(%r, 'w').close()\n" % ran)
        env = harness.rank_env(0, 1, 1, agent=agent, pythonpath=os.path.join(d, "pkgs"))
        proc = subprocess.run([harness.PYTHON, "-u", "-m", "accelerate.commands.launch", "t.py"],
                              env=env, capture_output=True, text=True, timeout=120, cwd=d)
        self.assertEqual(proc.returncode, 78, proc.stderr)
        self.assertIn("refused: accelerate launch started inside rank 0's command", proc.stderr)
        self.assertFalse(os.path.exists(ran))

    def test_torchrun_inside_a_shell_is_refused_before_it_starts(self):
        d, agent = agent_in_tmpdir(self)
        ran = os.path.join(d, "ran")
        program = os.path.join(d, "train.py")
        with open(program, "w") as f:
            f.write("open(%r, 'w').close()\n" % ran)
        script = os.path.join(d, "torchrun")  # As pip writes torchrun's console script.
        with open(script, "w") as f:
            f.write("#!%s\nimport sys\nfrom torch.distributed.run import main\n"
                    "sys.exit(main())\n" % harness.PYTHON)
        os.chmod(script, 0o755)
        for how, line in (("-m", "%s -m torch.distributed.run" % harness.PYTHON),
                          ("script", script)):
            with self.subTest(how=how):
                env = harness.rank_env(0, 1, 1, agent=agent,
                                       extra={"RINGMASTER_PYTHON_WATCH": "shell"})
                proc = subprocess.run(
                    ["/bin/sh", "-c", "cd %s && %s --nproc_per_node=1 --standalone %s"
                     % (d, line, program)],
                    env=env, capture_output=True, text=True, timeout=120)
                self.assertEqual(proc.returncode, 78, proc.stderr)
                self.assertIn("ringmaster watch: refused: torchrun started inside rank 0's "
                              "command", proc.stderr)
                # Before torchrun did anything (its rendezvous, its worker, errors of its own).
                self.assertNotIn("Traceback", proc.stderr)
                self.assertFalse(os.path.exists(ran))
        agent.wait_for(lambda a: len(a.reports("exit", 0)) == 2, what="both exit reports")
        for report in agent.reports("exit", 0):
            self.assertEqual(report["exitCode"], 78)
            self.assertIn("each rank's torchrun would start its own processes", report["reason"])


EXIT_WORK = textwrap.dedent("""\
    import atexit, os, sys, time
    import torch, torch.distributed as dist

    began, release = sys.argv[1], sys.argv[2]

    def upload():
        open(began, "w").close()
        deadline = time.monotonic() + 60
        while not os.path.exists(release) and time.monotonic() < deadline:
            time.sleep(0.05)

    atexit.register(upload)
    dist.init_process_group("gloo")
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.ones(2)).sum().backward()
    dist.all_reduce(model.weight.grad)
    opt.step()
    """)


PROBE = textwrap.dedent("""\
    import json, sys
    import sitecustomize
    import torch, torch.distributed as dist
    import _ringmaster_watch as w

    def watch_made(fn):  # torch 2.x's own decorators set __wrapped__ too: look at the code.
        code = getattr(fn, "__code__", None)
        return "_ringmaster_watch" in getattr(code, "co_filename", "")

    print(json.dumps({
        "sitecustomize": getattr(sitecustomize, "__file__", None),
        "marker": getattr(sitecustomize, "MARKER", None),
        "enabled": w._core.enabled,
        "wrapped": watch_made(dist.all_reduce),
        "finder": any(type(f).__name__ == "PostImportFinder" for f in sys.meta_path),
        "optimizer_init": watch_made(torch.optim.Optimizer.__init__),
    }))
    """)


class SiteTest(unittest.TestCase):
    def probe(self, extra=None, pythonpath=None, watch=True):
        d, agent = agent_in_tmpdir(self)
        env = harness.rank_env(0, 1, 1, agent=agent, watch=watch, pythonpath=pythonpath,
                               extra=extra)
        if not watch:
            env["PYTHONPATH"] = os.pathsep.join(p for p in (harness.WATCH_DIR, pythonpath) if p)
        proc = subprocess.run([harness.PYTHON, "-c", PROBE], env=env, capture_output=True,
                              text=True, timeout=60, cwd=d)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr

    def test_active_in_a_rank(self):
        got, err = self.probe()
        self.assertTrue(got["enabled"] and got["wrapped"] and got["optimizer_init"], got)
        self.assertEqual(err, "")

    def test_chains_to_the_users_sitecustomize(self):
        user = harness.tmpdir()
        with open(os.path.join(user, "sitecustomize.py"), "w") as f:
            f.write("MARKER = 'user'\n")
        got, _ = self.probe(pythonpath=user)
        self.assertEqual(got["marker"], "user")
        self.assertEqual(got["sitecustomize"], os.path.join(user, "sitecustomize.py"))
        self.assertTrue(got["enabled"] and got["wrapped"])

    def test_chains_to_the_distributions_sitecustomize_when_off(self):
        plain = subprocess.run(
            [harness.PYTHON, "-c", "import sitecustomize; print(sitecustomize.__file__)"],
            env={"PATH": os.environ.get("PATH", "")}, capture_output=True, text=True, timeout=60)
        got, _ = self.probe(watch=False)
        self.assertNotEqual(os.path.dirname(got["sitecustomize"]), harness.WATCH_DIR)
        self.assertEqual(got["sitecustomize"], plain.stdout.strip() or None)

    def test_no_op_outside_a_rank(self):
        cases = [({"RINGMASTER_PYTHON_WATCH": "0"}, True),
                 ({"TORCHELASTIC_RUN_ID": "x"}, True),
                 ({"RINGMASTER_REPORT_SOCKET": ""}, True),
                 ({}, False)]  # No RINGMASTER_* at all.
        for extra, watch in cases:
            with self.subTest(extra=extra, watch=watch):
                got, err = self.probe(extra=extra, watch=watch)
                self.assertFalse(got["enabled"] or got["wrapped"] or got["finder"]
                                 or got["optimizer_init"], got)
                self.assertEqual(err, "")


if __name__ == "__main__":
    unittest.main()
