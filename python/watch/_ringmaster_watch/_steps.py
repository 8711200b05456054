"""Optimizer steps, the loss, checkpoint phases and torch.load, reported as WorkerReports.

- Steps: each optimizer's `step` is wrapped at its construction (Optimizer.__init__ patched),
  as a bound method so LR schedulers can still wrap it; on every torch, not 2.x's global
  `register_optimizer_step_post_hook`: a hook in that loop makes TorchDynamo give up compiling
  the whole Optimizer.step of a compiled custom optimizer ("graph break in a for/while loop"),
  while a traced call of the wrapped `step` breaks the caller's graph before it and the step
  compiles as its own frame (_compiler.py; PyTorch's optimizers break there anyway). The
  first optimizer that steps is the step clock (a GAN's second optimizer does not double the
  count). Another one becomes the clock when it has stepped at least twice while the clock
  has been silent for more than SWITCH_INTERVALS of its usual step time (a program's new
  optimizer for a second phase: the old one, still referenced, would otherwise stop the step
  reports and look like a hang); its steps since then are counted at that step. Optimizers
  stepping several times per clock step, or a clock step skipped (AMP), keep the clock. Step
  number: the optimizer's per-parameter state 'step' when it is a CPU number (Adam,
  AdamW...: a resumed run continues its count), else the count since start_step.
- step_seconds: between step ends (the first: since the first DDP forward or backward, else
  since init_process_group); comm_seconds: time blocked in collectives during it;
  compute_seconds: the rest; input_seconds: the part of it the stepping thread spent in a
  DataLoader iterator's __next__ (waiting for its next batch: the input pipeline's share, so a
  straggler can be told input-bound); a DataLoader inside another's __next__ counts once; from
  the second step on (the first step's thread is the one whose waits count).
- Loss: the mean of the scalar CPU tensors backward() was called on during the step, read
  after the step (a CUDA loss is never read: that would synchronise the GPU).
- Phases: CHECKPOINT around torch.save to a path or file and around
  torch.distributed.checkpoint's save/save_state_dict (nesting-safe), back to STEP after.
- restore_seconds: time in torch.load before the first step.
- A program that reports its own steps through ringmaster.worker.step() keeps them: the watch
  then sends no step reports (collectives and phases still).

Threading: steps and backward on the training thread; saves may come from any thread (a lock
guards the phase depth). Errors: a failure of ours disables the watch; the program's calls,
return values and exceptions pass through unchanged.
"""

import functools
import io
import math
import os
import sys
import threading
import time
import types
import weakref

from . import _compiler, _core
from ._comm import members_json
from ._reporter import json_number


# The clock's silence, in its usual step times (an average of the last ones), past which
# another optimizer that stepped twice or more takes the clock.
SWITCH_INTERVALS = 3.0


def _process_start_unix():
    """When this process started, in Unix seconds (from /proc; else now)."""
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read().decode()
        start_ticks = int(stat[stat.rindex(")") + 2:].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return time.time() - (uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return time.time()


class Steps:
    """The step, loss and phase instrumentation of one process."""

    def __init__(self, torch, reporter, comm, clock=time.perf_counter):
        self.torch = torch
        self.reporter = reporter
        self.comm = comm
        self.clock = clock
        self.collectives = None  # Set once torch.distributed is instrumented.
        self.ddp = None
        self.process_start_unix = _process_start_unix()
        self._activated = clock()
        self._primary = None  # weakref to the optimizer whose steps count.
        # Other optimizers' steps since the clock's last step ({optimizer: count}, weakly).
        self._rivals = weakref.WeakKeyDictionary()
        self._interval = None  # The clock's usual step time: an average of its last ones.
        self._last_end = None
        # GPU waits found after their step (Comm.poll_device) not yet charged: carried into
        # the next steps' time blocked, at most one step's worth.
        self._late = 0.0
        self._first_backward = None
        self._step = 0
        self._start_step = None
        self._state_cache = None  # weakref to the step tensor of the last state read.
        self._losses = []
        self._restore_seconds = 0.0
        self._phase_lock = threading.Lock()
        self._phase_depth = 0
        self._phase_start = 0.0
        # Seconds in DataLoader iterators' __next__ since the last step's end, on the thread
        # that steps (known from the first step on; a prefetching thread's are not waits).
        self._input = 0.0
        self._stepping_thread = None
        self._input_depth = 0  # __next__ calls in progress on the stepping thread (nesting)

    # -- installation --------------------------------------------------------------------------
    def install(self):
        torch = self.torch
        optimizer = getattr(getattr(torch, "optim", None), "Optimizer", None)
        if optimizer is None or "__init__" not in vars(optimizer):
            raise RuntimeError("torch.optim.Optimizer.__init__ is missing")
        _core.patch(optimizer, "__init__", self._wrap_optimizer_init(optimizer.__init__))
        tensor = getattr(torch, "Tensor", None)
        if tensor is None or not callable(getattr(tensor, "backward", None)):
            raise RuntimeError("torch.Tensor.backward is missing")
        _core.patch(tensor, "backward", self._wrap_backward(tensor.backward))
        autograd = getattr(torch, "autograd", None)
        if not callable(getattr(autograd, "backward", None)):
            raise RuntimeError("torch.autograd.backward is missing")
        _core.patch(autograd, "backward", self._wrap_autograd_backward(autograd.backward))
        serialization = getattr(torch, "serialization", None)
        for name, wrap in (("save", self._wrap_save), ("load", self._wrap_load)):
            fn = getattr(torch, name, None)
            if fn is None:
                raise RuntimeError("torch.%s is missing" % name)
            wrapper = wrap(fn)
            _core.patch(torch, name, wrapper)
            if serialization is not None and getattr(serialization, name, None) is fn:
                _core.patch(serialization, name, wrapper)
        # The input pipeline's wait: optional (a torch without it only reports no input time).
        loader = sys.modules.get("torch.utils.data.dataloader")
        iterator = getattr(loader, "_BaseDataLoaderIter", None)
        if iterator is not None and "__next__" in vars(iterator):
            _core.patch(iterator, "__next__", self._wrap_next(iterator.__next__))

    def install_checkpoint(self, dcp):
        """torch.distributed.checkpoint: its synchronous saves are the checkpoint phase."""
        for name in ("save", "save_state_dict"):
            fn = getattr(dcp, name, None)
            if fn is not None:
                _core.patch(dcp, name, self._wrap_phase(fn))

    # -- optimizer steps -----------------------------------------------------------------------
    def _wrap_optimizer_init(self, init):
        watch = self

        @_compiler.entry
        @functools.wraps(init)
        def wrapper(optimizer, *args, **kwargs):
            init(optimizer, *args, **kwargs)
            if _core.enabled and "step" not in optimizer.__dict__:
                try:
                    # A bound method named `step`: LR schedulers rewrap it (they need
                    # __self__/__func__), pickling finds it by name.
                    optimizer.step = types.MethodType(_watched_step_for(watch), optimizer)
                except Exception as exc:  # noqa: BLE001
                    _core.fail("Optimizer.__init__", exc)

        return wrapper

    def step_ended(self, optimizer):
        now = self.clock()
        if self.ddp is not None and self.ddp.counted:
            self.ddp.sync()  # Also for a program reporting its own steps: its collectives.
        if _explicit_steps():
            # The program reports its own steps (ringmaster.worker.step): no doubles. Still a
            # move for the side thread's stall rule (_ticker.py).
            self.reporter.moves += 1
            return
        primary = self._primary() if self._primary is not None else None
        skipped = 0
        if primary is None:
            self._primary = weakref.ref(optimizer)
        elif primary is not optimizer:
            count = self._rivals.get(optimizer, 0) + 1
            self._rivals[optimizer] = count
            interval = self._interval
            if count < 2 or interval is None or \
                    now - self._last_end <= SWITCH_INTERVALS * interval:
                return  # Not the clock (yet): a GAN's other optimizer, or a clock step skipped.
            self._primary = weakref.ref(optimizer)  # The clock has gone quiet: this one now.
            skipped = count - 1  # Its steps not reported, in this report's time and count.
        if self._rivals:
            self._rivals.clear()
        first = self._last_end is None
        if first:
            starts = [t for t in (self.ddp.first_forward if self.ddp else None,
                                  self._first_backward) if t is not None]
            if not starts and self.collectives is not None:
                starts = [t for t in (self.collectives.init_returned,) if t is not None]
            began = min(starts) if starts else self._activated
        else:
            began = self._last_end
        self._last_end = now
        self._stepping_thread = threading.get_ident()
        input_seconds, self._input = self._input, 0.0  # (0 at the first step: no thread known)
        state_step = self._read_state_step(optimizer)
        if self._start_step is None:
            self._start_step = max(0, state_step - 1) if state_step is not None else 0
            self._step = self._start_step
        self._step = state_step if state_step is not None and state_step > self._step \
            else self._step + 1 + skipped
        self.comm.poll()
        blocked, stats, groups, late = self.comm.take_raw()
        step_seconds = max(0.0, now - began)
        # The host's time blocked is this step's (beyond its length: before the first step, a
        # barrier while rank 0 prepared, say: not carried); the GPU's found late, of earlier
        # steps, fills what the step has left, the rest waits for the next.
        host = min(blocked, step_seconds)
        late += self._late
        charged = min(step_seconds, host + late)
        self._late = min(late - (charged - host), step_seconds)
        self._interval = step_seconds if self._interval is None \
            else 0.75 * self._interval + 0.25 * step_seconds
        loss = None
        if self._losses:
            losses, self._losses = self._losses, []
            loss = math.fsum([float(t) for t in losses]) / len(losses)
        extra = None
        if first:
            init_unix = self.collectives.init_returned_unix if self.collectives else None
            extra = (int(self.process_start_unix * 1e9), self._start_step, self._restore_seconds,
                     None if init_unix is None
                     else max(0.0, init_unix - self.process_start_unix))
        # A snapshot: written out later, by the reporter's flush (encode_step).
        # Waits for input are outside collectives: part of the compute, at most all of it.
        input_seconds = min(input_seconds, step_seconds - charged)
        self.reporter.defer("step", encode_step, (
            self._step, step_seconds, charged, time.time_ns(), stats,
            groups, loss, extra, input_seconds))

    def _read_state_step(self, optimizer):
        """The optimizer's state step (_state_step), read only when it may have jumped.

        Adam-like optimizers count in place (step_t += 1, torch._foreach_add_): while the first
        parameter's step is the very tensor of the last read, the step went up by one, which
        gives the count step_ended computes from a fresh read (the larger of the state step and
        its own count plus one, and its own count is never below the last state step read), so
        None is returned. A load_state_dict of a checkpoint (new tensors), a replaced step or an
        int step (a new object each step) is read again. Saves the tensor reads and .item() of
        each step (bench/pytorch_watch_overhead.py --breakdown). Holds only a weak reference.
        """
        cached = self._state_cache
        if cached is not None:
            try:
                first = next(iter(optimizer.state.values()))
                if first.get("step") is cached():
                    return None
            except Exception:  # noqa: BLE001  Not a dict of dicts: the full read decides.
                pass
        self._state_cache = None
        step = _state_step(optimizer)
        if step is not None:
            tensor = next(iter(optimizer.state.values())).get("step")
            if not isinstance(tensor, (int, float)):
                try:
                    self._state_cache = weakref.ref(tensor)
                except TypeError:
                    pass  # Not weak-referenceable: read every step.
        return step

    # -- input: the DataLoader's batches ------------------------------------------------------
    def _wrap_next(self, next_):
        watch = self
        clock = self.clock

        @_compiler.entry
        @functools.wraps(next_)
        def wrapper(iterator):
            # Only the thread that steps waits for its batches (a prefetching thread's waits
            # are not the step's); before the first step, none is known (and none is reported).
            if not _core.enabled or watch._stepping_thread != threading.get_ident():
                return next_(iterator)
            watch._input_depth += 1
            start = clock()
            try:
                return next_(iterator)
            finally:
                # (Nothing here can fail: integer and float arithmetic.)
                watch._input_depth -= 1
                if watch._input_depth == 0:  # the outermost DataLoader's wait only
                    watch._input += clock() - start

        return wrapper

    # -- backward: the loss --------------------------------------------------------------------
    def _wrap_backward(self, backward):
        watch = self

        @_compiler.entry
        @functools.wraps(backward)
        def wrapper(tensor, *args, **kwargs):
            if _core.enabled:
                try:
                    if watch._first_backward is None:
                        watch._first_backward = watch.clock()
                    if (tensor.is_cpu and tensor.dim() == 0
                            and tensor.is_floating_point() and len(watch._losses) < 1024):
                        watch._losses.append(tensor.detach())
                except Exception as exc:  # noqa: BLE001
                    _core.fail("Tensor.backward", exc)
            return backward(tensor, *args, **kwargs)

        return wrapper

    def _wrap_autograd_backward(self, backward):
        """torch.autograd.backward (Tensor.backward calls it): when it returns, DDP's buckets it
        waited for are completed (_ddp.py)."""
        watch = self

        @_compiler.entry
        @functools.wraps(backward)
        def wrapper(*args, **kwargs):
            try:
                return backward(*args, **kwargs)
            finally:
                ddp = watch.ddp
                if ddp is not None and ddp.waits:
                    try:
                        ddp.backward_returned()
                    except Exception as exc:  # noqa: BLE001
                        _core.fail("torch.autograd.backward", exc)

        return wrapper

    # -- phases --------------------------------------------------------------------------------
    def _wrap_save(self, save):
        phase = self._wrap_phase(save)

        @_compiler.entry
        @functools.wraps(save)
        def wrapper(*args, **kwargs):
            f = args[1] if len(args) > 1 else kwargs.get("f")
            if isinstance(f, (str, bytes, os.PathLike)) or (
                    hasattr(f, "write") and not isinstance(f, io.BytesIO)):
                return phase(*args, **kwargs)
            return save(*args, **kwargs)  # In memory: serialisation, not a checkpoint.

        return wrapper

    def _wrap_phase(self, fn):
        watch = self

        @_compiler.entry
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if not _core.enabled:
                return fn(*args, **kwargs)
            watch._enter_checkpoint()
            try:
                return fn(*args, **kwargs)
            finally:
                watch._leave_checkpoint()

        return wrapper

    def _enter_checkpoint(self):
        try:
            with self._phase_lock:
                self._phase_depth += 1
                if self._phase_depth > 1:
                    return
                self._phase_start = self.clock()
            self.reporter.send("phase", {"phase": "WORKER_PHASE_CHECKPOINT"})
        except Exception as exc:  # noqa: BLE001
            _core.fail("checkpoint phase", exc)

    def _leave_checkpoint(self):
        try:
            with self._phase_lock:
                self._phase_depth -= 1
                if self._phase_depth > 0:
                    return
                seconds = self.clock() - self._phase_start
            self.reporter.send("phase", {"phase": "WORKER_PHASE_STEP",
                                         "checkpointStep": str(self._step),
                                         "checkpointSeconds": max(0.0, seconds)})
        except Exception as exc:  # noqa: BLE001
            _core.fail("checkpoint phase", exc)

    def _wrap_load(self, load):
        watch = self

        @_compiler.entry
        @functools.wraps(load)
        def wrapper(*args, **kwargs):
            if not _core.enabled or watch._last_end is not None:
                return load(*args, **kwargs)
            t0 = watch.clock()
            try:
                return load(*args, **kwargs)
            finally:
                watch._restore_seconds += watch.clock() - t0

        return wrapper


def encode_step(raw):
    """A step_ended snapshot as the ReportStepRequest's JSON members, written directly (no dict
    to encode). The times are finite (perf_counter differences): %r writes them as json.dumps
    does; the loss may not be (json_number)."""
    step, step_seconds, comm_seconds, end_ns, stats, groups, loss, extra, input_seconds = raw
    members = ['"step":"%d","stepSeconds":%r,"computeSeconds":%r,"commSeconds":%r,'
               '"endTimeUnixNanos":"%d"' % (step, step_seconds, step_seconds - comm_seconds,
                                            comm_seconds, end_ns)]
    if input_seconds > 0:
        members.append('"inputSeconds":%r' % input_seconds)
    collectives = members_json(stats, groups)
    if collectives:
        members.append(collectives)
    if loss is not None:
        members.append('"loss":%s' % json_number(loss))
    if extra is not None:
        start_ns, start_step, restore_seconds, rendezvous_seconds = extra
        members.append('"processStartUnixNanos":"%d","startStep":"%d","restoreSeconds":%s'
                       % (start_ns, start_step, json_number(restore_seconds)))
        if rendezvous_seconds is not None:
            members.append('"rendezvousSeconds":%s' % json_number(rendezvous_seconds))
    return ",".join(members)


def _explicit_steps():
    """Whether the program called ringmaster.worker.step() (python/ringmaster/worker.py)."""
    worker = sys.modules.get("ringmaster.worker")
    return worker is not None and getattr(getattr(worker, "_state", None), "step", 0) > 0


def _watched_step_for(watch):
    @_compiler.entry
    def step(self, *args, **kwargs):
        result = type(self).step(self, *args, **kwargs)
        if _core.enabled:
            try:
                watch.step_ended(self)
            except Exception as exc:  # noqa: BLE001
                _core.fail("optimizer step", exc)
        return result

    return step


def _state_step(optimizer):
    """The optimizer's own step count when it keeps one on the CPU (Adam...), else None."""
    state = getattr(optimizer, "state", None)
    if not state:
        return None
    for param_state in state.values():
        step = param_state.get("step") if isinstance(param_state, dict) else None
        if step is None:
            return None
        if isinstance(step, (int, float)):
            return int(step)
        is_cpu = getattr(step, "is_cpu", None)
        if is_cpu is None:  # A torch without Tensor.is_cpu.
            device = getattr(step, "device", None)
            is_cpu = device is not None and device.type == "cpu"
        if is_cpu and step.numel() == 1:
            return int(step.item())
        return None
    return None
