"""Build rules of the CUDA emulator (testing/cuda_emu): a .cu file's kernels built for the GPU and
for the CPU (cuda_emu.h), and the tests that run on either."""

load("//third_party/cuda:defs.bzl", "cuda_library", "cuda_only")

def emulated_kernels(name, src, hdrs, cu_hdrs = [], deps = []):
    """A cc_library defining the same launchers as the .cu file's cuda_library.

    The .cu source is rewritten by cu_to_cc.py (launches become emu::Launch) and compiled by the
    host compiler, with fake_cuda for the CUDA runtime; link it instead of the real kernels,
    never beside them.
    """
    generated = name + ".cc"
    native.genrule(
        name = name + "_source",
        srcs = [src],
        outs = [generated],
        tools = ["//testing/cuda_emu:cu_to_cc.py"],
        cmd = "python3 $(location //testing/cuda_emu:cu_to_cc.py) $(location " + src +
              ") > $@",
        target_compatible_with = cuda_only(),
    )
    native.cc_library(
        name = name,
        srcs = [generated],
        hdrs = hdrs,
        textual_hdrs = cu_hdrs,
        # `#pragma unroll` is nvcc's. Optimised even in fastbuild: the emulated kernels' inner
        # loops (each lane of a tensor-core product unpacks the warp's operands, mma_emu.h) are
        # the slowest part of the emulated tests unoptimised.
        copts = ["-Wno-unknown-pragmas", "-O2"],
        # fake_cuda answers the runtime calls the launchers make (cudaGetLastError).
        deps = deps + ["//testing/cuda_emu:cuda_emu", "//testing/cuda_emu:fake_cuda"],
        target_compatible_with = cuda_only(),
    )

def cuda_kernels(name, src, hdrs, cu_hdrs = [], deps = []):
    """A .cu file's kernels twice: `name`_nvcc, built by nvcc for the GPU (cuda_library), and
    `name`_emulated, the same source built to run on the CPU (emulated_kernels). `name` is the
    nvcc one, or the emulated one under --config=emu."""
    cuda_library(name = name + "_nvcc", srcs = [src], hdrs = hdrs, cu_hdrs = cu_hdrs, deps = deps)
    native.alias(
        name = name,
        actual = select({
            "//testing/cuda_emu:emulated": ":" + name + "_emulated",
            "//conditions:default": ":" + name + "_nvcc",
        }),
    )
    emulated_kernels(
        name = name + "_emulated",
        src = src,
        hdrs = hdrs,
        cu_hdrs = cu_hdrs,
        deps = deps,
    )

def cuda_test(name, deps, srcs = None, tags = [], copts = [], **kwargs):
    """A cc_test of CUDA code that runs on a GPU and on the emulator.

    Tagged `gpu` (bench/gpu_bundle carries it to the GPU machines; it skips where no GPU is
    visible) and `emulated` (tools/test runs it again under --config=emu, on the CPU). Built only
    where CUDA is (cuda_only()). `srcs` defaults to `name`.cc. Optimised even in fastbuild: the
    parity tests fill, convert and compare millions of host elements, which unoptimised took
    as long as the emulated kernels themselves.
    """
    native.cc_test(
        name = name,
        srcs = srcs or [name + ".cc"],
        copts = ["-O2"] + copts,
        tags = ["gpu", "emulated"] + tags,
        target_compatible_with = cuda_only(),
        deps = deps,
        **kwargs
    )

def emulator_test(name, deps = []):
    """A test of the fake CUDA runtime and NCCL themselves (this package): `name`.cc linked with
    the emulator, tagged `emulated`, built only where CUDA is."""
    native.cc_test(
        name = name,
        srcs = [name + ".cc"],
        tags = ["emulated"],
        target_compatible_with = cuda_only(),
        deps = [
            "//testing/cuda_emu:cuda_emu",
            "//testing/cuda_emu:fake_cuda",
            "//testing/cuda_emu:fake_nccl",
            "//third_party/system:gtest_main",
        ] + deps,
    )

def emulated_only():
    """A target_compatible_with value that builds a target only under --config=emu (a test of
    programs that need a GPU elsewhere)."""
    return select({
        "//testing/cuda_emu:emulated": [],
        "//conditions:default": ["//third_party/cuda:incompatible"],
    })
