"""A daemon thread that sends the deferred step reports and the collective sequence numbers.

About every FLUSH_SECONDS it flushes the reporter's deferred step reports (the training thread
only queues a snapshot per step: the writing and the sendto happen here, off the step); when
it stops (at exit, or when the watch disables itself) it flushes once more.

It sends ReportCollectives every interval from the call of init_process_group on (its rendezvous
first, _comm.py; the first report at once, from the calling thread; the default group counts
from 0), changed or not (as the builtin trainer's side thread does), with whether the rank is
blocked in a collective now and init_process_group's timeout: a rank stuck in (or before) a
collective still tells the agent how far it got, and a rank stuck outside any collective (a data
loader that never returns) is heard while it does not step, so the coordinator names it from the
sequence numbers ("rank 1 has not entered all_reduce #N of world that rank 0 waits in") rather
than as a silent process. A report in itself is not a sign of progress to the watchdog
(agent/local_watchdog.h): before the rank's first step, one that says it is blocked in a
collective whose numbers do not move is a sign of a stall (a peer stuck before the first step);
after it, numbers that moved are progress, and one that says the rank is not blocked makes it
busy outside its steps (an evaluation), not hung (blockedKnown says that `blocked` is meant).
Each report also says how much CPU the training thread (the one that called init_process_group)
has used (threadCpuSeconds, from /proc/self/task/TID/stat; 0 where that cannot be read): a rank
outside any collective whose thread runs works (rank 0 evaluating alone while its peers wait for
it, agent/working_rank.h), one whose thread does not is stuck. It
is a daemon thread: it never keeps the process alive. At exit its own atexit handler (the one
registered at init_process_group, so run before those registered earlier: torch's, and a
program's registered before init_process_group, such as an upload) polls the GPU until it is
through (2 s at most; on the training thread, as a step's end does: a torch that cannot switch
devices, before 2.1, skips it) and ends its calls into torch, whose own handlers may then tear
it down; it goes on sending the numbers as they stand, so a rank whose exit work is longer than the step allowance is heard
(busy outside any collective, agent/local_watchdog.h), not silent; the watch's last handler
(__init__._at_exit) stops it before the interpreter finalises. It never calls into torch but for
CUDA event queries (and, once, setting
its CUDA device before the first, _device.Marks.bind_thread) and, while the training thread is
inside DDP's buffer broadcast or constructor, the process group's sequence number (a getter; at exit
the training thread is in neither, and exiting() waits for the tick in progress): a daemon thread
inside a C++ call that releases the GIL would be torn down by pthread_exit at finalisation,
through noexcept frames, and abort the process ("terminate called without an active exception").
Async works are polled on the training thread instead (at each step); a CUDA event's query holds
the GIL throughout (_device.py), so before each report it asks the GPU which collectives it has
finished (Comm.poll_device): a rank whose training thread is stuck outside torch still says that
its GPU is through them, and is named as the one behind. The deferred reports hold plain numbers
and strings only.
While the rank stalls (no step or phase report, numbers that have not moved, for STACK_SECONDS,
or STACK_STEPS of its usual step times where longer),
each report also carries where the training thread is: its Python stack (_stack.py), read from
this thread, so a rank stuck outside any collective (a data loader's queue, a lock, a network
call) or inside one says at which line of the program; the coordinator shows it
(`ringctl describe`) and adds it to a hang that blames the rank. The thread starts before
init_process_group, as torch.distributed is instrumented (begin), with the thread importing torch
for the training thread: before the rank has a group it sends only such stacks, in reports with
no numbers that say nothing of a wait (not blockedKnown), so a rank stuck before
init_process_group (a download, a dead mount), which its peers wait for in the rendezvous, says
where too. Its atexit handler is still registered at the first init_process_group (before it
the thread never calls into torch).

Threading: its own thread; reads Comm (thread-safe) and flushes the reporter (thread-safe).
Errors: a failure disables the watch and ends the thread.
"""

import atexit
import collections
import os
import threading
import time

from . import _core
from . import _stack

INTERVAL_SECONDS = 1.0  # Between two collectives reports.
FLUSH_SECONDS = 0.5  # Between two flushes of the deferred step reports.
EXIT_POLL_SECONDS = 2.0  # At exit, the longest wait for the GPU's last collectives.
EXIT_POLL_PAUSE = 0.005  # Between two of those polls.
# A rank that has not moved for this long sends its training thread's stack: well under the
# agent's shortest step allowance (9 s: the stall is seen up to a report late, and the stack
# reaches the coordinator a report and a summary later), so that a hang finds it there ...
STACK_SECONDS = 3.0
# ... or, where steps are longer, for this many of its usual step times (the median of the
# last STEP_GAPS gaps between its step or phase reports, the first one's from the first
# init_process_group left out: one long evaluation or save, or the setup before the first step,
# does not raise it): a healthy 10 s step whose forward runs 6 s without a collective is no
# stall; the agent's allowance is 5 x the p99 step there.
STACK_STEPS = 2.0
STEP_GAPS = 8
_monotonic = time.monotonic  # (tests replace it)


def _clock_ticks():
    try:
        return float(os.sysconf("SC_CLK_TCK"))
    except (AttributeError, ValueError, OSError):
        return 0.0


_TICKS = _clock_ticks()


def thread_cpu_seconds(native_id):
    """CPU seconds (user + system) thread `native_id` of this process has used so far, from
    /proc/self/task/ID/stat (to the kernel's clock tick); 0.0 where that cannot be read (not
    Linux, the thread gone, no id). Never raises."""
    if not native_id or _TICKS <= 0:
        return 0.0
    try:
        with open("/proc/self/task/%d/stat" % native_id, "rb") as stat:
            text = stat.read()
        # After "pid (comm) ": state is field 3, utime 14 and stime 15 (proc(5)); comm may hold
        # spaces and parentheses, so count from the last ")".
        fields = text[text.rindex(b")") + 2:].split()
        return (int(fields[11]) + int(fields[12])) / _TICKS
    except (OSError, ValueError, IndexError):
        return 0.0


class Ticker:
    def __init__(self, reporter, comm, interval=INTERVAL_SECONDS, flush=FLUSH_SECONDS):
        self._reporter = reporter
        self._comm = comm
        self._interval = interval
        self._flush = min(flush, interval)
        self._stop = threading.Event()
        self._thread = None
        self._sent_version = -1
        self._training_thread = None  # native id of init_process_group's caller (begin's)
        self._training_ident = None  # its threading.get_ident(), for its stack
        self._exit_registered = False
        self._moves = None  # (numbers' version, reporter.moves) at the latest move seen ...
        self._still_since = 0.0  # ... and since when they have held (time.monotonic())
        self._stack = ""  # the stalled training thread's stack, as last read ...
        self._stack_at = 0.0  # ... at this time
        self._steps_seen = None  # reporter.moves as last seen, ...
        self._steps_at = None  # ... when it last changed (None before its first change), ...
        # ... and the last gaps between its changes (the stall rule's usual step time).
        self._step_gaps = collections.deque(maxlen=STEP_GAPS)
        # Held by each tick; taken by exiting() so that no tick is inside torch once it returns.
        self._tick_lock = threading.Lock()
        self._outside_torch = False  # From exiting() on: no call into torch.

    def begin(self):
        """Starts the thread before init_process_group, as torch.distributed is instrumented,
        with the calling thread (the one importing torch) taken for the training thread. Until
        the rank has a group, a report goes only with a stalled rank's stack (send): a rank
        stuck before init_process_group (a download, a dead mount) says where, and one
        that is not says nothing."""
        self._take_training_thread()
        self._start_thread()

    def start(self):
        """Starts the thread (once) and sends a report at once, from the caller's thread (at
        each init_process_group: the call it precedes may hold the GIL while it waits, as torch
        1.13's TCPStore waits for its workers, and the side thread say nothing until then).
        The calling thread is the training thread whose CPU the reports give."""
        self._take_training_thread()
        self._start_thread()
        with self._tick_lock:  # (the side thread may be ticking: since begin, or a second init)
            if not self._exit_registered:  # At the first init_process_group (the class comment).
                self._exit_registered = True
                atexit.register(self.exiting)
                # The step times count from here, as before begin: a phase before the rendezvous
                # (a save) does not make the setup a step gap (_stalled_stack, under this lock).
                self._steps_seen = self._steps_at = None
                self._step_gaps.clear()
            self.send()

    def _take_training_thread(self):
        get_native_id = getattr(threading, "get_native_id", None)
        self._training_thread = get_native_id() if get_native_id is not None else None
        self._training_ident = threading.get_ident()

    def _start_thread(self):
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="ringmaster-watch",
                                            daemon=True)
            self._thread.start()
            self._reporter.deferring = True
            _core.on_disable(self._stop.set)

    def exiting(self):
        """At exit (the class comment): waits for a tick in progress, polls the GPU from this
        thread until it is through the collectives queued (NCCL: the last step's may still run
        as the program ends) or EXIT_POLL_SECONDS pass, and from then on the thread reports
        without calling into torch. A forked child (which may hold a copy of the lock taken)
        only stops calling. Never raises."""
        if not _core.is_owner():
            self._outside_torch = True
            return
        try:
            deadline = time.monotonic() + EXIT_POLL_SECONDS
            with self._tick_lock:
                while _core.enabled and not self._outside_torch:
                    self._comm.poll_device()
                    if not self._comm.awaiting_device() or time.monotonic() >= deadline:
                        break
                    time.sleep(EXIT_POLL_PAUSE)
                self._outside_torch = True
        except Exception as exc:  # noqa: BLE001
            _core.fail("collectives reporter at exit", exc)
        finally:
            self._outside_torch = True

    def stop(self):
        """Stops the thread and waits for it (bounded: its tick never blocks), then flushes."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)
        self._reporter.deferring = False
        self._final_flush()

    def _run(self):
        waits = max(1, int(round(self._interval / self._flush)))
        n = 0
        while not self._stop.wait(self._flush):
            if not _core.enabled or not _core.is_owner():
                break
            n += 1
            try:
                self._reporter.flush()
                if n % waits == 0:
                    self.tick()
            except Exception as exc:  # noqa: BLE001
                _core.fail("collectives reporter", exc)
                break
        self._reporter.deferring = False
        self._final_flush()

    def _final_flush(self):
        if not _core.is_owner():
            return
        try:
            self._reporter.drain()  # A busy agent: retried briefly (_reporter.py).
        except Exception:  # noqa: BLE001  Stopping: what cannot be written is dropped.
            pass

    def tick(self):
        """Flushes, polls the GPU (not once exiting), and sends one ReportCollectives (send)."""
        with self._tick_lock:
            self._reporter.flush()  # The steps queued before these numbers go before them.
            if not self._outside_torch:
                self._comm.poll_device(side=True)
            self.send()

    def send(self):
        """Sends one ReportCollectives of the numbers now, if a group is known; before one is
        (begin), one with no numbers if the rank has stalled, for its stack. That one says
        nothing of a wait (blockedKnown unset): to the agent, neither progress nor a wait."""
        entered, completed, blocked, version = self._comm.sequences()
        moves = self._reporter.moves
        stack = self._stalled_stack(version, moves)
        if not entered:
            if stack:
                self._reporter.send("collectives", {"collectiveEntered": {},
                                                    "collectiveCompleted": {}, "stack": stack},
                                    moves=moves)
            return
        body = {"collectiveEntered": entered, "collectiveCompleted": completed,
                "blocked": bool(blocked), "blockedKnown": True,
                "timeoutSeconds": self._comm.timeout_seconds,
                "threadCpuSeconds": thread_cpu_seconds(self._training_thread)}
        if stack:
            body["stack"] = stack
        # A step or phase queued since the stack was read goes first (send flushes it), and
        # the agent would take the stack for a new stall: send leaves it out then.
        if self._reporter.send("collectives", body, moves=moves):
            self._sent_version = version

    def _stalled_stack(self, version, steps):
        """The training thread's stack if the rank has not moved (its numbers, steps and
        phases) for STACK_SECONDS, or STACK_STEPS of its usual step times where longer, else
        "". Read again at most every STACK_SECONDS (the same text in between): the agent
        forwards a stack that changed, and a rank busy in Python (an evaluation without
        collectives) would change it at every report. `steps`: the reporter's moves now (the
        figure send() checks again before the stack goes)."""
        now = _monotonic()
        if steps != self._steps_seen:
            if self._steps_seen is not None:  # a change, not the first sight
                if self._steps_at is not None:  # not the first change (setup's gap)
                    self._step_gaps.append(now - self._steps_at)
                self._steps_at = now
            self._steps_seen = steps
        moves = (version, steps)
        if moves != self._moves:
            self._moves, self._still_since, self._stack = moves, now, ""
            return ""
        gaps = sorted(self._step_gaps)
        step = gaps[len(gaps) // 2] if gaps else 0.0
        stall = max(STACK_SECONDS, STACK_STEPS * step)
        if now - self._still_since < stall or self._training_ident is None:
            return ""
        if not self._stack or now - self._stack_at >= STACK_SECONDS:
            self._stack, self._stack_at = _stack.stack_of(self._training_ident), now
        return self._stack
