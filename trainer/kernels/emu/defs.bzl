"""emulated_kernels: a .cu file's kernels built to run on the CPU (cuda_emu.h), for tests."""

load("//third_party/cuda:defs.bzl", "cuda_library", "cuda_only")

def emulated_kernels(name, src, hdrs, cu_hdrs = [], deps = []):
    """A test-only cc_library defining the same launchers as the .cu file's cuda_library.

    The .cu source is rewritten by cu_to_cc.py (launches become emu::Launch) and compiled by the
    host compiler; link it instead of the real kernels, never beside them.
    """
    generated = name + ".cc"
    native.genrule(
        name = name + "_source",
        srcs = [src],
        outs = [generated],
        tools = ["//trainer/kernels/emu:cu_to_cc.py"],
        cmd = "python3 $(location //trainer/kernels/emu:cu_to_cc.py) $(location " + src +
              ") > $@",
        target_compatible_with = cuda_only(),
        testonly = True,
    )
    native.cc_library(
        name = name,
        srcs = [generated],
        hdrs = hdrs,
        textual_hdrs = cu_hdrs,
        # `#pragma unroll` is nvcc's.
        copts = ["-Wno-unknown-pragmas"],
        deps = deps + ["//trainer/kernels/emu:cuda_emu"],
        target_compatible_with = cuda_only(),
        testonly = True,
    )

def cuda_kernels(name, src, hdrs, cu_hdrs = [], deps = []):
    """A .cu file's kernels twice: `name`, built by nvcc for the GPU (cuda_library), and
    `name`_emulated, the same source built to run on the CPU for tests (emulated_kernels)."""
    cuda_library(name = name, srcs = [src], hdrs = hdrs, cu_hdrs = cu_hdrs, deps = deps)
    emulated_kernels(
        name = name + "_emulated",
        src = src,
        hdrs = hdrs,
        cu_hdrs = cu_hdrs,
        deps = deps,
    )
