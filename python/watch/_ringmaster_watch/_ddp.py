"""Sees DistributedDataParallel's gradient buckets, which DDP reduces from C++ (wrapping
torch.distributed misses them), without changing what DDP computes.

The usual way, by the process group's own sequence number: at a DDP module's first forward,
if its process group counts its collectives (`_get_sequence_number_for_group()` is not 0:
init_process_group and new_group set it for gloo and NCCL groups, the same on every rank, and
each collective adds one; seen on gloo with torch 1.13 and 2.6, on NCCL with torch 2.11), the watch
takes that number as its count of the group's collectives from then on (Comm.count_from) and
registers no comm hook: DDP keeps its own C++ path, so its arithmetic and speed are untouched.
It registers one tensor hook per module, on the first parameter DDP reduces: in
each backward pass that reaches it (a hook that returns None: the gradient is untouched), it
queues an engine callback, which runs once the graph is computed and every bucket launched,
before DDP's own final callback (queued later, when its last bucket became ready), which waits
for them. The callback reads the number; the buckets since the watch last knew are now entered
and waited for. When backward() returns (the torch.autograd.backward wrapper, _steps.py) they
are completed, and the time from the callback to the return is the time this rank blocked in them:
a rank waiting for a slow peer reports the wait, so the straggler detector judges compute; a
rank stuck in that wait is inside those collectives for the side thread (_ticker.py). A step
whose backward ran no callback (none reached the parameter) reads the number at its end; a
backward through another entry point than torch.autograd.backward has its wait closed at the
next forward or step end, counting 0 s. A wrapped torch.distributed call on such a
group moves the offset by what it did to the number (_collectives.py: a send/recv is not
numbered). Per step and group: two Python calls and two reads of the number
(bench/pytorch_watch_overhead.py). A backend without sequence numbers (MPI...) raises on the
read: the comm hook then. DDP's broadcast of the module's buffers before a forward
(`_sync_buffers`, wrapped) is followed the same way: while it runs the side thread reads the
number (the rank is inside it), and its collectives become a "broadcast" row timed as blocked.
DDP's constructor (wrapped) is too: while it runs the rank counts as blocked and the side thread
reads the number, and its collectives then count as entered and completed, the same on every
rank (a rank waiting there for a peer stuck before it is named as ahead of that peer).

The fallback, a comm hook equal to DDP's default, where the group does not count (its number
stays 0): before the first forward, unless its user registered a comm hook of their own, the
watch registers `_allreduce_hook`: the bucket's gradients times 1/world (the very operation
DDP's reducer applies without a hook, `at::mul_out(bucket_view, grad, 1/div_factor)`), then an
async all_reduce (sum) of the bucket on DDP's group: the same arithmetic in the same order, so
the same results bit for bit. Not registered (DDP's own path stays, unseen) where that cannot
be promised: gradient_as_bucket_view=True on a group whose size is not a power of two (DDP then
divides rather than multiplies), DDP's join() for uneven inputs (it divides by the ranks still
joined), or a torch without GradBucket.buffer/is_last or Future.then (the watch then disables
itself). If the user registers a hook after ours (register_comm_hook after the first
forward), ours steps aside: the user's hook runs in its place, through ours. This path costs a
Python call and a separate scaling pass per bucket (docs/benchmarks.md).

Threading: the tensor hook and the engine callback run on an autograd thread (the caller's
on CPU), before backward() returns to the caller; the comm hook on the autograd thread, its
callback on the backend's; the bookkeeping is Comm's (thread-safe). Errors: a failure of ours
disables the watch; the backward, and the hook's reduction, then run exactly as without it.
"""

import functools
import weakref

from . import _compiler, _core, _device
from ._collectives import locator


class DdpWatch:
    """The DDP instrumentation of one process."""

    # True: always the comm hook, never the sequence number (the tests and the bench set it to
    # exercise and measure the fallback; not a user setting).
    prefer_hook = False

    def __init__(self, torch, dist, comm, collectives):
        self.torch = torch
        self.dist = dist
        self.comm = comm
        self.collectives = collectives
        self.first_forward = None  # perf_counter of the first DDP forward (a step's start).
        self._all_reduce = getattr(dist, "all_reduce")  # The original, taken before patching.
        self._register = None
        # (sequence number reader, _Group, gradient bytes, the parameters' CUDA device or None)
        # of each group counted by its process group's number; read without a lock (replaced,
        # never changed in place, by a first forward on the training thread; readers iterate
        # the list they took).
        self.counted = []
        # id(parameter) -> weakref to it, for the parameters that carry our tensor hook (not a
        # WeakSet: a tensor's == is elementwise).
        self._hooked = {}
        self._engine = None
        # The buckets waited for in the backward now ending, [(group, its number when the graph
        # was computed, gradient bytes, CUDA device or None, a _device mark then or None)], and
        # when that was: set by the engine callback
        # (autograd thread), taken by backward_returned (the training thread, after backward).
        self.waits = []
        self._graph_done = 0.0
        self._callbacks = 0  # Engine callbacks run (each read the numbers)...
        self._synced = 0  # ... as of the last step end.

    def check(self):
        """Raises RuntimeError naming what this torch lacks for the comm hook."""
        bucket = getattr(self.dist, "GradBucket", None)
        for owner, name, attr in ((bucket, "torch.distributed.GradBucket", "buffer"),
                                  (bucket, "torch.distributed.GradBucket", "is_last"),
                                  (getattr(self.torch, "futures", None), "torch.futures",
                                   "Future")):
            if owner is None or not hasattr(owner, attr):
                raise RuntimeError("%s.%s is missing" % (name, attr))

    def install(self, ddp_class):
        for name in ("forward", "register_comm_hook"):
            if not callable(getattr(ddp_class, name, None)):
                raise RuntimeError("DistributedDataParallel.%s is missing" % name)
        _core.patch(ddp_class, "forward", self._wrap_forward(ddp_class.forward))
        self._register = ddp_class.register_comm_hook
        _core.patch(ddp_class, "register_comm_hook", self._wrap_register(self._register, True))
        builtin = getattr(ddp_class, "_register_builtin_comm_hook", None)
        if builtin is not None:
            _core.patch(ddp_class, "_register_builtin_comm_hook",
                        self._wrap_register(builtin, python=False))
        sync_buffers = getattr(ddp_class, "_sync_buffers", None)
        if callable(sync_buffers):  # Private: a torch without it leaves them in the buckets.
            _core.patch(ddp_class, "_sync_buffers", self._wrap_sync_buffers(sync_buffers))
        _core.patch(ddp_class, "__init__", self._wrap_init(ddp_class.__init__))

    # -- the constructor -------------------------------------------------------------------------
    def _wrap_init(self, init):
        """DDP's constructor checks the parameters' shapes across the ranks and broadcasts rank
        0's module state: collectives on its process group, made from C++, in which a rank
        waits for a peer that has not constructed it yet (one stuck loading a checkpoint). While
        it runs, the rank counts as blocked, inside the collectives the group's number says it
        entered (_Group.constructing, read by the side thread); when it returns, they count as
        entered and completed (Comm.constructed; on GPU parameters, NCCL: once the GPU passes a
        mark recorded after it), the same on every rank. A group whose backend has no sequence
        numbers (MPI...) is left to the constructor alone."""
        watch = self
        is_compiling = self.collectives._is_compiling
        # Readers of (ddp, *args) and kwargs; None for a parameter this torch lacks.
        module_of, pg_of, mesh_of = (locator(init, name)
                                     for name in ("module", "process_group", "device_mesh"))

        @_compiler.entry
        @functools.wraps(init)
        def wrapper(ddp, *args, **kwargs):
            if is_compiling() or not _core.enabled:
                return init(ddp, *args, **kwargs)
            try:
                given = (ddp,) + args
                module = module_of(given, kwargs) if module_of else kwargs.get("module")
                parameters = getattr(module, "parameters", None)
                first = next(iter(parameters()), None) if callable(parameters) else None
                device = _device.cuda_device(first)
                pg = pg_of(given, kwargs) if pg_of else kwargs.get("process_group")
                mesh = mesh_of(given, kwargs) if mesh_of else kwargs.get("device_mesh")
                if pg is None and mesh is not None:  # torch 2.2 on: its first dimension's
                    pg = mesh.get_group(0)
                if pg is None:
                    pg = watch.collectives._default_group()
                read = getattr(pg, "_get_sequence_number_for_group", None)
                # 0 before any collective on torch 2.x's gloo; a backend that does not count
                # stays at 0, and the constructor then adds nothing.
                before = int(read()) if read is not None else None
                group = (watch.comm.group(pg, watch.collectives._size)
                         if before is not None else None)
            except RuntimeError:
                group = None  # No sequence numbers (MPI, custom backends...).
            except Exception as exc:  # noqa: BLE001
                _core.fail("DistributedDataParallel constructor", exc)
                group = None
            if group is None:
                return init(ddp, *args, **kwargs)
            entered_before = group.entered
            group.constructing = (read, before)

            def record(_seconds, mark):
                watch.comm.constructed(group, int(read()) - before, entered_before, mark)

            try:
                # A closure: DDP's own keyword arguments never meet blocked_call's.
                return watch.collectives.blocked_call(
                    "DistributedDataParallel constructor", device, record,
                    lambda: init(ddp, *args, **kwargs))
            finally:
                group.constructing = None

        return wrapper

    # -- registration --------------------------------------------------------------------------
    def _wrap_forward(self, forward):
        watch = self
        is_compiling = self.collectives._is_compiling

        @functools.wraps(forward)
        def wrapper(ddp, *args, **kwargs):
            if is_compiling():
                # Traced (_compiler.py): DDP's forward as without the watch. Where TorchDynamo
                # breaks inside it (DDP's default), this frame then runs eagerly, below.
                return forward(ddp, *args, **kwargs)
            if watch.waits and _core.enabled:
                # The last backward's wait was not closed by torch.autograd.backward (a
                # backward through another entry point): it is over now, its time unknown.
                try:
                    watch.backward_returned(seconds_known=False)
                except Exception as exc:  # noqa: BLE001
                    _core.fail("DistributedDataParallel forward", exc)
            if _core.enabled and not ddp.__dict__.get("_ringmaster_seen", False):
                try:
                    ddp.__dict__["_ringmaster_seen"] = True
                    if watch.first_forward is None:
                        watch.first_forward = watch.collectives.clock()
                    watch._maybe_register(ddp)
                except Exception as exc:  # noqa: BLE001
                    _core.fail("DistributedDataParallel hook", exc)
            return forward(ddp, *args, **kwargs)

        return wrapper

    def _wrap_sync_buffers(self, sync_buffers):
        """DDP's broadcast of the module's buffers (BatchNorm's statistics, registered
        buffers), before each forward's compute when broadcast_buffers is on: a collective on
        the counted group that the side thread sees the rank inside (_Group.buffers_read), a
        "broadcast" row timed as blocked, no longer in the backward's all_reduce count."""
        watch = self
        comm = self.comm
        is_compiling = self.collectives._is_compiling

        @functools.wraps(sync_buffers)
        def wrapper(ddp, *args, **kwargs):
            if is_compiling() or not _core.enabled:
                return sync_buffers(ddp, *args, **kwargs)
            try:
                counted = watch._counted_for(ddp)
                if counted is None:
                    return sync_buffers(ddp, *args, **kwargs)  # The comm hook's: unseen.
                read, group, _, device = counted
                nbytes = ddp.__dict__.get("_ringmaster_buffer_bytes")
                if nbytes is None:
                    nbytes = sum(b.numel() * b.element_size()
                                 for b in getattr(ddp, "modules_buffers", None) or ())
                    ddp.__dict__["_ringmaster_buffer_bytes"] = nbytes
                start = watch.collectives.marks().start(device) if device is not None else None
                group.buffers_read = read
            except Exception as exc:  # noqa: BLE001
                _core.fail("DistributedDataParallel buffers", exc)
                return sync_buffers(ddp, *args, **kwargs)

            def record(seconds, mark):
                comm.buffers_synced(group, int(read()), nbytes, seconds, mark, start)

            try:
                return watch.collectives.blocked_call(
                    "DistributedDataParallel buffers", device, record, sync_buffers, ddp,
                    *args, **kwargs)
            finally:
                group.buffers_read = None

        return wrapper

    def _counted_for(self, ddp):
        """The `counted` entry of the DDP module's process group, or None."""
        pg = getattr(ddp, "process_group", None)
        if pg is None or not self.counted:
            return None
        group = self.comm.group(pg, self.collectives._size)
        for entry in self.counted:
            if entry[1] is group and not group.retired:
                return entry
        return None

    def _wrap_register(self, register, python):
        @_compiler.entry
        @functools.wraps(register)
        def wrapper(ddp, *args, **kwargs):
            ours = ddp.__dict__.get("_ringmaster_hook")
            if ours is None:
                # Before the first forward (the usual place): the user's hook wins, ours never
                # registers for this module (the sequence number still counts its buckets).
                ddp.__dict__["_ringmaster_user_hook"] = True
                return register(ddp, *args, **kwargs)
            if not python:
                return register(ddp, *args, **kwargs)  # torch says it can register only once.
            state = kwargs.pop("state", args[0] if args else None)
            hook = kwargs.pop("hook", args[1] if len(args) > 1 else None)
            ddp._check_comm_hook(hook)
            ours["user"] = (state, hook)  # Ours steps aside: the user's hook runs from now on.
            return None

        return wrapper

    def _allreduce_for(self, pg):
        """tensor -> Future of the sum all-reduce of [tensor] on `pg`, as DDP's reducer calls it.

        The process group's own allreduce (what DDP's C++ default hook calls) when it has one;
        else torch.distributed's all_reduce (the original, unwatched: a bucket counts once).
        """
        allreduce = getattr(pg, "allreduce", None) if pg is not None else None
        if allreduce is not None:
            return lambda tensor: allreduce([tensor]).get_future()
        all_reduce = self._all_reduce
        return lambda tensor: all_reduce(tensor, group=pg, async_op=True).get_future()

    def _maybe_register(self, ddp):
        pg = getattr(ddp, "process_group", None)
        if not self.prefer_hook and self._count_by_sequence(ddp, pg):
            return
        if ddp.__dict__.get("_ringmaster_user_hook") or getattr(ddp, "_comm_hooks", None):
            return  # A hook registered some other way (torch 2.x's python reducer list).
        join = getattr(ddp, "_join_config", None)
        if join is not None and getattr(join, "enable", False):
            return  # Uneven inputs: DDP divides by the ranks still joined.
        n = self.collectives._size(pg)
        if getattr(ddp, "gradient_as_bucket_view", False) and n & (n - 1):
            return  # DDP divides a bucket-view gradient by n: x/n != x*(1/n) for this n.
        self.check()
        group = self.comm.group(pg, self.collectives._size)
        state = {"pg": pg, "n": n, "scale": 1.0 / n, "group": group, "user": None,
                 "allreduce": self._allreduce_for(pg)}
        ddp.__dict__["_ringmaster_hook"] = state
        self._register(ddp, state, _allreduce_hook_for(self))

    # -- counting by the process group's sequence number ----------------------------------------
    def _count_by_sequence(self, ddp, pg):
        """Counts DDP's collectives on `pg` by its sequence number if it keeps one: True."""
        read = getattr(pg, "_get_sequence_number_for_group", None) if pg is not None else None
        variable = getattr(getattr(self.torch, "autograd", None), "Variable", None)
        engine = getattr(variable, "_execution_engine", None)
        if read is None or not callable(getattr(engine, "queue_callback", None)):
            return False
        try:
            seq = int(read())
        except RuntimeError:
            return False  # "does not yet support sequence numbers" (MPI, custom backends...).
        if seq == 0:
            return False  # The backend does not count (or was never told its start): the hook.
        # The first parameter DDP reduces (not frozen, not in its ignore list), usually the
        # first layer's: its gradient is computed in each backward through the module.
        ignored = getattr(ddp, "parameters_to_ignore", None) or ()
        params = [p for name, p in getattr(ddp, "module", ddp).named_parameters()
                  if p.requires_grad and name not in ignored]
        group = self.comm.group(pg, self.collectives._size)
        self.comm.count_from(group, seq, read)
        if not params:
            return True  # Nothing to reduce: only the step end's reads.
        self._engine = engine
        # A group destroyed (destroy_process_group) is followed no more; a new one afresh.
        self.counted = [c for c in self.counted if not c[1].retired]
        if all(c[1] is not group for c in self.counted):
            nbytes = sum(p.numel() * p.element_size() for p in params)
            device = _device.cuda_device(params[0])  # On NCCL: completed on the GPU.
            self.counted = self.counted + [(read, group, nbytes, device)]
        hooked = self._hooked.get(id(params[0]))
        if hooked is None or hooked() is not params[0]:  # A DDP again over the same model:
            self._hooked[id(params[0])] = weakref.ref(params[0])  # one hook is enough.
            handle = params[0].register_hook(self._gradient_hook)
            _core.on_disable(handle.remove)
        return True

    def _gradient_hook(self, grad):
        # In a backward pass, on the autograd thread: DDP's buckets are reduced by its end.
        if _core.enabled:
            try:
                self._engine.queue_callback(self._graph_computed)
            except Exception as exc:  # noqa: BLE001
                _core.fail("DDP backward", exc)
        return None

    def _graph_computed(self):
        # The engine's final callback, before DDP's own (which waits for its buckets).
        if not _core.enabled:
            return
        try:
            now = self.comm.clock()
            self._callbacks += 1
            for read, group, nbytes, device in self.counted:
                if group.retired:
                    continue  # Its process group is destroyed: nothing of DDP's to wait for.
                seq = int(read())
                if seq - group.offset > group.entered:  # Buckets launched (not in no_sync()).
                    group.ddp_waiting = seq  # Seen by the side thread (Comm.sequences).
                    # On the GPU: the caller's stream, which the engine runs this on, has every
                    # gradient now; DDP's callback next makes it wait for the buckets.
                    start = (self.collectives.marks().start(device)
                             if device is not None and not self.waits else None)
                    self.waits.append((group, seq, nbytes, device, start))
                    self._graph_done = now
        except Exception as exc:  # noqa: BLE001  Never raises into the engine.
            _core.fail("DDP backward", exc)

    def backward_returned(self, seconds_known=True):
        """backward() returned (or raised), or a step ended with a wait still open: the buckets
        waited for completed. Called on the training thread while `waits` is not empty."""
        waits, self.waits = self.waits, []
        seconds = max(0.0, self.comm.clock() - self._graph_done) if seconds_known else 0.0
        for i, (group, seq, nbytes, device, start) in enumerate(waits):
            # One wait for all the groups: its time counts once. On GPU parameters (NCCL) the
            # buckets are done when the current stream, which backward() made wait for them,
            # passes a mark recorded now; from `start` to it, the GPU waited for them.
            mark = self.collectives.marks().mark(device) if device is not None else None
            self.comm.ddp_done(group, seq, nbytes, seconds if i == 0 else 0.0, mark,
                               start if seconds_known else None)

    def sync(self):
        """At a step's end: counts what the counted groups did since last seen, unless an
        engine callback read the numbers during the step (the usual step: what follows it,
        the next forward's collectives, is in the next callback's read)."""
        if self.waits:
            self.backward_returned(seconds_known=False)
        if self._callbacks != self._synced:
            self._synced = self._callbacks
            return
        for read, group, _, device in self.counted:
            if not group.retired:
                seq = int(read())
                # Made out of sight (the forward's buffer broadcasts on a step without a
                # backward through DDP): on the GPU, done once the current stream passes now.
                mark = (self.collectives.marks().mark(device)
                        if device is not None and seq - group.offset > group.entered else None)
                self.comm.sync(group, seq, mark)


def _allreduce_hook_for(watch):
    comm = watch.comm
    launched = comm.bucket_launched
    finished = comm.bucket_finished
    clock = comm.clock

    def _ringmaster_allreduce_hook(state, bucket):
        user = state["user"]
        if user is not None:
            return user[1](user[0], bucket)
        buffer = bucket.buffer()
        if buffer.is_sparse:
            buffer.div_(state["n"])  # DDP's sparse path divides.
        else:
            buffer.mul_(state["scale"])
        if not _core.enabled:
            return state["allreduce"](buffer).then(_first_value)
        try:
            group = state["group"]
            nbytes = buffer.numel() * buffer.element_size()
            seq = launched(group, bucket.is_last())
        except Exception as exc:  # noqa: BLE001
            _core.fail("DDP comm hook", exc)
            return state["allreduce"](buffer).then(_first_value)

        def done(fut):
            # On the backend's thread: one append; Comm folds it in on its next read.
            try:
                finished((clock(), group, seq, nbytes))
            except Exception as exc:  # noqa: BLE001  Never in the way of the reduction.
                _core.fail("DDP comm hook", exc)
            return fut.value()[0]

        return state["allreduce"](buffer).then(done)

    return _ringmaster_allreduce_hook


def _first_value(fut):
    return fut.value()[0]
