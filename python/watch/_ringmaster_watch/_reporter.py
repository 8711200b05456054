"""Sends WorkerReport datagrams to the node's agent (proto/ringmaster/v1/worker.proto).

Each report is one datagram on the agent's Unix SOCK_DGRAM socket (RINGMASTER_REPORT_SOCKET):
the WorkerReport in protobuf's JSON form, e.g. {"step": {"worker": {...}, "step": "10", ...}}
(int64 fields as JSON strings). Sends never block: a report the socket cannot take right now
(EAGAIN, ENOBUFS), or that no agent listens for (ECONNREFUSED, ENOENT), is dropped and counted.
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

MAX_DATAGRAM = 65536  # The agent reads at most this many bytes per report.
MAX_DEFERRED = 4096  # Deferred reports kept at most; beyond, the oldest is dropped (counted).
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
        self.dropped = 0
        self._pid = os.getpid()
        self._deferred = collections.deque()  # (kind, encode, raw), oldest first.
        self._send_lock = threading.RLock()  # Reentrant: a signal handler may send.
        # Whether defer() leaves the sending to a flusher (the side thread runs): set by it.
        self.deferring = False
        self._connect()

    def _connect(self):
        """Connects the socket to the agent's path; False (and unconnected) when none listens."""
        try:
            self._sock.connect(self._path)
        except OSError:
            self._connected = False
            return False
        self._connected = True
        return True

    def send(self, kind, body):
        """Sends {kind: body + worker identity} after the deferred reports; returns whether
        the socket took it."""
        body["worker"] = self._identity
        try:
            data = json.dumps({kind: body}, separators=(",", ":"), allow_nan=False).encode()
        except (TypeError, ValueError):
            self.dropped += 1  # A value JSON cannot carry; callers pass json_double'd floats.
            return False
        with self._send_lock:
            self._flush_locked()
            return self._send(data)

    def defer(self, kind, encode, raw):
        """Queues a report whose members are encode(raw), to be sent by the next flush (at
        once when no flusher runs: `deferring` False). The step report's path: one append."""
        deferred = self._deferred
        deferred.append((kind, encode, raw))
        if len(deferred) > MAX_DEFERRED:
            try:
                deferred.popleft()
                self.dropped += 1
            except IndexError:
                pass
        if not self.deferring:
            self.flush()

    def flush(self):
        """Sends the deferred reports, in order (only in the process that made the reporter:
        checked before the lock, which a forked child may have inherited held)."""
        if self._deferred and os.getpid() == self._pid:
            with self._send_lock:
                self._flush_locked()

    def _flush_locked(self):
        """Sends the deferred reports: consecutive step reports together as one ReportSteps
        datagram (at most BATCH_BYTES), any other one alone."""
        deferred = self._deferred
        if not deferred or os.getpid() != self._pid:
            return
        batch = []
        size = 0
        while deferred:
            kind, encode, raw = deferred.popleft()
            if kind != "step":
                self._send_batch(batch)
                batch, size = [], 0
                self._send_members(kind, encode(raw))
                continue
            body = '{%s,"worker":%s}' % (encode(raw), self._identity_json)
            if batch and size + len(body) > BATCH_BYTES:
                self._send_batch(batch)
                batch, size = [], 0
            batch.append(body)
            size += len(body) + 1
        self._send_batch(batch)

    def _send_batch(self, bodies):
        if not bodies:
            return
        if len(bodies) == 1:
            text = '{"step":%s}' % bodies[0]
        else:
            text = '{"steps":{"steps":[%s]}}' % ",".join(bodies)
        try:
            data = text.encode()
        except UnicodeError:
            self.dropped += len(bodies)
            return
        if self._send(data):
            self.sent += len(bodies) - 1  # `sent` counts reports, not datagrams.
        else:
            self.dropped += len(bodies) - 1

    def _send_members(self, kind, members):
        """Sends {kind: {members, worker identity}}; `members` must be valid JSON object
        members ('"a":1,"b":"x"', json_number for floats). Caller holds _send_lock."""
        try:
            data = ('{"%s":{%s,"worker":%s}}' % (kind, members, self._identity_json)).encode()
        except UnicodeError:
            self.dropped += 1
            return False
        return self._send(data)

    def _send(self, data):
        if len(data) > MAX_DATAGRAM:
            self.dropped += 1
            return False
        try:
            if self._connected:
                self._sock.send(data)
            elif self._connect():
                self._sock.send(data)
            else:
                self.dropped += 1
                return False
        except OSError as exc:
            # EAGAIN/ENOBUFS (the agent's queue is full): dropped rather than block. Refused or
            # gone (no agent now, or one restarted on the same path): connect again, retry once.
            if exc.errno not in _RECONNECT:
                self.dropped += 1
                return False
            try:
                if not self._connect():
                    self.dropped += 1
                    return False
                self._sock.send(data)
            except OSError:
                self.dropped += 1
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
