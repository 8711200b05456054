"""Checks, in watched processes on one GPU (NCCL, world size 1), that the Python watch counts a
collective on GPU tensors as completed only once the GPU has finished it (docs/python.md,
"Collectives on the GPU (NCCL)"), for bench/gpu_torch_job. About a second of GPU sleep
(torch.cuda._sleep) queued ahead of each collective keeps it unfinished while the host reads
the watch's numbers; after torch.cuda.synchronize() they must have caught up. It also checks
the GPU time the watch charges as time blocked: none for a sleep before a collective or in
DDP's backward, about the sleep for a wait on a collective queued behind one (on a side
stream). On the CPU (gloo, DEVICE cpu) it checks the other side: a host-synchronous collective
is completed when it returns, and charged its host time. Then (torch 2 on) a 2-D
init_device_mesh: on the GPU over a process group bound to it (init_process_group(device_id=
...)), whose groups torch 2.6 makes with split_group, on the CPU with new_group: the watch
must have named them when made, as new_group's are ("pg1", "pg2"; "world" where a newer torch
reuses the default group), and count a collective on one of them; on the GPU also a
split_group call of its own.

Run by gpu_torch_job with the watch active (python/watch first on PYTHONPATH and a rank's
RINGMASTER_* variables; the report socket need not exist: reports are dropped). Prints one
line starting "marks:", then exits 0, or 1 naming what differed.

The two parts run in separate processes (PART world, then mesh): torch 2.11 with NCCL 2.28
segfaults in split_group once a process has destroyed its default group and made another, with
or without the watch (seen on an H200, 2026-11-30), so the mesh cannot follow the world part's
destroy_process_group in one process.

    python3 bench/gpu_torch_marks.py cuda|cpu world|mesh
"""

import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import _ringmaster_watch as watch

SLEEP_CYCLES = 2_000_000_000  # About a second at the GPU's clock.


def mesh_groups(comm, gpu, problems):
    """The mesh check (the module's docstring; on the CPU its groups come from new_group);
    returns what it saw, for the marks line."""
    import inspect

    try:
        import torch.distributed.device_mesh as device_mesh
        from torch.distributed.device_mesh import init_device_mesh
    except ImportError:
        return "no init_device_mesh in torch %s" % torch.__version__
    kwargs = {}
    if gpu and "device_id" in inspect.signature(dist.init_process_group).parameters:
        kwargs["device_id"] = torch.device("cuda", 0)  # torch 2.3 on: the group bound to it
    dist.init_process_group("nccl" if gpu else "gloo", store=dist.HashStore(), rank=0,
                            world_size=1, **kwargs)
    default = dist.distributed_c10d._get_default_group()
    counter = [comm._created]  # Groups named so far (names are not reused after a destroy).

    def expect(pg):
        if pg is default:  # Newer torch reuses the default group for a world-sized dimension.
            return "world", "world"
        counter[0] += 1
        return "pg%d" % counter[0], getattr(comm._names.get(id(pg)), "name", None)

    splits = []  # device_mesh's split_group calls, counted around the watch's wrapper
    original = getattr(device_mesh, "split_group", None)
    if original is not None:
        def counting(*args, **kw):
            splits.append(1)
            return original(*args, **kw)
        device_mesh.split_group = counting
    try:
        mesh = init_device_mesh("cuda" if gpu else "cpu", (1, 1), mesh_dim_names=("dp", "tp"))
    finally:
        if original is not None:
            device_mesh.split_group = original
    made = {d: mesh.get_group(d) for d in ("dp", "tp")}
    want, names = {}, {}
    for d in ("dp", "tp"):
        want[d], names[d] = expect(made[d])
    if names != want:
        problems.append("init_device_mesh's groups were named %s when made, expected %s" %
                        (names, want))
    seen = "init_device_mesh's groups %s, made by %s" % (
        ", ".join("%s %s" % kv for kv in sorted(names.items())),
        "split_group" if splits else "new_group or the default group")
    # split_group itself, where the default group is bound to the GPU: the next name.
    if gpu and getattr(dist, "split_group", None) is not None and kwargs:
        own = dist.split_group(split_ranks=[[0]])
        wanted, got = expect(own)
        if got != wanted:
            problems.append("split_group's group was named %s, expected %s" % (got, wanted))
        seen += "; split_group's own %s" % got
    t = torch.ones(1024, device="cuda" if gpu else "cpu")
    tp = names["tp"] or "tp"
    before = int(comm.sequences()[0].get(tp, "0"))
    dist.all_reduce(t, group=made["tp"])
    if gpu:
        torch.cuda.synchronize()
    comm.poll_device()
    entered, completed, _, _ = comm.sequences()
    got = (int(entered.get(tp, "0")) - before, entered.get(tp) == completed.get(tp))
    if got != (1, True):
        problems.append("an all_reduce on the mesh's tp group (%s): (entered, all completed) "
                        "%s, expected (1, True)" % (tp, got))
    dist.destroy_process_group()
    return seen


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("cuda", "cpu") or sys.argv[2] not in (
            "world", "mesh"):
        print("marks: FAILED: usage: gpu_torch_marks.py cuda|cpu world|mesh")
        return 2
    device, part = sys.argv[1], sys.argv[2]
    gpu = device == "cuda"
    if not watch._core.enabled or "comm" not in watch._watch_state:
        print("marks: FAILED: the watch is not active in this process")
        return 1
    if part == "mesh":
        problems = []
        return report(gpu, problems, mesh_groups(watch._watch_state["comm"], gpu, problems))
    dist.init_process_group("nccl" if gpu else "gloo", store=dist.HashStore(), rank=0,
                            world_size=1)
    comm = watch._watch_state["comm"]

    def numbers():  # (Polled here as a step's end polls; the side thread polls too.)
        comm.poll_device()
        entered, completed, _, _ = comm.sequences()
        return int(entered["world"]), int(completed["world"])

    def hold():  # GPU work queued ahead on the current stream: the collective waits for it.
        if gpu:
            torch.cuda._sleep(SLEEP_CYCLES)

    def settle():
        if gpu:
            torch.cuda.synchronize()

    problems = []

    def expect(what, got, want):
        if got != want:
            problems.append("%s: (entered, completed) %s, expected %s" % (what, got, want))

    def charged(what, low, high):
        """The time blocked the watch charged since the last call (its steps' commSeconds, as
        the GPU finished), which must lie in [low, high)."""
        seconds = comm.take_step()[0]
        if not low <= seconds < high:
            problems.append("%s: %.3f s blocked, expected %g to %g" % (what, seconds, low, high))
        return seconds

    t = torch.ones(1024, device=device)
    dist.all_reduce(t)  # NCCL makes its communicator here, which may wait for the GPU.
    settle()
    numbers()
    comm.take_step()
    hold()
    dist.all_reduce(t)
    expect("all_reduce queued", numbers(), (2, 1) if gpu else (2, 2))
    settle()
    expect("all_reduce finished", numbers(), (2, 2))
    # The sleep was before the call: not the collective's wait.
    charged("an all_reduce after a GPU sleep", 0.0, 0.3)

    model = DistributedDataParallel(torch.nn.Linear(64, 64).to(device),
                                    device_ids=[0] if gpu else None)
    x = torch.randn(8, 64, device=device)
    for _ in range(2):  # The first forward starts the following; the second rebuilds the
        model(x).sum().backward()  # buckets (with copies to the host that wait).
    settle()
    before = numbers()
    comm.take_step()
    counted = any(c[1].name == "world" for c in watch._watch_state["ddp"].counted)
    loss = model(x).sum()
    hold()  # Between forward and backward: the buckets wait behind it on the GPU.
    loss.backward()
    queued = numbers()
    settle()
    done = numbers()
    if not counted:
        problems.append("DDP is followed by the comm hook (sequence number 0), which marks "
                        "nothing on the GPU")
    elif queued[0] <= before[0]:
        problems.append("DDP's buckets were not counted: %s then %s" % (before, queued))
    else:
        expect("DDP backward returned", queued, (queued[0], before[1] if gpu else queued[0]))
        expect("DDP backward finished", done, (queued[0], queued[0]))
    # The sleep was in the backward's compute, before the graph's end: not DDP's wait.
    charged("DDP's buckets after a GPU sleep in the backward", 0.0, 0.3)
    timed = ""
    if gpu:
        # An async all_reduce issued on a side stream behind a sleep there; the default stream
        # waits for it (work.wait()): that wait is about the sleep, on the GPU.
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            hold()
            work = dist.all_reduce(t, async_op=True)
        work.wait()
        settle()
        numbers()
        timed = "; a wait for a collective behind a GPU sleep charged %.3f s" % charged(
            "a wait for an all_reduce behind a GPU sleep", 0.3, 30.0)
    dist.destroy_process_group()
    return report(gpu, problems, "all_reduce and %d DDP collective(s) completed on the %s%s" % (
        done[0] - before[0], "GPU's finish, not when queued" if gpu else "host's return", timed))


def report(gpu, problems, seen):
    """Prints the marks line; the exit status."""
    if not watch._core.enabled:
        problems.append("the watch disabled itself (its stderr line says why)")
    backend = "nccl" if gpu else "gloo"
    if problems:
        print("marks: FAILED on %s (torch %s): %s" % (backend, torch.__version__,
                                                     "; ".join(problems)))
        return 1
    print("marks: %s (torch %s): %s" % (backend, torch.__version__, seen))
    return 0


if __name__ == "__main__":
    sys.exit(main())
