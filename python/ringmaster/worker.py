"""Reports from inside a rank of a Ringmaster job, to its node's agent.

A rank that wants to say more than Ringmaster sees on its own (steps, loss, tokens, checkpoint
phases, why it exits) calls these functions; a rank may also use the job's rendezvous store::

    import ringmaster.worker as rw

    for batch in data:
        loss = train_step(batch)
        rw.step(loss=loss, tokens=len(batch) * seq_len)
        if step % 100 == 0:
            with rw.phase("checkpoint"):
                torch.save(model.state_dict(), path)

Outside a Ringmaster rank (no RINGMASTER_AGENT_SOCKET / RINGMASTER_WORKER_TOKEN in the
environment, e.g. under torchrun or in a notebook), or when grpc cannot be imported, every call is
a cheap no-op: the same script runs anywhere. No call raises into the program because of the
agent: the first failure to reach it (or a refusal) is logged once to stderr and turns every later
call into a no-op. The only exceptions are argument errors (ValueError), raised alike in and
outside a rank so they show up before a job is submitted.

Reports go over the agent's worker API (proto/ringmaster/v1/worker.proto) on its Unix socket,
with the rank's identity from RINGMASTER_JOB, RINGMASTER_GENERATION, RANK and
RINGMASTER_WORKER_TOKEN. Each call is one synchronous RPC of at most ``REPORT_TIMEOUT`` seconds
(about 0.1 ms on a healthy agent). Thread-safe.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from typing import Any, Iterator, Optional

__all__ = ["enabled", "step", "phase", "exit_reason", "rendezvous_get", "rendezvous_set",
           "rendezvous_wait", "REPORT_TIMEOUT"]

# Seconds one report may take before it counts as a failure (and disables the module).
REPORT_TIMEOUT = 2.0

_PHASES = ("init", "step", "checkpoint", "eval")

_lock = threading.Lock()
_state: Optional["_Connection"] = None  # Set up on first use.
_disabled = False  # A failure was logged, or this is not a rank: every call is a no-op.
_process_start = time.time()


class _Connection:
    """The stub and the rank's identity; step bookkeeping (guarded by _lock)."""

    def __init__(self) -> None:
        import grpc  # noqa: F401  (ImportError: not available, the module disables itself)

        from ._proto.proto.ringmaster.v1 import agent_pb2, worker_pb2, worker_pb2_grpc

        env = os.environ
        self.grpc = grpc
        self.agent_pb2 = agent_pb2
        self.pb = worker_pb2
        self.identity = worker_pb2.WorkerIdentity(
            job_id=env["RINGMASTER_JOB"], generation=int(env["RINGMASTER_GENERATION"]),
            rank=int(env["RANK"]), token=env["RINGMASTER_WORKER_TOKEN"])
        self.channel = grpc.insecure_channel("unix:" + env["RINGMASTER_AGENT_SOCKET"])
        self.stub = worker_pb2_grpc.WorkerServiceStub(self.channel)
        self.step = 0
        self.last_step_time = time.monotonic()
        self.first_report = True


def _in_rank() -> bool:
    env = os.environ
    return all(env.get(v) for v in ("RINGMASTER_AGENT_SOCKET", "RINGMASTER_WORKER_TOKEN",
                                    "RINGMASTER_JOB", "RINGMASTER_GENERATION", "RANK"))


def _disable(why: str) -> None:
    global _disabled
    if not _disabled:
        _disabled = True
        try:
            sys.stderr.write("ringmaster.worker: %s; reports to the agent are off for this "
                             "process\n" % why)
            sys.stderr.flush()
        except Exception:  # noqa: BLE001  A closed stderr must not break the program either.
            pass


def _connection() -> Optional[_Connection]:
    """The connection, set up on first use; None when this is not a rank or reports are off."""
    global _state, _disabled
    if _disabled:
        return None
    if _state is not None:
        return _state
    with _lock:
        if _state is None and not _disabled:
            if not _in_rank():
                _disabled = True  # Quietly: not a Ringmaster rank.
                return None
            try:
                _state = _Connection()
            except ImportError as e:
                _disable("grpc or the generated stubs cannot be imported (%s)" % e)
            except Exception as e:  # noqa: BLE001  Never into the user's program.
                _disable("cannot set up (%s: %s)" % (type(e).__name__, e))
    return _state


def _call(conn: _Connection, method: str, request: Any, timeout: float = REPORT_TIMEOUT,
          quiet_codes: tuple = ()) -> Any:
    """Runs one RPC; None, after disabling the module, when it fails (codes in `quiet_codes`
    return None without disabling)."""
    try:
        return getattr(conn.stub, method)(request, timeout=timeout)
    except conn.grpc.RpcError as e:
        code = e.code() if hasattr(e, "code") else None
        if code in quiet_codes:
            return None
        _disable("%s failed: %s: %s" % (method, getattr(code, "name", code),
                                        e.details() if hasattr(e, "details") else e))
    except Exception as e:  # noqa: BLE001  Never into the user's program.
        _disable("%s failed: %s: %s" % (method, type(e).__name__, e))
    return None


def enabled() -> bool:
    """Whether reports reach an agent: this process is a Ringmaster rank and nothing failed."""
    return _connection() is not None


def step(loss: Optional[float] = None, tokens: Optional[int] = None, *,
         step: Optional[int] = None, compute_seconds: Optional[float] = None,
         comm_seconds: Optional[float] = None) -> None:
    """Reports a completed optimizer step.

    Args:
        loss: the step's training loss (the mean over the global batch, ideally the same on every
            rank); None: not reported (0).
        tokens: tokens this rank processed in the step.
        step: the step's number (from 1); default: one more than the last reported (counting from
            0 in this process). Pass it when the program resumes from a checkpoint.
        compute_seconds: seconds of the step spent computing, without waits for other ranks; the
            straggler detector compares it across ranks. Default: the step's wall time minus
            ``comm_seconds``.
        comm_seconds: seconds of the step spent waiting in collectives (default 0).

    The step's wall time is measured from the previous ``step()`` call (the first: from the
    module's import). A report the agent refuses (e.g. a step number that is not positive) is
    logged once and turns reports off.
    """
    conn = _connection()
    if conn is None:
        return
    now_wall = time.time()
    with _lock:
        now = time.monotonic()
        seconds = max(0.0, now - conn.last_step_time)
        conn.last_step_time = now
        conn.step = int(step) if step is not None else conn.step + 1
        number = conn.step
        first = conn.first_report
        conn.first_report = False
    comm = max(0.0, float(comm_seconds or 0.0))
    compute = float(compute_seconds) if compute_seconds is not None else max(0.0, seconds - comm)
    request = conn.pb.ReportStepRequest(
        worker=conn.identity, step=number, loss=float(loss) if loss is not None else 0.0,
        tokens=int(tokens or 0), step_seconds=seconds, compute_seconds=compute, comm_seconds=comm,
        end_time_unix_nanos=int(now_wall * 1e9))
    if first:
        request.process_start_unix_nanos = int(_process_start * 1e9)
        request.start_step = max(0, number - 1)
    _call(conn, "ReportStep", request)


def _phase_number(conn: _Connection, name: str) -> int:
    return conn.agent_pb2.WorkerPhase.Value("WORKER_PHASE_" + name.upper())


@contextlib.contextmanager
def phase(name: str, checkpoint_step: Optional[int] = None) -> Iterator[None]:
    """Marks a phase of the rank: ``with phase("checkpoint"): save(...)``.

    ``name`` is one of init, step, checkpoint, eval (ValueError otherwise). The agent's hang
    detection gives each phase its own timeout, so a long checkpoint or evaluation is not taken
    for a hang. On leaving the block the rank is back in the step phase; leaving a checkpoint
    phase reports its duration and ``checkpoint_step`` (default: the last step reported).
    Exceptions from the block propagate unchanged.
    """
    if name not in _PHASES:
        raise ValueError("phase: must be one of %s, got %r" % (", ".join(_PHASES), name))
    conn = _connection()
    if conn is None:
        yield
        return
    started = time.monotonic()
    _call(conn, "ReportPhase",
          conn.pb.ReportPhaseRequest(worker=conn.identity, phase=_phase_number(conn, name)))
    try:
        yield
    finally:
        conn = _connection()
        if conn is not None and name != "step":
            request = conn.pb.ReportPhaseRequest(worker=conn.identity,
                                                 phase=_phase_number(conn, "step"))
            if name == "checkpoint":
                request.checkpoint_step = int(
                    checkpoint_step if checkpoint_step is not None else conn.step)
                request.checkpoint_seconds = time.monotonic() - started
            _call(conn, "ReportPhase", request)


def exit_reason(text: str, exit_code: int = 1) -> None:
    """Tells the agent why this rank is about to exit, before it exits with ``exit_code`` (0
    done, 75 a retryable failure, other codes fatal). For a failure the agent quotes ``text`` in
    the rank's exit and the job's events (``ringctl describe``). An announced 78 stands: the
    rank fails for good even if its process then exits 0."""
    conn = _connection()
    if conn is None:
        return
    _call(conn, "ReportExit", conn.pb.ReportExitRequest(worker=conn.identity,
                                                       exit_code=int(exit_code), reason=str(text)))


def rendezvous_set(key: str, value: bytes) -> None:
    """Stores ``value`` (at most 1 MiB) under ``key`` in this generation's rendezvous store,
    which every rank of the job shares (overwrites). A no-op outside a rank."""
    conn = _connection()
    if conn is None:
        return
    if isinstance(value, str):
        value = value.encode()
    _call(conn, "RendezvousSet",
          conn.pb.RendezvousSetRequest(worker=conn.identity, key=key, value=bytes(value)))


def rendezvous_get(key: str) -> Optional[bytes]:
    """The value stored under ``key`` in this generation's store; None when it is not set, and
    outside a rank."""
    conn = _connection()
    if conn is None:
        return None
    response = _call(conn, "RendezvousGet",
                     conn.pb.RendezvousGetRequest(worker=conn.identity, key=key),
                     quiet_codes=(conn.grpc.StatusCode.NOT_FOUND,))
    return None if response is None else response.value


def rendezvous_wait(key: str, timeout: float = 60.0) -> Optional[bytes]:
    """Waits up to ``timeout`` seconds for ``key`` to be set in this generation's store and
    returns its value; None when the time passes, and at once outside a rank."""
    conn = _connection()
    if conn is None:
        return None
    response = _call(conn, "RendezvousWait",
                     conn.pb.RendezvousWaitRequest(worker=conn.identity, key=key,
                                                   timeout_seconds=float(timeout)),
                     timeout=float(timeout) + REPORT_TIMEOUT,
                     quiet_codes=(conn.grpc.StatusCode.DEADLINE_EXCEEDED,))
    return None if response is None else response.value
