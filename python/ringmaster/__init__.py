"""Ringmaster from Python.

- ``ringmaster.Client``: submit, watch, read logs of and cancel jobs on a coordinator
  (docs/python.md);
- ``ringmaster.worker``: reports from inside a rank (steps, phases, exit reasons, rendezvous),
  no-ops anywhere else.

``Client`` and ``RingmasterError`` need python3-grpcio and python3-protobuf and the stubs that
``python/generate_stubs.sh`` generates (``tools/setup`` runs it); they are imported on first use,
so ``import ringmaster.worker`` works (as no-ops) without grpc.
"""

from typing import Any

__all__ = ["Client", "RingmasterError", "JobSpecError", "WatchUpdate", "read_job_spec",
           "state_name", "worker"]

_LAZY = {
    "Client": "._client",
    "WatchUpdate": "._client",
    "read_job_spec": "._client",
    "state_name": "._client",
    "RingmasterError": "._errors",
    "JobSpecError": "._errors",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        if name == "worker":
            from . import worker
            return worker
        raise AttributeError("module 'ringmaster' has no attribute %r" % name)
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value
