"""When a collective on GPU tensors has finished on the GPU, not when the host queued it.

On NCCL a collective returns to the host once queued: the call only makes the caller's current
CUDA stream wait for it (a synchronous call's work.wait(), DDP's wait for its buckets). Counted
as completed at that return, a rank whose GPU still waits for a peer that never entered the
collective would not look like a rank waiting in it, and the hang analysis (docs/coordinator.md,
"Hangs") could not name the peer. So a collective on CUDA tensors stays outstanding until a
CUDA event recorded on the current stream right after the call returned has completed: the
stream reaches it only once the collective (and the work queued before it) is done.

The same events time the wait on the GPU, which on NCCL is where a rank waits for a slow peer
(the host does not): from a mark recorded before the call (the current stream reaching it) to
the one after (the collective done), and for DDP from the backward graph's end (the caller's
stream has every gradient: the autograd engine runs its final callbacks on that stream) to
after backward() returned. Comm adds that time to the step's time in collectives where it
exceeds the host's, so the straggler detector compares compute on GPUs too.

`Marks` makes and recycles those events; Comm polls them (`Comm.poll_device`): the training
thread at each step's end, so the step's report has them, and the side thread before each
collectives report, so a rank whose training thread is stuck outside torch still reports what
its GPU finished. A query on a thread whose current device has no CUDA context would create one
(cudaEventQuery binds the current device; hundreds of MiB on GPU 0 of every rank): the
training thread makes the marks' device its current one for the poll and gives the program's
back after (`on_device`: torch's _exchange_device, and _maybe_exchange_device to restore, which
creates no context where there was none; a torch without them polls only when the devices are
the same), and the side thread makes the first mark's device its own once (`bind_thread`;
CUDA is initialised by then, so torch.cuda.set_device has nothing to do but cudaSetDevice).

A collective is timed (`start`) only when the current stream is the device's default one: one
issued on a side stream (FSDP's prefetches...) overlaps the compute on the default stream, and
its span there is not time the rank stood waiting.

No event is recorded or queried while a CUDA graph is being captured anywhere in the process
(`watch_captures` counts torch.cuda.CUDAGraph's captures): in the default ("global") capture
mode a cudaEventQuery from any thread invalidates the capture. `gate` is held across a whole
poll, so a capture that begins waits for its queries to end, and two polls (the side thread's
and a step end's) never overlap: an event is taken back for reuse only by the poll that
asked it.

Threading: `mark` runs on the thread that made the collective (the current stream is that
thread's), `done`, `seconds` and `release` on any. torch.cuda.Event.query() is
cudaEventQuery and elapsed_time() cudaEventElapsedTime: neither waits for the GPU (they may
wait on the driver's own locks, briefly), and both hold the GIL throughout
(torch/csrc/cuda/Event.cpp), so the side thread may call them (_ticker.py): no daemon thread
is inside them at the interpreter's finalisation. Ownership: an event belongs to its Comm
entry from `mark` until `release` puts it back on the free list (at most FREE_EVENTS kept).
Errors: raised to the caller (Comm, _collectives, _ddp), which disables the watch; the
collective itself is untouched.
"""

import functools
import threading

from . import _compiler, _core

FREE_EVENTS = 64  # Completed events kept for reuse (an event is made by its first record).


def cuda_device(value):
    """The device of a collective's tensor argument (a tensor, or a list of them) when it is
    on a CUDA device; else None (a CPU tensor, no tensor). Module-level so tests can swap it."""
    if isinstance(value, (list, tuple)):
        value = value[0] if value else None
        if isinstance(value, (list, tuple)):  # scatter's and gather's lists of lists.
            value = value[0] if value else None
    if value is not None and getattr(value, "is_cuda", False):
        return value.device
    return None


_capture_lock = threading.Lock()
_captures = 0  # CUDA graph captures in progress in this process (changed under _capture_lock).


class _Gate:
    """`with gate as open_:` holds back captures that begin meanwhile; open_ is False while
    one is in progress (then nothing may be queried)."""

    def __enter__(self):
        _capture_lock.acquire()
        return _captures == 0

    def __exit__(self, *exc):
        _capture_lock.release()


gate = _Gate()


def capturing():
    """A CUDA graph capture is in progress (a racy read: for a fast path only)."""
    return _captures > 0


def watch_captures(cuda):
    """Counts the captures of torch.cuda.CUDAGraph (torch.cuda.graph, make_graphed_callables,
    torch.compile's CUDA graphs all begin and end through it); a torch without it: nothing."""
    graph = getattr(cuda, "CUDAGraph", None)
    begin = getattr(graph, "capture_begin", None)
    end = getattr(graph, "capture_end", None)
    if begin is None or end is None:
        return

    @_compiler.entry
    @functools.wraps(begin)
    def capture_begin(self, *args, **kwargs):
        global _captures
        with _capture_lock:  # After any poll's queries in flight.
            _captures += 1
        try:
            return begin(self, *args, **kwargs)
        except BaseException:
            with _capture_lock:
                _captures -= 1
            raise

    @_compiler.entry
    @functools.wraps(end)
    def capture_end(self, *args, **kwargs):
        global _captures
        try:
            return end(self, *args, **kwargs)
        finally:
            with _capture_lock:
                _captures = max(0, _captures - 1)

    _core.patch(graph, "capture_begin", capture_begin)
    _core.patch(graph, "capture_end", capture_end)


class _OnDevice:
    __slots__ = ("_marks", "_previous")

    def __init__(self, marks):
        self._marks = marks
        self._previous = None

    def __enter__(self):
        marks = self._marks
        device = marks._device
        if device is None:
            return False
        if marks._current_device() == device.index:
            return True
        if marks._exchange is None:
            return False
        self._previous = marks._exchange(device.index)
        return True

    def __exit__(self, *exc):
        if self._previous is not None:
            self._marks._restore(self._previous)


class Marks:
    """CUDA events recorded on a device's current stream, whether each has completed, and the
    GPU time between two.

    A mark is an (event, device) pair: an event is reused on its own device only (torch
    refuses to record one on another device's stream)."""

    def __init__(self, cuda):
        self._event = cuda.Event
        self._current_stream = cuda.current_stream
        # Recording into a stream being captured (a CUDA graph) would put the event into the
        # graph: nothing is marked then, the collective counts as completed at its return.
        self._capturing = getattr(cuda, "is_current_stream_capturing", lambda: False)
        self._set_device = cuda.set_device
        self._current_device = cuda.current_device
        self._default_stream = cuda.default_stream
        self._exchange = getattr(cuda, "_exchange_device", None)
        self._restore = getattr(cuda, "_maybe_exchange_device", None) or self._exchange
        self._device = None  # The first mark's: the side thread's current device.
        self._bound = threading.local()
        self._lock = threading.Lock()
        self._free = {}  # device -> [completed events]
        self._kept = 0

    def mark(self, device):
        """A mark recorded now on `device`'s current stream, or None (a capture in progress)."""
        if _captures or self._capturing():
            return None
        if self._device is None:
            self._device = device
        event = None
        with self._lock:
            free = self._free.get(device)
            if free:
                event = free.pop()
                self._kept -= 1
        if event is None:
            event = self._event(enable_timing=True)  # No blocking sync: never waits.
        event.record(self._current_stream(device))
        return (event, device)

    def bind_thread(self):
        """Makes the first mark's device this thread's current device, once per thread (the
        side thread's, before its first query)."""
        if self._device is not None and not getattr(self._bound, "done", False):
            self._set_device(self._device)
            self._bound.done = True

    def start(self, device):
        """A mark to time from, as `mark`, or None where the current stream is not the
        device's default one (a collective on a side stream is not a wait of the rank)."""
        if self._current_stream(device) != self._default_stream(device):
            return None
        return self.mark(device)

    def on_device(self):
        """`with marks.on_device() as ok:` ok: this thread's current device is the marks' (the
        first mark's) until the block ends, switched to and back if it was another."""
        return _OnDevice(self)

    @staticmethod
    def done(mark):
        return bool(mark[0].query())

    @staticmethod
    def seconds(start, end):
        """The GPU time from `start` to `end`, two passed marks of one stream."""
        return start[0].elapsed_time(end[0]) / 1000.0

    def release(self, mark):
        """Takes back a completed mark's event for reuse."""
        with self._lock:
            if self._kept < FREE_EVENTS:
                self._free.setdefault(mark[1], []).append(mark[0])
                self._kept += 1
