"""Keeps the watch's own Python code out of torch.compile's tracer (TorchDynamo).

A program's compiled code can reach the watch: its traced functions call our wrappers (DDP's
forward, Tensor.backward, torch.save, an optimizer's step...), and after a graph break the
eager rest of a compiled call runs with TorchDynamo still looking at each new frame. Left
alone, TorchDynamo traces into the watch, breaks its graphs at our clock and sequence-number
reads with UserWarnings on the program's stderr, and compiles frames of ours. Two marks, the
ones `torch._dynamo.disable(fn, recursive=False)` makes in torch 2.0 to 2.6, keep it out,
without importing torch._dynamo (heavy; a program that never compiles never loads it):

- every code object of this package (functions, methods, closures, lambdas) is passed to
  `torch._C._dynamo.eval_frame.skip_code`: TorchDynamo runs such a frame as plain Python and
  still compiles the frames it calls (the original forward, backward and step), as it does
  for torch's own skipped files (`keep_out`);
- each wrapper of a call where the unwatched program breaks its graph anyway (Tensor.backward,
  torch.save, init_process_group..., and the optimizer's wrapped `step`) gets
  `_torchdynamo_disable = True` (`entry`): TorchDynamo breaks the caller's graph at the call,
  as it does at torch's own function, instead of inlining the watch. The wrappers of DDP's
  forward, the collectives and Work.wait are not marked: traced, they call torch's function
  at once (`is_compiling_of`), so DDP's forward traces as without the watch and a collective
  becomes TorchDynamo's functional collective.

A torch without skip_code (1.13) gets the attribute only, which nothing there reads.

Threading: `keep_out` takes a lock. Errors: skip_code's errors raise into the caller (an
instrumentation error: the watch disables itself).
"""

import os
import sys
import threading
import types

PACKAGE = __name__.rpartition(".")[0]
_DIRECTORY = os.path.dirname(os.path.abspath(__file__)) + os.sep

_lock = threading.Lock()
_kept_out = set()  # Code objects already passed to skip_code.


def entry(fn):
    """Marks `fn`, a function of ours that a traced function may call: not inlined."""
    fn._torchdynamo_disable = True
    return fn


def is_compiling_of(torch):
    """torch.compiler.is_compiling (torch 2.3 on: True while TorchDynamo traces the caller),
    else a function returning False."""
    fn = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    return fn if callable(fn) else _never


def _never():
    return False


def keep_out(torch):
    """Marks every code object of this package's loaded modules not yet marked; returns how
    many it marked (0 where this torch has no TorchDynamo)."""
    skip_code = getattr(getattr(getattr(getattr(torch, "_C", None), "_dynamo", None),
                                "eval_frame", None), "skip_code", None)
    if skip_code is None:
        return 0
    with _lock:
        codes = [c for c in _package_codes() if c not in _kept_out]
        for code in codes:
            skip_code(code)
            _kept_out.add(code)
    return len(codes)


def _package_codes():
    modules = [m for name, m in list(sys.modules.items())
               if m is not None and (name == PACKAGE or name.startswith(PACKAGE + "."))]
    seen = set()
    out = []
    for module in modules:
        for value in list(vars(module).values()):
            for fn in _functions(value):
                if os.path.abspath(fn.__code__.co_filename).startswith(_DIRECTORY):
                    _nested_codes(fn.__code__, seen, out)
    return out


def _functions(value):
    """The plain functions `value` (a module member) holds: itself, or a class's methods."""
    if isinstance(value, types.FunctionType):
        return [value]
    if not isinstance(value, type) or not value.__module__.startswith(PACKAGE):
        return []
    out = []
    for member in vars(value).values():
        if isinstance(member, (staticmethod, classmethod)):
            member = member.__func__
        elif isinstance(member, property):
            out.extend(f for f in (member.fget, member.fset, member.fdel)
                       if isinstance(f, types.FunctionType))
            continue
        if isinstance(member, types.FunctionType):
            out.append(member)
    return out


def _nested_codes(code, seen, out):
    """`code` and the code objects defined inside it (closures, lambdas, comprehensions)."""
    if code in seen:
        return
    seen.add(code)
    out.append(code)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _nested_codes(const, seen, out)
