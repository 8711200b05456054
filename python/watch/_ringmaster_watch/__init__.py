"""Ringmaster's zero-code watch of a Python rank (docs/python.md, "The watch").

The agent puts this package and a sitecustomize.py first on a Python rank's PYTHONPATH and
sets RINGMASTER_PYTHON_WATCH=1, or "shell" when a shell runs the rank's Python (its helper
scripts start the watch too: only the process that imports torch first takes the rank, and in
"shell" mode only it reports an exit reason). `start()` (called by that sitecustomize) checks
that this is a rank (identity and RINGMASTER_REPORT_SOCKET set, not a torchrun child), installs
an import hook,
and instruments torch when the program imports it: optimizer steps, the loss, collectives (DDP's
buckets included), checkpoint phases, and an uncaught exception's exit reason, reported as
WorkerReport datagrams to the agent (_reporter.py). It never imports torch itself.

Stdlib only. Threading: `start` runs once, at interpreter start-up; see each module for its
hooks. Errors: `start` never raises; any surprise in the instrumentation logs one line to stderr
("ringmaster watch: disabled: ...") and every hook becomes a pass-through. One deliberate
exception: a process that is a launcher (torchrun, accelerate launch, the deepspeed launcher)
is ended with exit 78 as it imports torch (_refuse_launcher).
"""

import os
import sys

from . import _compiler, _core

_finder = None
_watch = None  # The instrumentation objects, for tests and the debugger.


def active_reason(env):
    """None when the watch should run in a process with environment `env`, else why not."""
    if env.get("RINGMASTER_PYTHON_WATCH") not in ("1", "shell"):
        return "RINGMASTER_PYTHON_WATCH is not 1 or shell"
    if env.get("TORCHELASTIC_RUN_ID"):
        return "inside torchrun (TORCHELASTIC_RUN_ID is set)"
    owner = env.get("RINGMASTER_PYTHON_WATCH_PID")
    if owner and owner != str(os.getpid()):
        return "a child of the watched process %s" % owner
    from ._reporter import IDENTITY_VARIABLES

    missing = [v for v in IDENTITY_VARIABLES if not env.get(v)]
    if missing:
        return "%s not set" % ", ".join(missing)
    return None


def start(env=None):
    """Activates the watch in this process if it is a Ringmaster rank; never raises."""
    global _finder
    env = os.environ if env is None else env
    try:
        if _core.enabled or active_reason(env) is not None:
            return False
        from . import _imports, _reporter

        reporter = _reporter.from_env(env)
        _core.activate()
        _watch_state["reporter"] = reporter
        _finder = _imports.PostImportFinder(
            {"torch": _on_torch, "torch.distributed": _on_distributed,
             "torch.nn.parallel.distributed": _on_distributed,
             "torch.distributed.checkpoint": _on_checkpoint,
             "torch.distributed._functional_collectives": _on_functional_collectives,
             # torchrun's own modules: `python -m torch.distributed.run` is known to be torchrun
             # only once runpy runs it, after torch imported (_check_launcher).
             "torch.distributed.run": _check_launcher,
             "torch.distributed.launcher.api": _check_launcher},
            lambda name, exc: _core.fail("instrumenting %s" % name, exc))
        sys.meta_path.insert(0, _finder)
        _core.on_disable(_remove_finder)
        shell = env.get("RINGMASTER_PYTHON_WATCH") == "shell"
        _install_excepthook(reporter, shell)
        # A watch that turns itself off says so, lest the rank's silence from then on look like
        # a hang (agent/local_watchdog.h).
        _core.on_disable(lambda: _say_ended(reporter))
        # Reports a busy agent held back go at exit, with or without the side thread (which
        # starts as torch.distributed is instrumented and drains when it stops); under a shell,
        # which may go on with other work, the rank's program says it ended.
        __import__("atexit").register(_at_exit, reporter, shell)
        _finder.run_loaded()
        return True
    except Exception as exc:  # noqa: BLE001
        if _core.enabled:
            _core.fail("start", exc)
        else:
            _log("not started: %s: %s" % (type(exc).__name__, exc))
        return False


_watch_state = {}


def _log(message):
    try:
        sys.stderr.write("ringmaster watch: %s\n" % message)
        sys.stderr.flush()
    except Exception:  # noqa: BLE001
        pass


def _at_exit(reporter, shell):
    # The last atexit handler (registered first): the side thread, reporting through the
    # program's own exit work since its handler ran (_ticker.py), stops now.
    ticker = _watch_state.get("ticker")
    # Not in a forked child: its copy of the thread's Event lock may have been taken at the fork.
    if ticker is not None and _core.is_owner():
        try:
            ticker.stop()
        except Exception:  # noqa: BLE001  Exiting: the thread is a daemon.
            pass
    if _core.is_owner():
        try:
            if shell and _core.enabled:
                _say_ended(reporter)
            reporter.drain()
        except Exception:  # noqa: BLE001  Exiting: what cannot be written is dropped.
            pass


def _say_ended(reporter):
    """Tells the agent this process's watch says no more (ReportCollectivesRequest.watch_ended),
    if this process took the rank (imported torch); never raises."""
    if "steps" not in _watch_state or not _core.is_owner():
        return
    try:
        reporter.send("collectives", {"collectiveEntered": {}, "collectiveCompleted": {},
                                      "blocked": False, "blockedKnown": True,
                                      "watchEnded": True})
    except Exception:  # noqa: BLE001  The agent then judges the silence as before.
        pass


def _remove_finder():
    if _finder is not None:
        _finder.clear()
        try:
            sys.meta_path.remove(_finder)
        except ValueError:
            pass


def _install_excepthook(reporter, shell):
    """Reports an uncaught exception as the rank's exit reason; under a shell (`shell`), only
    in the process that took the rank (imported torch): not a helper script's."""
    previous = sys.excepthook

    def excepthook(kind, value, tb):
        if (_core.enabled and _core.is_owner() and not issubclass(kind, KeyboardInterrupt)
                and (not shell or "steps" in _watch_state)):
            try:
                reason = "".join(
                    __import__("traceback").format_exception_only(kind, value)).strip()
                reason = " ".join(reason.split())[:512]
                reporter.send("exit", {"exitCode": 1, "reason": reason})
            except Exception:  # noqa: BLE001  Never in the way of the program's own report.
                pass
        previous(kind, value, tb)

    sys.excepthook = excepthook

    def take_back():
        if sys.excepthook is excepthook:
            sys.excepthook = previous

    _core.on_disable(take_back)


# -- launchers ----------------------------------------------------------------------------------
# A launcher that starts its own processes and world (spec/launchers.h, which lists the same ones
# for the coordinator: keep the two together; torchrun, which the agent runs as its program when
# the job's command names it: spec/torchrun.h): the name in a refusal.
_LAUNCHER_MODULES = {
    "torch.distributed.run": "torchrun",
    "torch.distributed.launch": "torchrun",
    "accelerate.commands.launch": "accelerate launch",
    "deepspeed.launcher.runner": "the deepspeed launcher",
    "deepspeed.launcher.launch": "the deepspeed launcher",
}
_LAUNCHER_SCRIPTS = {"torchrun": "torchrun", "accelerate-launch": "accelerate launch",
                     "deepspeed": "the deepspeed launcher",
                     "deepspeed.pt": "the deepspeed launcher"}


def launcher_of(argv, main_module):
    """The launcher this process runs (its sys.argv, and the module run as __main__ by
    `python -m`, or None), or None."""
    if main_module in _LAUNCHER_MODULES:
        return _LAUNCHER_MODULES[main_module]
    name = os.path.basename(argv[0]) if argv and isinstance(argv[0], str) else ""
    if name == "accelerate":
        return "accelerate launch" if len(argv) > 1 and argv[1] == "launch" else None
    return _LAUNCHER_SCRIPTS.get(name)


def _refuse_launcher(launcher):
    """Ends this process, a launcher a rank's command started past what the coordinator reads
    (a shell script, a Python program's subprocess), before it starts anything: each rank's
    launcher would start a node's worth of processes in a world of its own, training apart from
    the other ranks. Exit 78 (a failure no restart mends), with the reason reported and printed.
    The job's `watchdog: {python_watch: false}` turns the watch, and this, off."""
    reason = ("%s started inside rank %s's command: each rank's %s would start its own "
              "processes in a world of its own (Ringmaster starts one process per device and sets "
              "RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT): run the training "
              "program itself, or make the launcher the job's command (torchrun only)"
              % (launcher, os.environ.get("RANK", "?"), launcher))
    reporter = _watch_state.get("reporter")
    try:
        if reporter is not None:
            reporter.send("exit", {"exitCode": 78, "reason": reason[:512]})
            reporter.drain()
    except Exception:  # noqa: BLE001  Printed below all the same.
        pass
    _log("refused: " + reason)
    os._exit(78)


def module_of(orig_argv):
    """MODULE of an interpreter's command line `python [options] -m MODULE ...` (its options
    read as Python reads them: clusters; c, m, W and X take the rest of the word or the next
    one), or None where it runs anything else."""
    i = 1
    while i < len(orig_argv):
        word = orig_argv[i]
        i += 1
        if not isinstance(word, str) or word == "--" or len(word) < 2 or word[0] != "-":
            return None
        if word == "--check-hash-based-pycs":
            i += 1
            continue
        if word[1] == "-":
            continue
        for c, flag in enumerate(word[1:], 1):
            if flag == "c":
                return None
            if flag in "mWX":
                argument = word[c + 1:]
                if not argument:
                    if i >= len(orig_argv):
                        return None
                    argument, i = orig_argv[i], i + 1
                if flag == "m":
                    return argument
                break
    return None


def _check_launcher(_module=None):
    """Refuses this process if it is a launcher (_refuse_launcher): checked when torch imports,
    and again when torchrun's modules do. A `python -m` launcher's module is read from the
    interpreter's own command line (sys.orig_argv, Python 3.10 on): runpy sets __main__ only
    after the module's packages, which import torch, have been imported."""
    if not _core.enabled:
        return
    try:
        main = getattr(getattr(sys.modules.get("__main__"), "__spec__", None), "name", None)
        if main is None:
            main = module_of(list(getattr(sys, "orig_argv", None) or []))
        launcher = launcher_of(list(sys.argv), main)
    except Exception:  # noqa: BLE001  A surprise here: not known to be a launcher.
        return
    if launcher is not None:
        _refuse_launcher(launcher)


# -- instrumentation, as torch's modules finish importing --------------------------------------
def _on_torch(torch):
    if "steps" in _watch_state or not _core.enabled:
        return
    _check_launcher()
    # Claim the rank: a process this one starts (spawned DataLoader workers...) stays unwatched.
    os.environ["RINGMASTER_PYTHON_WATCH_PID"] = str(os.getpid())
    from . import _comm, _steps

    comm = _comm.Comm()
    steps = _steps.Steps(torch, _watch_state["reporter"], comm)
    _watch_state["comm"] = comm
    _watch_state["steps"] = steps
    steps.install()
    _compiler.keep_out(torch)  # Before the program can compile anything (_compiler.py).
    if "torch.distributed" in sys.modules:
        _on_distributed(sys.modules["torch.distributed"])
    if "torch.distributed.checkpoint" in sys.modules:
        _on_checkpoint(sys.modules["torch.distributed.checkpoint"])


def _on_distributed(_module):
    if "collectives" in _watch_state or "steps" not in _watch_state or not _core.enabled:
        return  # Before torch itself finished: _on_torch calls back.
    torch = sys.modules.get("torch")
    dist = sys.modules.get("torch.distributed")
    parallel = sys.modules.get("torch.nn.parallel.distributed")
    if torch is None or dist is None or parallel is None:
        return  # The next of these imports calls back.
    if not getattr(dist, "is_available", lambda: False)():
        _watch_state["collectives"] = None  # A torch built without distributed.
        return
    from . import _collectives, _ddp, _device, _ticker

    _compiler.keep_out(torch)  # The modules just imported, before anything can fail.
    comm = _watch_state["comm"]
    collectives = _collectives.Collectives(
        dist, comm, is_compiling=_compiler.is_compiling_of(torch))
    ddp = _ddp.DdpWatch(torch, dist, comm, collectives)  # Before the patches: takes originals.
    ddp.check()
    _watch_state["collectives"] = collectives
    collectives.install()
    _device.watch_captures(getattr(torch, "cuda", None))  # No CUDA event during a capture.
    ddp.install(parallel.DistributedDataParallel)
    ticker = _ticker.Ticker(_watch_state["reporter"], comm)
    collectives.on_init.append(ticker.start)
    ticker.begin()  # Before init_process_group: a rank stuck before it says where (_ticker.py).
    steps = _watch_state["steps"]
    steps.collectives = collectives
    steps.ddp = ddp
    _watch_state["ddp"] = ddp
    _watch_state["ticker"] = ticker
    functional = sys.modules.get("torch.distributed._functional_collectives")
    if functional is not None:
        _on_functional_collectives(functional)


def _on_functional_collectives(module):
    """TorchDynamo's table of the collectives it rewrites as functional ones: the originals
    of the wrapped ones too (_collectives.py), for after the watch disables itself."""
    collectives = _watch_state.get("collectives")
    if collectives is not None and _core.enabled:
        collectives.remap_originals(module)


def _on_checkpoint(dcp):
    if "steps" not in _watch_state or "checkpoint" in _watch_state or not _core.enabled:
        return
    _watch_state["checkpoint"] = True
    _watch_state["steps"].install_checkpoint(dcp)
