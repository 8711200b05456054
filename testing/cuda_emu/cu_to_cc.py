#!/usr/bin/env python3
"""Turns a .cu file into C++ that runs its kernels on the CPU (cuda_emu.h), for tests.

Each launch `Kernel<<<grid, block, shared, stream>>>(args);` (or `Kernel<T, 4><<<...`) becomes
`::emu::Launch(::emu::MakeConfig(grid, block, shared, stream), [=] { Kernel(args); });`, which
runs the kernel once per CUDA thread, when the stream gets to it (the arguments are copied at
the launch, as CUDA copies them); cub's radix sort is replaced by a host sort
(cub_radix_sort.h). Everything else is left as written. Usage: cu_to_cc.py IN.cu > OUT.cc
"""
import re
import sys

_CUB = re.compile(r"#include\s*<cub/device/device_radix_sort\.cuh>")
# A kernel's name, with its template arguments if the launch names them (`Kernel<T, 4><<<`).
_LAUNCH = re.compile(r"([A-Za-z_][A-Za-z_0-9:]*(?:<[^<>;{}()]*>)?)\s*<<<")


def _matching(text, start, opening, closing):
    """Index just past the `closing` that balances the `opening` at text[start]."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == opening:
            depth += 1
        elif text[i] == closing:
            depth -= 1
            if depth == 0:
                return i + 1
    raise SystemExit(f"cu_to_cc.py: unbalanced {opening}{closing} at offset {start}")


def convert(text):
    text = _CUB.sub('#include "testing/cuda_emu/cub_radix_sort.h"', text)
    out = []
    pos = 0
    while True:
        m = _LAUNCH.search(text, pos)
        if m is None:
            out.append(text[pos:])
            break
        config_end = text.index(">>>", m.end())
        config = text[m.end():config_end]
        args_start = text.index("(", config_end)
        if text[config_end + 3:args_start].strip():
            raise SystemExit(f"cu_to_cc.py: unexpected text after >>> at offset {config_end}")
        args_end = _matching(text, args_start, "(", ")")
        out.append(text[pos:m.start()])
        out.append(f"::emu::Launch(::emu::MakeConfig({config}), [=] {{ {m.group(1)}"
                   f"{text[args_start:args_end]}; }})")
        pos = args_end
    return "".join(out)


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        source = f.read()
    # Errors in the kernels are reported at their lines of the .cu file.
    sys.stdout.write('#include "testing/cuda_emu/cuda_emu.h"\n'
                     f'#line 1 "{sys.argv[1]}"\n' + convert(source))
