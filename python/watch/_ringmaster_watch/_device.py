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

`Marks` makes and recycles those events; Comm polls them (`Comm.poll_device`), on the training
thread at each step's end and on the side thread before each collectives report, so a rank
whose training thread is stuck outside torch still reports what its GPU finished.

Threading: `mark` runs on the thread that made the collective (the current stream is that
thread's), `done`, `seconds` and `release` on any. torch.cuda.Event.query() is
cudaEventQuery and elapsed_time() cudaEventElapsedTime: neither blocks, and both hold the GIL
throughout (torch/csrc/cuda/Event.cpp), so the side thread may call them (_ticker.py). Ownership: an event belongs to its Comm entry from `mark` until
`release` puts it back on the free list (at most FREE_EVENTS kept). Errors: raised to the
caller (Comm, _collectives, _ddp), which disables the watch; the collective itself is untouched.
"""

import threading

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
        self._lock = threading.Lock()
        self._free = {}  # device -> [completed events]
        self._kept = 0

    def mark(self, device):
        """A mark recorded now on `device`'s current stream, or None (stream capture)."""
        if self._capturing():
            return None
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
