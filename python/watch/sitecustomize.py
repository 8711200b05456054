"""Ringmaster's zero-code watch of a Python rank (docs/python.md, "The watch").

The agent puts the directory of this file first on a Python rank's PYTHONPATH. At interpreter
start-up Python imports this module as `sitecustomize`; it starts the watch (package
_ringmaster_watch: active only when RINGMASTER_PYTHON_WATCH is 1 or shell, the rank's identity
and report socket are set, and not under torchrun) and then chains to the next `sitecustomize`
on sys.path past this directory (the user's or the distribution's), which Python would otherwise
never run. Stdlib only; it never imports torch.

Errors: a failure of the watch is logged once to stderr and never prevents the chained
sitecustomize from running; an exception of the chained one propagates as it would have
without the watch (site.py reports it).
"""


def _start_watch():
    try:
        import _ringmaster_watch

        _ringmaster_watch.start()
    except Exception as exc:  # noqa: BLE001  The program runs unwatched, never broken.
        try:
            import sys

            sys.stderr.write("ringmaster watch: disabled: %s: %s\n" % (type(exc).__name__, exc))
        except Exception:  # noqa: BLE001
            pass


def _chain():
    """Imports the next sitecustomize on sys.path after this file's directory, if any."""
    import importlib.machinery
    import importlib.util
    import os
    import sys

    try:
        here = os.path.dirname(os.path.realpath(__file__))

        def same(entry):
            try:
                return os.path.realpath(entry or os.getcwd()) == here
            except (OSError, ValueError):
                return False

        entries = list(sys.path)
        mine = [i for i, entry in enumerate(entries) if same(entry)]
        rest = entries[mine[0] + 1:] if mine else entries
        rest = [entry for entry in rest if isinstance(entry, str) and not same(entry)]
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    except Exception as exc:  # noqa: BLE001  Our failure: theirs cannot be found, say so.
        sys.stderr.write("ringmaster watch: sitecustomize chain: %s: %s\n"
                         % (type(exc).__name__, exc))
        return
    if spec is None or spec.loader is None:
        return
    ours = sys.modules.pop("sitecustomize", None)
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        if ours is not None:
            sys.modules["sitecustomize"] = ours
        raise


_start_watch()
_chain()
