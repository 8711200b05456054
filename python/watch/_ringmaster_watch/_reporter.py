"""Sends WorkerReport datagrams to the node's agent (proto/ringmaster/v1/worker.proto).

Each report is one datagram on the agent's Unix SOCK_DGRAM socket (RINGMASTER_REPORT_SOCKET):
the WorkerReport in protobuf's JSON form, e.g. {"step": {"worker": {...}, "step": "10", ...}}
(int64 fields as JSON strings). Sends never block: a report the socket cannot take right now
(EAGAIN, ENOBUFS: the agent's queue is full) is held, with every later one, and sent first by
the next flush (at most MAX_DEFERRED held; beyond, the oldest is dropped and counted); at exit
`drain` retries for at most EXIT_DRAIN_SECONDS. One that no agent listens for (ECONNREFUSED,
ENOENT) is dropped and counted.
The socket is connected to the agent's once (a send then skips the kernel's path lookup that a
sendto to a path makes each time: the step report's path, bench/pytorch_watch_overhead.py);
a send the connected peer refuses (an agent restarted on the same path) connects again and
retries once.

Step reports may be deferred (`defer`): the training thread only queues a snapshot of the
step, and whoever flushes (the watch's side thread, about every FLUSH_SECONDS, _ticker.py)
writes them and sends them in order, consecutive steps together in one ReportSteps datagram
({"steps": {"steps": [...]}}; a burst of datagrams would overflow the kernel's datagram queue,
10 deep by default, and be dropped). A report sent directly flushes the queue
first, so the agent sees every report in the order it happened. The queue is flushed when the
side thread stops (at exit and when the watch disables itself); a rank killed outright loses
at most the steps of its last FLUSH_SECONDS. Only the process that made the reporter flushes
(a forked child's copy of the queue is never sent).

Threading: `send`, `defer` and `flush` may be called from any thread; flushes
and direct sends go one at a time, in order (one lock); `defer` only appends (lock-free) while
a flusher runs (`deferring`), else it flushes at once.
Errors: `Reporter(...)` raises ValueError for a malformed identity (the caller stays inactive);
`send` never raises; `flush` raises what a deferred report's encoder raises (after sending the
ones before it), for its caller to disable the watch.
"""

import collections
import errno
import json
import math
import os
import socket
import threading
import time

MAX_DATAGRAM = 65536  # The agent reads at most this many bytes per report.
# Reports kept at most waiting to be written (deferred), and again written but held back by a
# busy socket; beyond either, the oldest is dropped (counted).
MAX_DEFERRED = 4096
EXIT_DRAIN_SECONDS = 0.5  # At exit, how long held reports wait for a busy agent at most.
BATCH_BYTES = 60000  # A ReportSteps datagram's step reports, at most (under MAX_DATAGRAM).

# A connected send's errors that mean the peer is gone, not busy: connect again.
_RECONNECT = frozenset((errno.ECONNREFUSED, errno.ENOTCONN, errno.ENOENT, errno.EDESTADDRREQ,
                        errno.ECONNRESET, errno.EPIPE))

IDENTITY_VARIABLES = ("RINGMASTER_JOB", "RINGMASTER_GENERATION", "RANK",
                      "RINGMASTER_WORKER_TOKEN", "RINGMASTER_REPORT_SOCKET")


def identity_from_env(env):
    """The WorkerIdentity JSON object from the rank's environment; ValueError names the bad one."""
    missing = [v for v in IDENTITY_VARIABLES if not env.get(v)]
    if missing:
        raise ValueError("%s not set" % ", ".join(missing))
    try:
        generation = int(env["RINGMASTER_GENERATION"])
    except ValueError:
        raise ValueError("RINGMASTER_GENERATION must be an integer, got %r"
                         % env["RINGMASTER_GENERATION"][:32]) from None
    try:
        rank = int(env["RANK"])
    except ValueError:
        raise ValueError("RANK must be an integer, got %r" % env["RANK"][:32]) from None
    return {"jobId": env["RINGMASTER_JOB"], "generation": str(generation), "rank": rank,
            "token": env["RINGMASTER_WORKER_TOKEN"]}


def json_number(value):
    """A float as JSON text, as json.dumps writes it (repr); NaN and infinities as strings."""
    value = float(value)
    if value - value == 0.0:
        return repr(value)
    return '"%s"' % json_double(value)


def json_double(value):
    """A double as protobuf JSON writes it: NaN and the infinities as strings."""
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


_BUSY = frozenset((errno.EAGAIN, errno.EWOULDBLOCK, errno.ENOBUFS))


class Reporter:
    """One non-blocking datagram socket to the agent, and the identity stamped on each report."""

    def __init__(self, path, identity):
        self._path = path
        self._identity = identity
        self._identity_json = json.dumps(identity, separators=(",", ":"))
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.setblocking(False)
        self._connected = False
        self.sent = 0
        self._dropped = 0  # Counted under the send lock (or by its only thread)...
        self._dropped_deferred = 0  # ... and by `defer` alone, lock-free.
        self._pid = os.getpid()
        # Step and phase reports made so far (any thread; a lost increment still changes it):
        # the side thread tells a stalled rank by it (_ticker.py).
        self.moves = 0
        self._deferred = collections.deque()  # (kind, encode, raw), oldest first.
        # Reports written but refused by a busy socket, and any after them, oldest first:
        # ("step", a step report's body) or ("data", a whole datagram). Sent before the rest.
        self._held = collections.deque()
        self._send_lock = threading.RLock()  # Reentrant: a signal handler may send.
        # Whether defer() leaves the sending to a flusher (the side thread runs): set by it.
        self.deferring = False
        self._connect()

    @property
    def dropped(self):
        """Reports dropped: too large, no agent, or beyond the bounds."""
        return self._dropped + self._dropped_deferred

    def _connect(self):
        """Connects the socket to the agent's path; False (and unconnected) when none listens."""
        try:
            self._sock.connect(self._path)
        except OSError:
            self._connected = False
            return False
        self._connected = True
        return True

    def send(self, kind, body, moves=None):
        """Sends {kind: body + worker identity} after the deferred reports; returns whether
        the socket took it or holds it for the next flush (behind reports a busy socket
        refused), False where it was dropped. `moves`: `self.moves` when the body's "stack"
        was read; if a step or phase came since (it goes first), the stack goes without it.
        """
        body["worker"] = self._identity
        if kind == "phase":
            self.moves += 1
        try:
            data = self._encode(kind, body)
        except (TypeError, ValueError):
            with self._send_lock:
                self._dropped += 1  # A value JSON cannot carry; callers pass json_double'd floats.
            return False
        with self._send_lock:
            if self._flush_locked():  # False in a forked child too: it never sends.
                if moves is not None and moves != self.moves and body.pop("stack", None):
                    data = self._encode(kind, body)  # (it encoded once, it encodes again)
                sent = self._send(data)
                if sent is not None:
                    return sent
            self._hold(("data", data))  # Busy, or behind reports a busy socket refused.
            return True

    @staticmethod
    def _encode(kind, body):
        return json.dumps({kind: body}, separators=(",", ":"), allow_nan=False).encode()

    def defer(self, kind, encode, raw):
        """Queues a report whose members are encode(raw), to be sent by the next flush (at
        once when no flusher runs: `deferring` False). The step report's path: one append."""
        deferred = self._deferred
        deferred.append((kind, encode, raw))
        self.moves += 1
        if len(deferred) > MAX_DEFERRED:
            try:
                deferred.popleft()
                self._dropped_deferred += 1
            except IndexError:
                pass
        if not self.deferring:
            self.flush()

    def flush(self):
        """Sends the held and deferred reports, in order (only in the process that made the
        reporter: checked before the lock, which a forked child may have inherited held)."""
        if (self._deferred or self._held) and os.getpid() == self._pid:
            with self._send_lock:
                self._flush_locked()

    def _flush_locked(self):
        """Writes the deferred reports after the held ones and sends them all, consecutive
        step reports together as one ReportSteps datagram (at most BATCH_BYTES), any other one
        alone, until the socket is busy; returns whether none is left held. An encoder's
        exception is raised after the reports before it were sent."""
        if os.getpid() != self._pid:
            return False
        deferred = self._deferred
        try:
            while deferred:
                kind, encode, raw = deferred.popleft()
                members = encode(raw)
                if kind == "step":
                    self._hold(("step", '{%s,"worker":%s}' % (members, self._identity_json)))
                    continue
                try:
                    data = ('{"%s":{%s,"worker":%s}}' % (
                        kind, members, self._identity_json)).encode()
                except UnicodeError:
                    self._dropped += 1
                    continue
                self._hold(("data", data))
        finally:
            done = self._send_held()
        return done

    def _hold(self, item):
        held = self._held
        held.append(item)
        if len(held) > MAX_DEFERRED:
            held.popleft()
            self._dropped += 1

    def _send_held(self):
        """Sends the held reports in order until the socket is busy: whether none is left.
        Each leaves the queue before its send and goes back to its front if the socket is
        busy: a signal handler's report sent from within a send (the lock is reentrant) then
        neither repeats nor loses one."""
        held = self._held
        while held:
            kind, first = held.popleft()
            if kind == "data":
                if self._send(first) is None:
                    held.appendleft((kind, first))
                    return False
                continue
            bodies = [first]
            size = len(first) + 1
            while held and held[0][0] == "step" and size + len(held[0][1]) <= BATCH_BYTES:
                body = held.popleft()[1]
                bodies.append(body)
                size += len(body) + 1
            if self._send_batch(bodies) is None:
                held.extendleft(("step", body) for body in reversed(bodies))
                return False
        return True

    def drain(self, seconds=EXIT_DRAIN_SECONDS):
        """At exit: flushes until nothing is held, retrying a busy socket for at most
        `seconds` (bounded sleeps); what is still held then is dropped and counted."""
        if os.getpid() != self._pid:
            return  # A forked child never sends the parent's reports.
        deadline = time.monotonic() + seconds
        for _ in range(1000):
            self.flush()
            if not self._held or time.monotonic() >= deadline:
                break
            time.sleep(0.01)
        if self._held:
            with self._send_lock:
                self._dropped += len(self._held)
                self._held.clear()

    def _send_batch(self, bodies):
        """Sends step report bodies as one datagram: _send's result."""
        if len(bodies) == 1:
            text = '{"step":%s}' % bodies[0]
        else:
            text = '{"steps":{"steps":[%s]}}' % ",".join(bodies)
        try:
            data = text.encode()
        except UnicodeError:
            self._dropped += len(bodies)
            return False
        sent = self._send(data)
        if sent:
            self.sent += len(bodies) - 1  # `sent` counts reports, not datagrams.
        elif sent is not None:
            self._dropped += len(bodies) - 1
        return sent

    def _send(self, data):
        """True: sent; False: dropped (counted); None: the socket is busy (not counted)."""
        if len(data) > MAX_DATAGRAM:
            self._dropped += 1
            return False
        try:
            if self._connected:
                self._sock.send(data)
            elif self._connect():
                self._sock.send(data)
            else:
                self._dropped += 1
                return False
        except OSError as exc:
            # EAGAIN/ENOBUFS (the agent's queue is full): the caller holds it, never blocks.
            # Refused or gone (no agent now, or one restarted on the same path): connect
            # again, retry once.
            if exc.errno in _BUSY:
                return None
            if exc.errno not in _RECONNECT:
                self._dropped += 1
                return False
            try:
                if not self._connect():
                    self._dropped += 1
                    return False
                self._sock.send(data)
            except OSError as retry:
                if retry.errno in _BUSY:
                    return None
                self._dropped += 1
                return False
        self.sent += 1
        return True

    def close(self):
        try:
            self._sock.close()
        except OSError:
            pass


def from_env(env=None):
    """A Reporter for this rank, or ValueError naming what is missing or malformed."""
    env = os.environ if env is None else env
    identity = identity_from_env(env)
    return Reporter(env["RINGMASTER_REPORT_SOCKET"], identity)
