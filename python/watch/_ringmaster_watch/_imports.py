"""Runs a callback once a module has finished importing, without importing it ourselves.

A finder first on sys.meta_path answers nothing itself: for a watched name it asks the finders
after it for the spec, and wraps that spec's loader's exec_module so the callback runs right
after the module's code. As a fallback (another finder ahead of ours found the module), every
later import also checks whether a watched module has appeared in sys.modules meanwhile.

Threading: imports run under the import lock of the module; the finder's own set of names is
guarded by a lock. Errors: a callback's exception goes to `on_error(name, exc)`; the finder
never raises into an import.
"""

import sys
import threading


class PostImportFinder:
    """A meta-path finder that calls callbacks[name](module) after `name` finishes importing."""

    def __init__(self, callbacks, on_error):
        self._callbacks = dict(callbacks)
        self._on_error = on_error
        self._lock = threading.Lock()
        self._busy = threading.local()

    # -- the finder protocol ------------------------------------------------------------------
    def find_spec(self, name, path=None, target=None):
        if not self._callbacks:
            return None
        self._run_loaded()
        if name not in self._callbacks or getattr(self._busy, "name", None) == name:
            return None
        self._busy.name = name
        try:
            spec = None
            for finder in list(sys.meta_path):
                if finder is self:
                    continue
                find = getattr(finder, "find_spec", None)
                if find is None:
                    continue
                spec = find(name, path, target)
                if spec is not None:
                    break
        except Exception:  # noqa: BLE001  Let the import system search again, without us.
            return None
        finally:
            self._busy.name = None
        if spec is None or spec.loader is None or isinstance(spec.loader, type):
            return spec
        loader = spec.loader
        original = getattr(loader, "exec_module", None)
        if original is None:
            return spec

        def exec_module(module):
            original(module)
            self._run(name, module)

        try:
            loader.exec_module = exec_module
        except (AttributeError, TypeError):
            pass  # A loader that takes no attribute: the sys.modules fallback runs it later.
        return spec

    def invalidate_caches(self):
        pass

    # -- callbacks -----------------------------------------------------------------------------
    def run_loaded(self):
        """Runs the callbacks of watched modules that are already imported."""
        self._run_loaded()

    def _run_loaded(self):
        for name in list(self._callbacks):
            module = sys.modules.get(name)
            if module is None:
                continue
            spec = getattr(module, "__spec__", None)
            if spec is not None and getattr(spec, "_initializing", False):
                continue  # Still running its own code; its exec_module wrapper calls us.
            self._run(name, module)

    def _run(self, name, module):
        with self._lock:
            callback = self._callbacks.pop(name, None)
        if callback is None:
            return
        try:
            callback(module)
        except Exception as exc:  # noqa: BLE001  An instrumentation failure disables the watch.
            self._on_error(name, exc)

    def clear(self):
        with self._lock:
            self._callbacks.clear()
