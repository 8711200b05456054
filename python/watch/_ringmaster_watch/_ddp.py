"""Sees DistributedDataParallel's gradient buckets through a comm hook equal to DDP's default.

DDP reduces its buckets from C++, so wrapping torch.distributed misses them. Before a DDP
module's first forward, unless its user registered a comm hook of their own, the watch
registers `_allreduce_hook`: the bucket's gradients times 1/world (the very operation DDP's
reducer applies without a hook, `at::mul_out(bucket_view, grad, 1/div_factor)`), then an async
all_reduce (sum) of the bucket on DDP's group: the same arithmetic in the same order, so the
same results bit for bit. Not registered (DDP's own path stays) where that cannot be promised:
gradient_as_bucket_view=True on a group whose size is not a power of two (DDP then divides
rather than multiplies), DDP's join() for uneven inputs (it divides by the ranks still joined),
or a torch without GradBucket.buffer/is_last or Future.then (the watch then disables itself).

If the user registers a hook after ours (register_comm_hook after the first forward), ours
steps aside: the user's hook runs in its place, through ours.

Threading: the hook runs on the autograd thread, its callback on the backend's; the bucket
bookkeeping is Comm's (thread-safe). Errors: a failure of ours disables the watch; the hook
then still reduces exactly as above, without bookkeeping.
"""

import functools

from . import _core


class DdpWatch:
    """The DDP instrumentation of one process."""

    def __init__(self, torch, dist, comm, collectives):
        self.torch = torch
        self.dist = dist
        self.comm = comm
        self.collectives = collectives
        self.first_forward = None  # perf_counter of the first DDP forward (a step's start).
        self._all_reduce = getattr(dist, "all_reduce")  # The original, taken before patching.
        self._register = None

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

    # -- registration --------------------------------------------------------------------------
    def _wrap_forward(self, forward):
        watch = self

        @functools.wraps(forward)
        def wrapper(ddp, *args, **kwargs):
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

    def _wrap_register(self, register, python):
        @functools.wraps(register)
        def wrapper(ddp, *args, **kwargs):
            ours = ddp.__dict__.get("_ringmaster_hook")
            if ours is None:
                # Before the first forward (the usual place): the user's hook wins, ours never
                # registers for this module.
                ddp.__dict__["_ringmaster_seen"] = True
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
        if getattr(ddp, "_comm_hooks", None):
            return  # A hook registered some other way (torch 2.x's python reducer list).
        join = getattr(ddp, "_join_config", None)
        if join is not None and getattr(join, "enable", False):
            return  # Uneven inputs: DDP divides by the ranks still joined.
        pg = getattr(ddp, "process_group", None)
        n = self.collectives._size(pg)
        if getattr(ddp, "gradient_as_bucket_view", False) and n & (n - 1):
            return  # DDP divides a bucket-view gradient by n: x/n != x*(1/n) for this n.
        self.check()
        group = self.comm.group(pg, self.collectives._size)
        state = {"pg": pg, "n": n, "scale": 1.0 / n, "group": group, "user": None,
                 "allreduce": self._allreduce_for(pg)}
        ddp.__dict__["_ringmaster_hook"] = state
        self._register(ddp, state, _allreduce_hook_for(self))



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
