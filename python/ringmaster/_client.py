"""ringmaster.Client: the coordinator's JobService from Python, as ``ringctl`` uses it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterable, Iterator, List, Optional, Sequence, Union

import grpc

from . import _job_file
from ._errors import JobSpecError, RingmasterError, from_rpc_error
from ._proto.proto.ringmaster.v1 import coordinator_pb2, coordinator_pb2_grpc, job_pb2

# As the servers (common/grpc_limits.h kMaxGrpcMessageBytes).
_MAX_MESSAGE_BYTES = 64 * 1024 * 1024

JobSpecLike = Union[str, "os.PathLike[str]", dict, job_pb2.JobSpec]


def state_name(state: int) -> str:
    """``job_pb2.JOB_STATE_SUCCEEDED`` -> ``"SUCCEEDED"`` (as ``ringctl`` prints states)."""
    return job_pb2.JobState.Name(state).replace("JOB_STATE_", "")


def _state_number(state: Union[str, int]) -> int:
    if isinstance(state, int):
        return state
    name = state.upper()
    if not name.startswith("JOB_STATE_"):
        name = "JOB_STATE_" + name
    try:
        return job_pb2.JobState.Value(name)
    except ValueError:
        names = ", ".join(state_name(v) for v in job_pb2.JobState.values() if v != 0)
        raise ValueError("unknown job state %r (expected one of: %s)" % (state, names)) from None


def read_job_spec(spec: JobSpecLike) -> job_pb2.JobSpec:
    """A JobSpec from a job file's path, a dict with the job file's keys, or a JobSpec.

    Raises JobSpecError (a RingmasterError and a ValueError, code INVALID_ARGUMENT) naming each
    unknown key or mistyped value the way ``ringctl submit`` does, e.g.
    ``job: trainer.stepz: unknown key, did you mean "steps"?``; OSError for an unreadable file.
    """
    if isinstance(spec, job_pb2.JobSpec):
        return spec
    result = job_pb2.JobSpec()
    if isinstance(spec, dict):
        problems = _job_file.read_job(spec, "job", result)
    elif isinstance(spec, (str, os.PathLike)):
        path = os.fspath(spec)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        problems = _job_file.read_job_yaml(text, path, result)
    else:
        raise TypeError("spec must be a job file's path, a dict or a JobSpec, got %s"
                        % type(spec).__name__)
    if problems:
        raise JobSpecError(problems)
    return result


@dataclass
class WatchUpdate:
    """One update of ``Client.watch``: an event or a progress snapshot, with the job's state and
    generation when it was sent."""

    event: Optional[job_pb2.JobEvent]
    progress: Optional[job_pb2.JobProgress]
    state: str
    generation: int


class Client:
    """A connection to a Ringmaster coordinator's JobService.

    Each argument left as None comes from the environment, as ``ringctl``'s flags do:
    ``coordinator`` from RINGMASTER_COORDINATOR (HOST:PORT), ``token`` from RINGMASTER_TOKEN,
    ``insecure`` from RINGMASTER_INSECURE (``1``/``true``: plaintext, for local clusters; Python
    only, ``ringctl`` has the --insecure flag). Otherwise the channel is TLS: ``tls_ca`` is a PEM
    file of the roots that signed the coordinator's certificate (default: the system's roots), and
    ``tls_cert`` with ``tls_key`` a client certificate for mutual TLS (both or neither).

    Every method raises RingmasterError (``.code`` a grpc.StatusCode, ``.message``) when the
    coordinator refuses or cannot be reached. Unary calls time out after ``timeout`` seconds
    (DEADLINE_EXCEEDED); streams (watch, logs) have no deadline. A Client is safe to share between
    threads; close() (or ``with Client() as c:``) releases its channel.
    """

    def __init__(self, coordinator: Optional[str] = None, token: Optional[str] = None,
                 insecure: Optional[bool] = None, tls_ca: Optional[str] = None,
                 tls_cert: Optional[str] = None, tls_key: Optional[str] = None,
                 timeout: float = 10.0) -> None:
        if coordinator is None:
            coordinator = os.environ.get("RINGMASTER_COORDINATOR", "")
        if not coordinator:
            raise ValueError("coordinator: not set (nor RINGMASTER_COORDINATOR)")
        if token is None:
            token = os.environ.get("RINGMASTER_TOKEN", "")
        if insecure is None:
            insecure = os.environ.get("RINGMASTER_INSECURE", "").lower() in ("1", "true", "yes")
        self.coordinator = coordinator
        self.timeout = timeout
        self._metadata = (("authorization", "Bearer " + token),) if token else ()
        options = [("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES)]
        if insecure:
            self._channel = grpc.insecure_channel(coordinator, options=options)
        else:
            if bool(tls_cert) != bool(tls_key):
                raise ValueError("tls_cert/tls_key: give both or neither")
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_read_pem("tls_ca", tls_ca),
                private_key=_read_pem("tls_key", tls_key),
                certificate_chain=_read_pem("tls_cert", tls_cert))
            self._channel = grpc.secure_channel(coordinator, credentials, options=options)
        self._jobs = coordinator_pb2_grpc.JobServiceStub(self._channel)

    def close(self) -> None:
        """Closes the channel; calls in flight fail with CANCELLED."""
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _unary(self, method, request):
        try:
            return method(request, timeout=self.timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise from_rpc_error(e, self.coordinator) from None

    def submit(self, spec: JobSpecLike, request_id: str = "") -> job_pb2.JobStatus:
        """Submits a job; returns its stored status (``.job_id``, normally PENDING or RUNNING).

        ``spec`` is a job file's path (YAML, ``ringctl submit``'s format), a dict with exactly the
        job file's keys (``{"name": "hello", "nodes": 1, "trainer": {"command": [...]}}``), or a
        ``job_pb2.JobSpec``. Unknown keys and mistyped values raise JobSpecError before anything
        is sent; the coordinator's own rules (ranges, consistency) raise RingmasterError with
        code INVALID_ARGUMENT and a message naming the field. ``request_id`` is an idempotency
        key: a retry with the same one returns the job the first call created.
        """
        request = coordinator_pb2.SubmitJobRequest(spec=read_job_spec(spec), request_id=request_id)
        return self._unary(self._jobs.SubmitJob, request).job

    def get(self, job_id: str) -> coordinator_pb2.GetJobResponse:
        """The job (``.job``: a JobStatus), its newest events (``.events``) and, while it runs,
        its ranks (``.ranks``). NOT_FOUND for an unknown id."""
        return self._unary(self._jobs.GetJob, coordinator_pb2.GetJobRequest(job_id=job_id))

    def list(self, states: Optional[Sequence[Union[str, int]]] = None,
             limit: Optional[int] = None) -> List[job_pb2.JobStatus]:
        """Jobs, newest first, optionally only those in ``states`` (names such as "RUNNING", or
        ``job_pb2.JOB_STATE_*``), at most ``limit`` of them (None: all, read page by page)."""
        numbers = [_state_number(s) for s in states or ()]
        jobs: List[job_pb2.JobStatus] = []
        page_token = ""
        while True:
            page = min(1000, limit - len(jobs)) if limit is not None else 1000
            if page <= 0:
                return jobs
            response = self._unary(self._jobs.ListJobs, coordinator_pb2.ListJobsRequest(
                states=numbers, limit=page, page_token=page_token))
            jobs.extend(response.jobs)
            page_token = response.next_page_token
            if not page_token:
                return jobs

    def watch(self, job_id: str, after_sequence: int = 0) -> Iterator[WatchUpdate]:
        """Yields the job's events after ``after_sequence`` (0: all of them), then live events
        and progress snapshots, and ends once the job is terminal (SUCCEEDED, FAILED,
        CANCELLED). When the coordinator cuts the stream (RESOURCE_EXHAUSTED: a long replay, or
        a reader that fell behind) it resumes from the last event it yielded. Closing the
        iterator (or leaving a ``for`` loop) cancels the stream."""
        last = after_sequence
        while True:
            call = self._jobs.WatchJob(
                coordinator_pb2.WatchJobRequest(job_id=job_id, after_sequence=last),
                metadata=self._metadata)
            try:
                for response in call:
                    which = response.WhichOneof("update")
                    event = response.event if which == "event" else None
                    if event is not None:
                        last = max(last, event.sequence)
                    yield WatchUpdate(event=event,
                                      progress=response.progress if which == "progress" else None,
                                      state=state_name(response.state),
                                      generation=response.generation)
                return
            except grpc.RpcError as e:
                if e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    continue
                raise from_rpc_error(e, self.coordinator) from None
            finally:
                call.cancel()

    def logs(self, job_id: str, rank: int, follow: bool = False, generation: int = 0,
             offset: int = 0) -> Iterator[bytes]:
        """Yields a rank's log (stdout and stderr as written) in chunks, read through its agent.

        ``generation`` 0 is the current one; ``offset`` is where to start (negative: from the
        end). With ``follow`` it keeps yielding new output until the rank exits. The job's owner
        or an admin only (PERMISSION_DENIED). ``b"".join(client.logs(job_id, 0))`` is the whole
        log so far.
        """
        call = self._jobs.ReadLogs(
            coordinator_pb2.ReadLogsRequest(job_id=job_id, rank=rank, generation=generation,
                                            offset=offset, follow=follow),
            metadata=self._metadata)
        try:
            for response in call:
                if response.data:
                    yield response.data
        except grpc.RpcError as e:
            raise from_rpc_error(e, self.coordinator) from None
        finally:
            call.cancel()

    def cancel(self, job_id: str, reason: str = "") -> job_pb2.JobStatus:
        """Cancels a job and stops its workers; returns its status (CANCELLED, or the terminal
        state it already had: cancelling twice is harmless)."""
        return self._unary(self._jobs.CancelJob,
                           coordinator_pb2.CancelJobRequest(job_id=job_id, reason=reason)).job

    def nodes(self) -> List[coordinator_pb2.NodeStatus]:
        """Every node the coordinator knows, sorted by name (``ringctl nodes``)."""
        return list(self._unary(self._jobs.ListNodes, coordinator_pb2.ListNodesRequest()).nodes)


def _read_pem(what: str, path: Optional[str]) -> Optional[bytes]:
    if not path:
        return None
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise ValueError("%s: cannot read %s: %s" % (what, path, e.strerror)) from None
