"""Collective bookkeeping: per-group sequence numbers, bytes, and time blocked.

Groups are named "world" (the default process group) and "pg1", "pg2", ... in the order
new_group() created them (every rank calls new_group in the same order, so the names agree
across ranks; a split_group() call names its splits so, in their order, or after the group it
split: Comm.split); a group first seen in a collective without having been created through
new_group gets the next name then. "rendezvous" is init_process_group's wait for every rank:
its #1 is entered when the program calls init_process_group and completed when that returns
(worker.proto; the coordinator names a rank that never reached it). Each collective on a
group enters the next sequence number; `completed` is the highest number whose collective and
all before it have finished: on the host, and for collectives on GPU tensors also on the GPU
(a CUDA event after them, _device.py).

Threading: one `Comm` per process, every method thread-safe under its lock (DDP's engine
callback and comm hook run on the autograd thread, future callbacks on the backend's threads,
the ticker on its own),
except `bucket_finished`, a lock-free append for the bucket callbacks: the per-bucket cost on
the backend's thread is one call and one append (bench/pytorch_watch_overhead.py).
Ownership: it holds the async works it watches until they complete (at most MAX_PENDING),
and the CUDA events of each group's collectives until the GPU passed them (at most MAX_DEVICE
per group; then the oldest counts as completed).
Errors: none raised by design; callers catch anything unexpected and disable the watch.
"""

import collections
import threading
import time

from . import _device

# One CollectiveStat in JSON (proto/ringmaster/v1/worker.proto; int64s as strings). Op and
# group names are this module's own ("all_reduce", "world", "pg3"): nothing to escape. The
# floats are finite (sums of perf_counter differences, bytes over positive seconds), so %r
# writes them as json.dumps does.
_STAT = ('{"op":"%s","group":"%s","count":"%d","bytes":"%d","seconds":%r,'
         '"algbwBytesPerSecond":%r,"busbwBytesPerSecond":%r}')

MAX_PENDING = 4096  # Async works watched at once; beyond, the oldest counts as completed.
MAX_DEVICE = 4096  # A group's collectives awaiting the GPU; beyond, the oldest counts as done.
MAX_GROUPS = 64  # The agent accepts at most 64 groups per report (agent/report_validation.h).

# busbw / algbw per op (nccl-tests; common/collective_ops.h).
def bus_factor(op, n):
    if n < 1:
        return 0.0
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("reduce_scatter", "all_gather", "gather", "scatter", "all_to_all"):
        return (n - 1) / n
    if op == "barrier":
        return 0.0
    return 1.0


class _Group:
    __slots__ = ("name", "size", "entered", "outstanding", "completed", "offset", "read",
                 "ddp_waiting", "buffers_read", "constructing", "retired", "device", "splits")

    def __init__(self, name, size):
        self.name = name
        self.size = size
        self.entered = 0
        self.outstanding = []  # Sequence numbers entered and not completed, ascending.
        self.completed = 0
        # The process group's own sequence number minus `entered`, once the group is counted
        # by it (count_from); None before.
        self.offset = None
        self.read = None  # The process group's sequence number reader, once counted by it.
        # The process group's number when DDP began waiting for its buckets (set without the
        # lock by _ddp.py's engine callback, an int store; ddp_done clears it); 0: no wait.
        self.ddp_waiting = 0
        # The process group's number reader while DDP broadcasts the module's buffers at a
        # forward (_ddp.py, set and cleared without the lock); None otherwise.
        self.buffers_read = None
        # (the process group's number reader, its number before) while a DDP constructor runs
        # on the group (_ddp.py, set and cleared without the lock); None otherwise.
        self.constructing = None
        self.retired = False  # Its process group was destroyed (Comm.destroyed).
        self.splits = 0  # Groups split_group() made from it (Comm.split).
        # Numbers done on the host and not yet on the GPU, (first, last, mark, timing) in the
        # order of their numbers (_device.Marks: a CUDA event recorded after them); timing:
        # None, or (op, host seconds, the mark before them, bytes, count) to time them on the
        # GPU: their row (Comm._row) waits for that time.
        self.device = collections.deque()

    def complete(self, seq):
        try:
            self.outstanding.remove(seq)
        except ValueError:
            return
        self.settle()

    def settle(self):
        """completed: below the first outstanding work and the first number the GPU has not
        passed."""
        done = self.outstanding[0] - 1 if self.outstanding else self.entered
        if self.device and self.device[0][0] <= done:
            done = self.device[0][0] - 1
        self.completed = done

    def entered_now(self):
        """entered, with the DDP buckets now waited for, the buffer broadcasts DDP is in at a
        forward, or the collectives a DDP constructor is in (read now, from the process group),
        not yet in `entered`."""
        waiting = self.ddp_waiting
        if waiting and self.offset is not None and waiting - self.offset > self.entered:
            return waiting - self.offset
        read = self.buffers_read
        if read is not None and self.offset is not None and not self.retired:
            now = int(read()) - self.offset
            if now > self.entered:
                return now
        constructing = self.constructing
        if constructing is not None and not self.retired:
            read, before = constructing
            made = int(read()) - before
            if made > 0:
                return self.entered + made
        return self.entered


class Comm:
    """The process's collective counters and the current step's accumulators."""

    def __init__(self, clock=time.perf_counter):
        self._clock = clock
        self.clock = clock  # For the bucket callbacks' timestamps (bucket_finished).
        self._lock = threading.Lock()
        self._names = {}  # id(process group) -> _Group
        self._refs = []  # The process groups named, kept so their ids stay theirs.
        self._groups = {}  # name -> _Group
        # After destroy_process_group of the default group, until the next init_process_group:
        # the destroyed groups' last numbers, name -> number (destroyed).
        self._last = {}
        self._created = 0
        self._world = None
        self._pending = {}  # id(work) -> (work, group, seq, op, nbytes, CUDA device or None)
        # The _device.Marks of the collectives on GPU tensors (made at the first, by the caller:
        # this module never imports torch); _on_device counts their groups' entries.
        self.marks = None
        self._on_device = 0
        self._inside = 0  # Threads now blocked in a collective or a wait.
        self.version = 0  # Bumped on every change of a sequence number.
        # init_process_group's timeout, in seconds (Collectives._wrap_init; 0: unknown), sent
        # with the sequence numbers: the agent allows a wait that long before a first step.
        self.timeout_seconds = 0.0
        # The current step's accumulators.
        self._blocked = 0.0
        self._late = 0.0  # GPU time blocked beyond the host's, found by poll_device.
        self._stats = {}  # (op, group name) -> [count, bytes, seconds]
        # DDP's buckets of the current backward pass.
        self._ddp_outstanding = 0
        self._ddp_last_launch = None
        self._ddp_last_done = None
        # Buckets whose all-reduce finished, (perf_counter, _Group, seq, bytes), appended by
        # the comm hook's future callback on the backend's thread without taking the lock
        # (deque.append is atomic); folded into the counters by the next reader (_drain).
        self._finished = collections.deque()
        self.bucket_finished = self._finished.append
        # DDP waits that ended, (_Group, its number then, bytes, seconds) (ddp_done): folded
        # in by the next reader, like the buckets above.
        self._ddp_returned = collections.deque()

    # -- groups --------------------------------------------------------------------------------
    def set_world(self, pg, size):
        with self._lock:
            self._world = pg
            if "world" not in self._groups:
                self._groups["world"] = _Group("world", size)
            self._groups["world"].size = size
            if pg is not None:
                self._names[id(pg)] = self._groups["world"]
                self._refs.append(pg)

    def destroyed(self, pg):
        """destroy_process_group(pg) returned; pg None or the default group: every group. Their
        counts end with them; a group made again (a second init_process_group) is counted afresh
        from 0, as on every rank that made it again. A subgroup's numbers are reported no more;
        the default group's, and every group's with it, are still reported as they ended, every
        collective completed, until the next init_process_group: the rank is outside any
        collective, busy to its agent (agent/local_watchdog.h: its work after, an upload, is no
        hang), and one that left its loop early while its peers wait in the next collective is
        behind it, named by them."""
        with self._lock:
            if pg is None or pg is self._world:
                gone = list(self._groups.values())
                self._last = {g.name: g.entered_now() for g in gone}
                self._world = None
            else:
                g = self._names.get(id(pg))
                gone = [g] if g is not None else []
            for g in gone:
                g.retired = True
                self._groups.pop(g.name, None)
                self._on_device -= len(g.device)
                g.device.clear()
            # Let the destroyed groups go (an NCCL group's communicators are freed with its last
            # reference), and their async works with them: never credited to a group made again.
            self._refs = [p for p in self._refs if not self._retired(p)]
            self._names = {k: g for k, g in self._names.items() if not g.retired}
            self._pending = {k: e for k, e in self._pending.items() if not e[1].retired}
            self.version += 1

    def rendezvous(self):
        """init_process_group was called: the "rendezvous" group's #1 is entered (afresh after
        destroyed(): every rank that makes its groups again calls it again) and the caller
        counts as blocked in it until rendezvous_done(the returned group)."""
        with self._lock:
            self._last = {}  # The destroyed groups' numbers: over (a new world counts afresh).
            group = _Group("rendezvous", 0)  # A size for busbw only: it moves no bytes.
            group.entered = 1
            group.outstanding.append(1)
            self._groups["rendezvous"] = group
            self._inside += 1
            self.version += 1
            return group

    def rendezvous_done(self, group):
        """init_process_group returned or raised: its rendezvous is over (completed, as a
        collective that raised is)."""
        with self._lock:
            group.complete(1)
            self._inside -= 1
            self.version += 1

    def _retired(self, pg):
        g = self._names.get(id(pg))
        return g is not None and g.retired

    def created(self, pg, size):
        """A new_group() call returned `pg` (None or a sentinel on ranks outside it)."""
        self.split(None, pg, size, 1, 0, None)

    def split(self, parent, pg, size, count, index, size_of):
        """A call that made `count` groups from `parent` (None: the default group) returned
        `pg`, the group at position `index` among them (None, or a sentinel, on a rank in none
        of them): split_group() (NCCL), which every rank of `parent` calls with the same splits
        and which returns only the caller's. From the default group, which every rank splits,
        they take the names a new_group() per split, in order, would have given them
        (init_device_mesh makes its groups either way); from another group, which only its own
        ranks split, the parent's name, a dot and the split's number among the parent's
        ("pg1.1", "pg1.2"), the same on each of them. `size_of` as group()'s."""
        with self._lock:
            if parent is None or parent is self._world:
                first = self._created + 1
                self._created += count
                prefix = "pg"
            else:
                owner = self._group_locked(parent, size_of)
                first = owner.splits + 1
                owner.splits += count
                prefix = owner.name + "."
            if pg is None or not hasattr(pg, "size") or not 0 <= index < count:
                return  # This rank is not in the group: it never uses the name.
            self._register_locked(pg, _Group("%s%d" % (prefix, first + index), size))

    def group(self, pg, size_of):
        """The _Group of a collective's `group` argument (None: the default group)."""
        with self._lock:
            return self._group_locked(pg, size_of)

    def _group_locked(self, pg, size_of):
        if pg is None or pg is self._world:
            g = self._groups.get("world")
            if g is None:
                g = self._groups["world"] = _Group("world", size_of(None))
            return g
        g = self._names.get(id(pg))
        if g is not None:
            return g
        self._created += 1
        return self._register_locked(pg, _Group("pg%d" % self._created, size_of(pg)))

    def _register_locked(self, pg, group):
        self._groups[group.name] = group
        self._names[id(pg)] = group
        self._refs.append(pg)
        return group

    # -- one collective ------------------------------------------------------------------------
    def enter(self, group):
        with self._lock:
            if self._ddp_returned:
                self._drain()  # Numbered before this one.
            group.entered += 1
            group.outstanding.append(group.entered)
            self.version += 1
            return group.entered

    def begin_blocking(self):
        with self._lock:
            self._inside += 1

    def end_blocking(self):
        with self._lock:
            self._inside -= 1

    def complete(self, group, seq, op, nbytes, seconds, mark=None, start=None):
        """A collective returned after blocking its caller `seconds`; with `mark` (a
        _device.Marks mark recorded after it) it completes when the GPU passes the mark, and
        with `start` (one recorded before it) its GPU time replaces `seconds` if longer."""
        with self._lock:
            self._ended(group, seq, seq, op, nbytes, seconds, mark, start, 1)
            group.complete(seq)
            self.version += 1

    def _ended(self, group, first, last, op, nbytes, seconds, mark, start, count):
        """Counts collectives first..last of `group` that returned after blocking `seconds`
        (caller holds the lock, settles the group): their row now, or, timed on the GPU (mark
        and start), once the GPU has passed them (_passed), with the longer of the two times."""
        if mark is not None and start is not None and not group.retired:
            self._blocked += seconds
            self._to_device(group, first, last, mark, (op, seconds, start, nbytes, count))
            return
        if mark is not None:
            self._to_device(group, first, last, mark)
        self._add(op, group.name, nbytes, seconds, count)

    def _to_device(self, group, first, last, mark, timing=None):
        """Numbers first..last await `mark` on the GPU (caller holds the lock; the caller
        settles the group; a destroyed group's numbers are reported no more). `timing`: see
        _Group.device."""
        if group.retired:
            return
        if len(group.device) >= MAX_DEVICE:
            # Counted as passed, at the host's time; its events are left to the collector.
            dropped = group.device.popleft()
            self._on_device -= 1
            if dropped[3] is not None:
                op, seconds, _, nbytes, count = dropped[3]
                self._row(op, group.name, nbytes, seconds, count)
        entry = (first, last, mark, timing)
        device = group.device
        if not device or device[-1][0] < first:
            device.append(entry)
        else:  # An async work waited for after a later call: in its number's place.
            i = len(device)
            while i > 0 and device[i - 1][0] > first:
                i -= 1
            device.insert(i, entry)
        self._on_device += 1

    def poll_device(self, side=False):
        """Counts as completed the numbers whose marks the GPU has passed, in each group's
        order (a mark not yet passed holds back the later numbers), and adds the GPU time of
        the timed ones beyond the host's to the step's time blocked. `side`: the side thread,
        which takes the marks' device as its own; any other thread (the training thread at a
        step's end) switches to it for the poll (_device.Marks.on_device). The queries run
        outside the lock, under _device.gate, and not at all while a CUDA graph is captured.
        Lock order: _device.gate, then the lock."""
        if self.marks is None:
            return  # No collective on GPU tensors yet (the CPU's steps: no lock taken here).
        if self._ddp_returned:
            with self._lock:
                self._drain()  # DDP's buckets of the last backward, with their marks.
        if not self._on_device:
            return  # No collective on GPU tensors awaiting its GPU (a racy read delays a poll).
        marks = self.marks
        # All under the gate, the pops too: two pollers (the side thread and a step's end) never
        # overlap, so no event is taken back, and recorded again for a new collective, while
        # the other still asks it (an elapsed time then raises).
        with _device.gate as open_:
            if not open_:
                return  # A CUDA graph capture: a query now would invalidate it.
            if side:
                marks.bind_thread()
                passed = self._query(marks)
            else:
                with marks.on_device() as ok:
                    if not ok:
                        return  # This torch cannot switch devices: the side thread's poll.
                    passed = self._query(marks)
            if passed:
                self._passed(marks, passed)

    def _query(self, marks):
        """[(group, [(entry, GPU seconds)])]: each group's leading entries whose marks the GPU
        has passed (caller holds _device.gate, the thread on the marks' device)."""
        with self._lock:
            heads = [(g, list(g.device)) for g in self._groups.values() if g.device]
        passed = []
        for group, entries in heads:
            done = []
            for entry in entries:
                if not marks.done(entry[2]):
                    break
                timing = entry[3]
                gpu = 0.0
                # Its start is earlier on the same stream (DDP's: the engine runs its final
                # callbacks on the caller's stream), so passed too; asked all the same, as
                # an elapsed time of an unpassed event raises.
                if timing is not None and marks.done(timing[2]):
                    gpu = marks.seconds(timing[2], entry[2])
                done.append((entry, gpu))
            if done:
                passed.append((group, done))
        return passed

    def _passed(self, marks, passed):
        """Counts as completed the entries poll_device found passed, [(group, [(entry, GPU
        seconds)])], each group's from its first on (an entry dropped meanwhile, by MAX_DEVICE
        or a destroyed group, ends its group's). A timed entry's row goes to the step now
        ending with the longer of its host and GPU times (on NCCL the host's is only the
        queueing), and the GPU's excess to the time blocked found late (take_raw)."""
        with self._lock:
            for group, done in passed:
                for entry, gpu in done:
                    if not group.device or group.device[0] is not entry:
                        break
                    group.device.popleft()
                    self._on_device -= 1
                    marks.release(entry[2])
                    if entry[3] is not None:
                        op, seconds, start, nbytes, count = entry[3]
                        marks.release(start)
                        self._late += max(0.0, gpu - seconds)
                        self._row(op, group.name, nbytes, max(seconds, gpu), count)
                group.settle()
            self.version += 1

    def _add(self, op, name, nbytes, seconds, count=1):
        self._blocked += seconds
        self._row(op, name, nbytes, seconds, count)

    def _row(self, op, name, nbytes, seconds, count):
        stat = self._stats.get((op, name))
        if stat is None:
            stat = self._stats[(op, name)] = [0, 0, 0.0]
        stat[0] += count
        stat[1] += nbytes
        stat[2] += seconds

    # -- async works ---------------------------------------------------------------------------
    def watch_work(self, work, group, seq, op, nbytes, device=None):
        """An async_op work to follow; `device`: its tensors' CUDA device, or None."""
        with self._lock:
            if len(self._pending) >= MAX_PENDING:
                oldest = next(iter(self._pending))
                _, g, s, o, b, _ = self._pending.pop(oldest)
                g.complete(s)
                self._add(o, g.name, b, 0.0)
            self._pending[id(work)] = (work, group, seq, op, nbytes, device)

    def waited(self, work, seconds, mark=None, start=None):
        """work.wait() returned after `seconds` (with `mark` and `start`: as in `complete`);
        no-op for a work this does not watch."""
        with self._lock:
            entry = self._pending.pop(id(work), None)
            if entry is None or entry[0] is not work:
                if entry is not None:
                    self._pending[id(work)] = entry
                return
            _, group, seq, op, nbytes, _ = entry
            self._ended(group, seq, seq, op, nbytes, seconds, mark, start, 1)
            group.complete(seq)
            self.version += 1

    def watched(self, work):
        """None if `work` is not watched, else (the CUDA device of its tensors or None,)."""
        with self._lock:
            entry = self._pending.get(id(work))
            return (entry[5],) if entry is not None and entry[0] is work else None

    def poll(self):
        """Counts as completed the watched works that say so (is_completed() never blocks;
        NCCL's asks the GPU) and the GPU marks (poll_device). The training thread's, at each
        step's end; not while a CUDA graph is being captured (NCCL's query would invalidate it,
        _device.py)."""
        self.poll_device()
        if not self._pending:
            return  # The usual step: no async work watched (a racy read only delays a poll).
        with self._lock:
            works = list(self._pending.items())
        done = []
        with _device.gate as open_:
            if not open_:
                return
            for key, entry in works:
                try:
                    finished = entry[0].is_completed()
                except Exception:  # noqa: BLE001  A work that cannot say: it counts as done.
                    finished = True
                if finished:
                    done.append(key)
        if not done:
            return
        with self._lock:
            for key in done:
                entry = self._pending.pop(key, None)
                if entry is None:
                    continue
                _, group, seq, op, nbytes, _ = entry
                group.complete(seq)
                self._add(op, group.name, nbytes, 0.0)
            self.version += 1

    # -- DDP's buckets, counted by the process group's own sequence number -----------------------
    def count_from(self, group, pg_seq, read):
        """From now on `group`'s collectives made outside the watch's sight (DDP's, from C++)
        are counted by its process group's sequence number, `pg_seq` now, read by `read()`
        (sync, ddp_done, _Group.ddp_waiting; the collective wrappers call `adjust`).

        The number is the process group's (torch's, the same on every rank); the offset keeps
        the watch's numbering, which counted only what it saw before.
        """
        with self._lock:
            if group.offset is None:
                group.offset = pg_seq - group.entered
                group.read = read

    def adjust(self, group, advanced):
        """A wrapped call the watch counted as one collective advanced the process group's number
        by `advanced`: 0 for a send/recv (which gloo and NCCL do not number) or a call that
        failed before reaching the backend, 2 for one made of two (all_gather_object...). The
        offset follows, so the next read does not take it for one of DDP's."""
        if advanced != 1:
            with self._lock:
                if self._ddp_returned:
                    self._drain()  # Under the offset they were read with.
                if group.offset is not None:
                    group.offset += advanced - 1

    def sync(self, group, pg_seq, mark=None):
        """Counts as entered and completed the collectives the process group made since the
        watch last knew (`pg_seq` read at a point where those had returned; with `mark`, they
        complete when the GPU passes it)."""
        with self._lock:
            if self._ddp_returned:
                self._drain()
            if group.offset is None or pg_seq - group.offset <= group.entered:
                return
            first = group.entered + 1
            group.entered = pg_seq - group.offset
            if mark is not None:
                self._to_device(group, first, group.entered, mark)
            group.settle()
            self.version += 1

    def constructed(self, group, advanced, entered_before, mark=None):
        """A DDP constructor on the group returned, its process group's number `advanced` since
        it began, the group's count then `entered_before`: the collectives it made itself (its
        check of the parameters' shapes, its broadcast of the module's state; not the wrapped
        calls counted meanwhile) count as entered, and as completed (with `mark`: once the GPU
        passes it), as on every rank that constructed it. Ends _Group.constructing under the
        lock, so the side thread never reads the count go back."""
        with self._lock:
            group.constructing = None
            made = advanced - (group.entered - entered_before)
            if made <= 0:
                return
            if self._ddp_returned:
                self._drain()
            first = group.entered + 1
            group.entered += made
            if mark is not None:
                self._to_device(group, first, group.entered, mark)
            group.settle()
            self.version += 1

    def buffers_synced(self, group, pg_seq, nbytes, seconds, mark=None, start=None):
        """DDP's broadcast of the module's buffers at a forward returned: the collectives the
        process group entered since the watch last knew, up to `pg_seq`, completed after
        blocking `seconds`, `nbytes` (the buffers) in all; a "broadcast" row. `mark` and
        `start` as for `complete`."""
        with self._lock:
            if self._ddp_returned:
                self._drain()
            self._read_ended(group, pg_seq, "broadcast", nbytes, seconds, mark, start)

    def _read_ended(self, group, pg_seq, op, nbytes, seconds, mark, start):
        """Counts the collectives `group`'s process group entered up to `pg_seq` beyond those
        the watch knew as one row of `op` (caller holds the lock)."""
        if group.offset is None:
            return
        n = pg_seq - group.offset - group.entered
        if n <= 0:
            return
        group.entered += n
        self._ended(group, group.entered - n + 1, group.entered, op, nbytes, seconds, mark,
                    start, n)
        group.settle()
        self.version += 1

    def ddp_done(self, group, pg_seq, nbytes, seconds, mark=None, start=None):
        """backward() returned: the collectives the process group entered up to `pg_seq` (read
        when the graph was computed: DDP's buckets) completed, after blocking `seconds` (graph
        done -> backward returned), `nbytes` (the gradients) in all; with `mark` (recorded
        after backward returned), when the GPU passes it, and with `start` (recorded when the
        graph was computed) the GPU's wait for them replaces `seconds` if longer. Clears
        ddp_waiting.

        Lock-free (the training thread's path, once a backward): an append, folded into the
        counters by the next reader (_drain), before it clears the wait."""
        self._ddp_returned.append((group, pg_seq, nbytes, seconds, mark, start))
        group.ddp_waiting = 0

    # -- DDP buckets, seen by the comm hook ------------------------------------------------------
    def bucket_launched(self, group, is_last):
        """DDP's comm hook launches a bucket's all-reduce on `group`: its sequence number.

        Its completion comes back through bucket_finished((perf_counter(), group, seq, bytes)).
        """
        with self._lock:
            group.entered += 1
            group.outstanding.append(group.entered)
            self.version += 1
            self._ddp_outstanding += 1
            if is_last:
                self._ddp_last_launch = self._clock()
            self._inside += 1
            return group.entered

    def _drain(self):
        """Folds the finished buckets and the ended DDP waits into the counters (caller holds
        the lock).

        The last bucket of a backward pass closes its wait: the tail from the last launch to
        the last completion, credited to the bucket that closed it.
        """
        finished = self._finished
        while finished:
            now, group, seq, nbytes = finished.popleft()
            self._inside -= 1
            group.complete(seq)
            self.version += 1
            self._ddp_outstanding -= 1
            if self._ddp_last_done is None or now > self._ddp_last_done:
                self._ddp_last_done = now
            blocked = 0.0
            if self._ddp_outstanding == 0 and self._ddp_last_launch is not None:
                blocked = max(0.0, self._ddp_last_done - self._ddp_last_launch)
                self._ddp_last_launch = None
                self._ddp_last_done = None
            self._add("all_reduce", group.name, nbytes, blocked)
        returned = self._ddp_returned
        while returned:
            group, pg_seq, nbytes, seconds, mark, start = returned.popleft()
            self._read_ended(group, pg_seq, "all_reduce", nbytes, seconds, mark, start)

    # -- reports -------------------------------------------------------------------------------
    def awaiting_device(self):
        """Whether a collective on GPU tensors awaits its GPU (a racy read: a hint)."""
        return self.marks is not None and self._on_device > 0

    def sequences(self):
        """({group: entered}, {group: completed}, inside a collective now, version)."""
        with self._lock:
            self._drain()
            groups = list(self._groups.values())[:MAX_GROUPS]
            inside = self._inside > 0 or any(g.ddp_waiting for g in groups)
            entered = {g.name: str(g.entered_now()) for g in groups}
            completed = {g.name: str(g.completed) for g in groups}
            for name, number in self._last.items():  # After destroy_process_group (destroyed).
                if name not in entered and len(entered) < MAX_GROUPS:
                    entered[name] = completed[name] = str(number)
            return entered, completed, inside, self.version

    def take_raw(self):
        """(seconds blocked, {(op, group name): [count, bytes, seconds]}, [(group name, size,
        entered, completed)], GPU seconds blocked found late) of the step since the last call
        (the accumulators reset): the step report's snapshot, taken on the training thread at
        each step's end with one lock and no formatting; members_json writes it out later (on
        the reporter's thread). The last: GPU waits beyond their host time, found when the GPU
        finished (poll_device), mostly of earlier steps (_steps.py carries them)."""
        with self._lock:
            if self._finished or self._ddp_returned:
                self._drain()
            blocked, stats, late = self._blocked, self._stats, self._late
            self._blocked, self._stats, self._late = 0.0, {}, 0.0
            groups = [(g.name, g.size, g.entered_now(), g.completed)
                      for g in self._groups.values()]
        return blocked, stats, groups, late

    def take_step(self):
        """(seconds blocked, found late included, CollectiveStat JSON list) since the last
        call; resets them."""
        with self._lock:
            self._drain()
            blocked, stats = self._blocked + self._late, self._stats
            self._blocked, self._stats, self._late = 0.0, {}, 0.0
            sizes = {g.name: g.size for g in self._groups.values()}
        out = []
        for (op, name), (count, nbytes, seconds) in sorted(stats.items()):
            if len(out) >= 6 * MAX_GROUPS:
                break
            algbw = nbytes / seconds if seconds > 0 else 0.0
            out.append({"op": op, "group": name, "count": str(count), "bytes": str(nbytes),
                        "seconds": seconds, "algbwBytesPerSecond": algbw,
                        "busbwBytesPerSecond": algbw * bus_factor(op, sizes.get(name, 1))})
        return blocked, out


def members_json(stats, groups):
    """take_raw's stats and groups as the step report's JSON members: take_step's
    "collectives" and sequences' "collectiveEntered" and "collectiveCompleted", each left out
    when empty (_steps.encode_step)."""
    members = []
    groups = groups[:MAX_GROUPS]
    if stats:
        sizes = {g[0]: g[1] for g in groups}
        out = []
        for (op, name), (count, nbytes, seconds) in sorted(stats.items())[:6 * MAX_GROUPS]:
            algbw = nbytes / seconds if seconds > 0 else 0.0
            out.append(_STAT % (op, name, count, nbytes, seconds, algbw,
                                algbw * bus_factor(op, sizes.get(name, 1))))
        members.append('"collectives":[%s]' % ",".join(out))
    if groups:
        members.append('"collectiveEntered":{%s},"collectiveCompleted":{%s}' % (
            ",".join('"%s":"%d"' % (g[0], g[2]) for g in groups),
            ",".join('"%s":"%d"' % (g[0], g[3]) for g in groups)))
    return ",".join(members)
