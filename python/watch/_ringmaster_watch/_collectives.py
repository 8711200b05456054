"""Wraps torch.distributed's collective functions, new_group, split_group (NCCL, torch 2.5
on), init_process_group and destroy_process_group (a group destroyed is counted no more; one
made again, afresh from 0).

Each wrapped call on a group enters the group's next sequence number; a synchronous call
completes it on return (its duration is time blocked); an async_op=True call completes it when
its work's wait() returns (the wait is the time blocked, not the overlap before it) or when the
work says is_completed(). On GPU tensors (NCCL) a call returns, and a work's wait() too, once
the collective is queued: it completes when the GPU has passed a CUDA event recorded on the
current stream after that return (_device.py), and its time blocked is its GPU time where
longer: from a mark before the call (or the wait) to that one. A call made inside another
wrapped call (all_gather_object's own
all_gather...) counts once, as the inner one. Every name is patched: torch.distributed.X,
torch.distributed.distributed_c10d.X (the functions torch's own helpers call) and X in any
torch.distributed module that took it by name before the patch (device_mesh's
init_process_group, new_group and split_group, which init_device_mesh calls: from torch 2.6,
split_group where the default group is bound to a device, init_process_group(device_id=...) on
NCCL).

Threading: the wrappers run on any thread; the depth guard is thread-local. Errors: an
exception of the wrapped function passes through unchanged; one of ours disables the watch and
the call proceeds as if unwrapped.
"""

import functools
import sys
import threading
import time
import types

from . import _compiler, _core, _device

# torch.distributed function -> (op name reported, parameter whose tensors are the size).
COLLECTIVES = {
    "all_reduce": ("all_reduce", "tensor"),
    "reduce": ("reduce", "tensor"),
    "broadcast": ("broadcast", "tensor"),
    "all_gather": ("all_gather", "tensor_list"),
    "all_gather_into_tensor": ("all_gather", "output_tensor"),
    "_all_gather_base": ("all_gather", "output_tensor"),
    "reduce_scatter": ("reduce_scatter", "input_list"),
    "reduce_scatter_tensor": ("reduce_scatter", "input"),
    "_reduce_scatter_base": ("reduce_scatter", "input"),
    "all_to_all": ("all_to_all", "input_tensor_list"),
    "all_to_all_single": ("all_to_all", "input"),
    "gather": ("gather", "tensor"),
    "scatter": ("scatter", "tensor"),
    "barrier": ("barrier", None),
    "monitored_barrier": ("barrier", None),  # gloo's: torch numbers it 0 (1.13) or 2 (2.x).
    "send": ("send", "tensor"),
    "recv": ("recv", "tensor"),
    "isend": ("send", "tensor"),
    "irecv": ("recv", "tensor"),
}
ASYNC_ALWAYS = ("isend", "irecv")  # They return a work without an async_op argument.

_tls = threading.local()


def _nbytes(value):
    if value is None:
        return 0
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
    numel = getattr(value, "numel", None)
    size = getattr(value, "element_size", None)
    if numel is None or size is None:
        return 0
    return int(numel()) * int(size())


def _creating(fn, *args, **kwargs):
    """fn(*args, **kwargs) with this thread marked as making a group: the group-making calls it
    makes in turn (new_subgroups -> new_group) name nothing of their own."""
    _tls.creating = True
    try:
        return fn(*args, **kwargs)
    finally:
        _tls.creating = False


def locator(fn, name):
    """A fast reader of argument `name` from (args, kwargs), from fn's signature (its default
    when not given); None where fn has no signature or no such parameter."""
    import inspect  # Only when torch.distributed is instrumented.

    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    for i, p in enumerate(params):
        if p.name == name:
            default = None if p.default is inspect.Parameter.empty else p.default
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                return lambda args, kwargs, i=i, d=default: (
                    args[i] if len(args) > i else kwargs.get(name, d))
            return lambda args, kwargs, d=default: kwargs.get(name, d)
    return None


class Collectives:
    """The torch.distributed instrumentation of one process."""

    def __init__(self, dist, comm, clock=time.perf_counter, is_compiling=None):
        self.dist = dist
        self.comm = comm
        self.clock = clock
        self._is_compiling = is_compiling or (lambda: False)
        self.init_returned = None  # perf_counter when init_process_group returned.
        self.init_returned_unix = None
        self.on_init = []  # Callables run at each call of init_process_group, before it.
        c10d = getattr(dist, "distributed_c10d", None)
        self._modules = [dist] + ([c10d] if c10d is not None else [])
        self._non_member = getattr(getattr(c10d, "GroupMember", None), "NON_GROUP_MEMBER", object())
        self._originals = {}  # wrapper -> the torch.distributed function it wraps.

    # -- installation --------------------------------------------------------------------------
    def install(self):
        dist = self.dist
        for name, (op, size_param) in COLLECTIVES.items():
            fn = getattr(dist, name, None)
            if fn is None:
                continue
            group_of = locator(fn, "group")
            if group_of is None:
                raise RuntimeError("torch.distributed.%s has no group parameter" % name)
            async_of = (lambda a, k: True) if name in ASYNC_ALWAYS else locator(fn, "async_op")
            if async_of is None:
                async_of = lambda a, k: False  # noqa: E731
            size_of = locator(fn, size_param) if size_param else None
            self._patch_everywhere(name, fn, self._wrap(fn, op, group_of, async_of, size_of))
        for name, make in (("new_group", self._wrap_new_group),
                           ("init_process_group", self._wrap_init),
                           ("destroy_process_group", self._wrap_destroy)):
            fn = getattr(dist, name, None)
            if fn is None:
                raise RuntimeError("torch.distributed.%s is missing" % name)
            self._patch_everywhere(name, fn, make(fn))
        split = (getattr(dist, "split_group", None) or
                 getattr(getattr(dist, "distributed_c10d", None), "split_group", None))
        wrapper = self._wrap_split_group(split) if split is not None else None  # torch 2.5 on
        if wrapper is not None:
            self._patch_everywhere("split_group", split, wrapper)
        work = self._work_class()
        if work is not None and hasattr(work, "wait"):
            _core.patch(work, "wait", self._wrap_wait(work.wait))

    def _work_class(self):
        c = getattr(self.dist, "Work", None)
        if c is None:
            c = getattr(getattr(self.dist, "distributed_c10d", None), "Work", None)
        return c if isinstance(c, type) else None

    def _patch_everywhere(self, name, original, wrapper):
        """Patches `name` in torch.distributed, distributed_c10d and every torch.distributed
        module already imported that took the function by name (torch 2.x's device_mesh took
        init_process_group and new_group while torch.distributed imported: init_device_mesh
        calls them). A module imported later takes the wrapper from distributed_c10d."""
        self._originals[wrapper] = original
        for module in self._modules:
            if getattr(module, name, None) is original:
                _core.patch(module, name, wrapper)
        for module_name, module in list(sys.modules.items()):
            # Their own namespace only (vars): no module __getattr__ or lazy import runs.
            if (module_name.startswith("torch.distributed.") and
                    isinstance(module, types.ModuleType) and module not in self._modules and
                    vars(module).get(name) is original):
                _core.patch(module, name, wrapper)

    def remap_originals(self, functional):
        """torch.distributed._functional_collectives imported after the patches keyed its
        `traceable_collective_remaps` (the collectives TorchDynamo rewrites as functional
        ones, by identity) by our wrappers: the originals get the same entries, so a traced
        collective still compiles once the watch has disabled itself and put them back."""
        remaps = getattr(functional, "traceable_collective_remaps", None)
        if not isinstance(remaps, dict):
            return
        for wrapper, original in list(self._originals.items()):
            if wrapper in remaps and original not in remaps:
                remaps[original] = remaps[wrapper]

    # -- group helpers -------------------------------------------------------------------------
    def _size(self, pg):
        dist = self.dist
        if pg is None:
            return int(dist.get_world_size())
        return int(dist.get_world_size(pg))

    def marks(self):
        """The process's _device.Marks (comm.marks), made at the first collective on GPU
        tensors from the process's torch.cuda."""
        marks = self.comm.marks
        if marks is None:
            marks = self.comm.marks = _device.Marks(sys.modules["torch"].cuda)
        return marks

    # -- wrappers ------------------------------------------------------------------------------
    def _wrap(self, fn, op, group_of, async_of, size_of):
        comm = self.comm

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if (not _core.enabled or getattr(_tls, "depth", 0) or self._is_compiling()
                    or not self.dist.is_initialized()):
                return fn(*args, **kwargs)  # Before init_process_group torch raises its error.
            try:
                pg = group_of(args, kwargs)
                if pg is self._non_member:
                    return fn(*args, **kwargs)  # Not in the group: no collective here.
                group = comm.group(pg, self._size)
                is_async = bool(async_of(args, kwargs))
                value = size_of(args, kwargs) if size_of is not None else None
                nbytes = _nbytes(value)
                device = _device.cuda_device(value)
                read = group.read  # Counted by the group's own number (_ddp.py): follow it.
                before = int(read()) if read is not None else 0
                # On the GPU: the current stream reaches the call (its wait starts there).
                start = (self.marks().start(device)
                         if device is not None and not is_async else None)
                seq = comm.enter(group)
            except Exception as exc:  # noqa: BLE001
                _core.fail("torch.distributed.%s" % fn.__name__, exc)
                return fn(*args, **kwargs)
            _tls.depth = 1
            comm.begin_blocking()
            t0 = self.clock()
            result = None
            returned = False
            try:
                result = fn(*args, **kwargs)
                returned = True
                return result
            finally:
                seconds = self.clock() - t0
                _tls.depth = 0
                comm.end_blocking()
                try:
                    if read is not None:
                        comm.adjust(group, int(read()) - before)
                    if is_async and result is not None and hasattr(result, "wait"):
                        comm.watch_work(result, group, seq, op, nbytes, device)
                    else:
                        mark = (self.marks().mark(device)
                                if returned and device is not None else None)
                        comm.complete(group, seq, op, nbytes, seconds, mark, start)
                except Exception as exc:  # noqa: BLE001
                    _core.fail("torch.distributed.%s" % fn.__name__, exc)

        return wrapper

    def _wrap_wait(self, wait):
        comm = self.comm

        @functools.wraps(wait)
        def wrapper(work, *args, **kwargs):
            if not _core.enabled or self._is_compiling():
                return wait(work, *args, **kwargs)  # Traced: as torch.distributed's are.
            watched = comm.watched(work)
            if watched is None:
                return wait(work, *args, **kwargs)
            device = watched[0]
            try:
                start = self.marks().start(device) if device is not None else None
            except Exception as exc:  # noqa: BLE001
                _core.fail("Work.wait", exc)
                return wait(work, *args, **kwargs)
            return self.blocked_call(
                "Work.wait", device, lambda seconds, mark: comm.waited(work, seconds, mark, start),
                wait, work, *args, **kwargs)

        return wrapper

    def blocked_call(self, where, device, record, fn, *args, **kwargs):
        """Returns fn(*args, **kwargs), a call its thread blocks in while collectives run (the
        thread counts as inside one meanwhile), timed; when it ends, record(seconds, mark):
        `mark` recorded after it on `device`'s current stream if it returned and `device` is
        set, else None. fn's exceptions pass through; record's disable the watch (`where`)."""
        comm = self.comm
        comm.begin_blocking()
        t0 = self.clock()
        returned = False
        try:
            result = fn(*args, **kwargs)
            returned = True
            return result
        finally:
            seconds = self.clock() - t0
            comm.end_blocking()
            try:
                mark = self.marks().mark(device) if returned and device is not None else None
                record(seconds, mark)
            except Exception as exc:  # noqa: BLE001
                _core.fail(where, exc)

    def _wrap_new_group(self, fn):
        @_compiler.entry
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            # Nested new_group calls (new_subgroups -> new_group) name each group once.
            if not _core.enabled or getattr(_tls, "creating", False):
                return fn(*args, **kwargs)
            pg = _creating(fn, *args, **kwargs)
            try:
                member = pg is not None and pg is not self._non_member
                self.comm.created(pg if member else None, self._size(pg) if member else 0)
            except Exception as exc:  # noqa: BLE001
                _core.fail("torch.distributed.new_group", exc)
            return pg

        return wrapper

    def _wrap_split_group(self, fn):
        """split_group(parent_pg, split_ranks, ...): every rank of the parent passes the same
        splits and gets the group of the one holding it (torch takes the first), or None. None
        (no wrapper) for a split_group without those parameters."""
        import inspect  # Only when torch.distributed is instrumented.

        try:
            signature = inspect.signature(fn)
        except (TypeError, ValueError):
            signature = None
        if signature is None or not {"parent_pg", "split_ranks"} <= set(signature.parameters):
            return None  # An experimental API changed: left unwrapped (groups named at first use).

        @_compiler.entry
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if not _core.enabled or getattr(_tls, "creating", False):
                return fn(*args, **kwargs)
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError:
                return fn(*args, **kwargs)  # Torch's own error.
            splits = bound.arguments.get("split_ranks")
            if splits is not None and not isinstance(splits, (list, tuple)):
                # An iterator torch would consume: the watch reads the same splits after it.
                splits = bound.arguments["split_ranks"] = list(splits)
            parent = bound.arguments.get("parent_pg")
            pg = _creating(fn, *bound.args, **bound.kwargs)
            try:
                splits = [list(s) for s in splits]
                me = int(self.dist.get_rank(parent) if parent is not None
                         else self.dist.get_rank())
                index = next((i for i, s in enumerate(splits) if me in s), -1)
                member = pg is not None and pg is not self._non_member and index >= 0
                self.comm.split(parent, pg if member else None,
                                self._size(pg) if member else 0, len(splits), index, self._size)
            except Exception as exc:  # noqa: BLE001
                _core.fail("torch.distributed.split_group", exc)
            return pg

        return wrapper

    def _wrap_destroy(self, fn):
        @_compiler.entry
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            result = fn(*args, **kwargs)
            if _core.enabled:
                try:
                    self.comm.destroyed(args[0] if args else kwargs.get("group"))
                except Exception as exc:  # noqa: BLE001
                    _core.fail("torch.distributed.destroy_process_group", exc)
            return result

        return wrapper

    def _wrap_init(self, fn):
        timeout_of = locator(fn, "timeout") or (lambda args, kwargs: kwargs.get("timeout"))
        backend_of = locator(fn, "backend") or (lambda args, kwargs: kwargs.get("backend"))

        where = "torch.distributed.init_process_group"

        @_compiler.entry
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if not _core.enabled or self.dist.is_initialized():
                return fn(*args, **kwargs)  # Initialised already: torch raises its error.
            # Its rendezvous waits for every rank (up to the timeout): a rank that never calls
            # it is named by the peers' reports (_comm.Comm.rendezvous), sent from now on, the
            # first at once (on_init: torch 1.13 waits for the store's workers holding the GIL).
            rendezvous = None
            try:
                self.comm.timeout_seconds = self._timeout_seconds(
                    timeout_of(args, kwargs), backend_of(args, kwargs))
                rendezvous = self.comm.rendezvous()
                for callback in self.on_init:
                    callback()
            except Exception as exc:  # noqa: BLE001
                _core.fail(where, exc)
            try:
                result = fn(*args, **kwargs)
            finally:
                if rendezvous is not None:
                    try:
                        self.comm.rendezvous_done(rendezvous)
                    except Exception as exc:  # noqa: BLE001
                        _core.fail(where, exc)
            if not _core.enabled:
                return result
            try:
                self.init_returned = self.clock()
                self.init_returned_unix = time.time()
                world = self._default_group()
                self.comm.set_world(world, self._size(None))
            except Exception as exc:  # noqa: BLE001
                _core.fail(where, exc)
            return result

        return wrapper

    def _timeout_seconds(self, timeout, backend):
        """How long the program lets a collective wait before torch gives up: init_process_group's
        `timeout` (or its signature's default), else torch's default for `backend` as torch picks
        it (_get_default_timeout, not called: it warns where NCCL is not built): NCCL's own for
        exactly "nccl" where this torch has one, else default_pg_timeout; 0 if unknown."""
        if timeout is None:
            c10d = getattr(self.dist, "distributed_c10d", None)
            constants = getattr(self.dist, "constants", None)

            def default(name):
                for owner in (c10d, self.dist, constants):
                    value = getattr(owner, name, None)
                    if value is not None:
                        return value
                return None

            nccl = default("default_pg_nccl_timeout")
            backend = str(backend or "").lower()
            timeout = (nccl if backend == "nccl" and hasattr(nccl, "total_seconds")
                       else default("default_pg_timeout"))
        seconds = getattr(timeout, "total_seconds", None)
        return max(0.0, float(seconds())) if callable(seconds) else 0.0

    def _default_group(self):
        c10d = getattr(self.dist, "distributed_c10d", None)
        get = getattr(c10d, "_get_default_group", None)
        if get is not None:
            try:
                return get()
            except Exception:  # noqa: BLE001  Fall back to the public name.
                pass
        return getattr(getattr(self.dist, "group", None), "WORLD", None)
