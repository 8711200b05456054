"""Where a stalled rank's training thread is: its Python stack, as ReportCollectives carries it
(worker.proto's `stack`).

The watch's side thread reads the training thread's current frame (sys._current_frames; a
thread blocked in a C call, a collective or a queue's wait, has released the GIL and its frames
stand still) and writes one line per frame, outermost first: "file:line in function". A file
under a library directory (the standard library, site-packages, dist-packages) is named from
there ("torch/utils/data/dataloader.py"), one under the working directory from it
("train.py"), any other in full. The watch's own frames (its wrappers around collectives) are
left out: the user's program and torch are what the user reads. At most MAX_BYTES of UTF-8
(the agent's bound): the innermost frames are kept, each line at most MAX_LINE characters;
control characters (C0, DEL, C1) and line separators become "?", and a file name that is not
valid UTF-8 is written with "?" too (the stack is shown on terminals, and protobuf strings must
be UTF-8; the agent cleans what another sender sends the same way).

Threading: called on the watch's side thread (the GIL held throughout; nothing in torch).
Errors: never raises; "" where the frames cannot be read (no sys._current_frames, the thread
gone).
"""

import os
import sys
import sysconfig

MAX_BYTES = 4096  # common/one_line.h's kStackBytes, the agent's bound
MAX_LINE = 300
MAX_FRAMES = 256  # frames walked at most (deep recursion)

_WATCH_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_roots = None  # library directories, longest first (computed at the first stall)


def _library_roots():
    global _roots
    if _roots is None:
        found = set()
        try:
            paths = sysconfig.get_paths()
            for key in ("stdlib", "platstdlib", "purelib", "platlib"):
                if paths.get(key):
                    found.add(paths[key])
        except Exception:  # noqa: BLE001  A broken sysconfig: the paths below still serve.
            pass
        for entry in sys.path:
            if isinstance(entry, str) and os.path.basename(entry) in ("site-packages",
                                                                      "dist-packages"):
                found.add(entry)
        _roots = sorted((os.path.normpath(p) + os.sep for p in found if p), key=len,
                        reverse=True)
    return _roots


def short_name(filename, cwd):
    """`filename` as the stack names it (the module comment)."""
    for root in _library_roots():
        if filename.startswith(root):
            return filename[len(root):]
    if cwd and filename.startswith(cwd):
        return filename[len(cwd):]
    return filename


def _unprintable(c):
    code = ord(c)
    return code < 0x20 or 0x7f <= code <= 0x9f or code in (0x2028, 0x2029)


def _clean(line):
    line = "".join("?" if _unprintable(c) else c for c in line)
    line = line.encode("utf-8", "replace").decode("utf-8")  # lone surrogates become "?"
    if len(line) > MAX_LINE:
        line = "..." + line[-(MAX_LINE - 3):]
    return line


def stack_of(thread_ident):
    """The stack of thread `thread_ident` (threading.get_ident()), as the module comment says;
    "" if it cannot be read."""
    try:
        frame = sys._current_frames().get(thread_ident)  # pylint: disable=protected-access
        try:
            cwd = os.getcwd() + os.sep
        except OSError:
            cwd = ""
        lines = []  # innermost first
        size = 0
        walked = 0
        while frame is not None and walked < MAX_FRAMES:
            walked += 1
            code = frame.f_code
            filename = code.co_filename or "?"
            if not filename.startswith(_WATCH_DIR):
                line = _clean("%s:%d in %s" % (short_name(filename, cwd), frame.f_lineno or 0,
                                               code.co_name))
                size += len(line.encode("utf-8")) + (1 if lines else 0)
                if size > MAX_BYTES:
                    break
                lines.append(line)
            frame = frame.f_back
        del frame
        return "\n".join(reversed(lines))
    except Exception:  # noqa: BLE001  Never the watch's failure: no stack this time.
        return ""
