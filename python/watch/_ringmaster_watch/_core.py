"""The watch's on/off switch and its undo list (shared by every instrumentation module).

Threading: `enabled` is read without a lock on every hook (a plain bool; a stale read only
delays a pass-through by one call); `disable` and `patch` take `_lock`. Ownership: every patch
the watch makes goes through `patch`/`on_disable`, so `disable` can take it back. Errors: nothing
here raises into the program; `fail` turns any instrumentation exception into one logged line
("ringmaster watch: disabled: ...") and a watch that stays off for the rest of the process.
"""

import os
import sys
import threading

# True once the watch is active in this process; False after `disable` (never set back).
enabled = False

_lock = threading.Lock()
_undo = []  # Callables that take one patch back, in the order the patches were made.
_owner_pid = None  # The process the watch reports for; a forked child is never it.


def activate():
    """Marks the watch active for this process (sitecustomize calls it once)."""
    global enabled, _owner_pid
    _owner_pid = os.getpid()
    enabled = True
    if hasattr(os, "register_at_fork"):
        # A forked child (a DataLoader worker) inherits the patches but is not the rank: every
        # hook passes through there, silently.
        os.register_at_fork(after_in_child=_forked)


def _forked():
    global enabled
    enabled = False


def is_owner():
    return os.getpid() == _owner_pid


def disable(why):
    """Turns the watch off for good: logs `why` once, takes every patch back. Never raises."""
    global enabled
    with _lock:
        if not enabled:
            return
        enabled = False
        undo = list(reversed(_undo))
        del _undo[:]
    try:
        sys.stderr.write("ringmaster watch: disabled: %s\n" % (why,))
        sys.stderr.flush()
    except Exception:  # noqa: BLE001  A closed stderr must not break the program.
        pass
    for take_back in undo:
        try:
            take_back()
        except Exception:  # noqa: BLE001  Best effort: each hook also passes through when off.
            pass


def fail(where, exc):
    """Disables the watch after an exception inside the instrumentation."""
    if enabled:
        disable("%s: %s: %s" % (where, type(exc).__name__, str(exc).splitlines()[0][:200]
                                if str(exc) else ""))


def on_disable(take_back):
    """Registers a callable that `disable` runs (a removable hook's handle.remove...)."""
    with _lock:
        _undo.append(take_back)


def patch(owner, name, replacement):
    """Sets owner.name = replacement (a module or a class), undone by `disable`.

    A class that inherited the attribute gets it deleted again on undo, so the base class's
    version shows through as before.
    """
    own = name in vars(owner)
    original = vars(owner)[name] if own else getattr(owner, name)
    setattr(owner, name, replacement)

    def take_back():
        if vars(owner).get(name) is replacement:
            if own:
                setattr(owner, name, original)
            else:
                delattr(owner, name)

    on_disable(take_back)
    return original
