"""Macros for CUDA code: compile .cu files with nvcc and keep them out of CPU-only builds.

CUDA targets exist only when the toolkit was found (@local_cuda) and `--config=cpu` is not set.
Elsewhere they are marked incompatible, so `bazel build //...` and `bazel test //...` skip them.
"""

load("@local_cuda//:defs.bzl", "CUDA_FOUND", "CUDA_PATH")

# sm_90 (H100/H200) and sm_80 (A100), plus PTX for newer GPUs.
_GENCODE = [
    "-gencode arch=compute_80,code=sm_80",
    "-gencode arch=compute_90,code=sm_90",
    "-gencode arch=compute_90,code=compute_90",
]

def cuda_enabled():
    """Returns a select() value: True where CUDA targets are built."""
    return select({
        "//third_party/cuda:forced_off": False,
        "//conditions:default": CUDA_FOUND,
    })

def if_cuda(if_true, if_false = []):
    """Picks `if_true` when CUDA targets are built, `if_false` otherwise."""
    if not CUDA_FOUND:
        return if_false
    return select({
        "//third_party/cuda:forced_off": if_false,
        "//conditions:default": if_true,
    })

def cuda_lib_dir():
    """The toolkit's library directory (empty without CUDA)."""
    return CUDA_PATH + "/lib64" if CUDA_FOUND else ""

def cuda_only():
    """A target_compatible_with value that skips a target where CUDA is not built."""
    if not CUDA_FOUND:
        return ["//third_party/cuda:incompatible"]
    return select({
        "//third_party/cuda:forced_off": ["//third_party/cuda:incompatible"],
        "//conditions:default": [],
    })

def cuda_library(name, srcs, hdrs = [], cu_hdrs = [], deps = [], copts = [], **kwargs):
    """A cc_library whose .cu sources are compiled by nvcc (one genrule per file).

    The .cu files may include headers from `hdrs` (exported to dependents), from `cu_hdrs` (seen
    only by nvcc: device-side helpers, or host headers of other targets the .cu files include;
    those targets go in `deps` for linking), and from the CUDA toolkit.
    """
    objs = []
    for src in srcs:
        obj = name + "_" + src.replace("/", "_").replace(".cu", ".o")
        native.genrule(
            name = obj + "_nvcc",
            srcs = [src] + hdrs + cu_hdrs,
            outs = [obj],
            # nvcc finds its headers and libdevice relative to its real install directory, so it
            # is run from there rather than through the @local_cuda symlinks.
            cmd = (CUDA_PATH + "/bin/nvcc -c -std=c++17 -O3 -Xcompiler -fPIC " +
                   " ".join(_GENCODE) + " -I. -I$(GENDIR) " + " ".join(copts) +
                   " -o $@ $(location " + src + ")"),
            target_compatible_with = cuda_only(),
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cuda"],
        target_compatible_with = cuda_only(),
        **kwargs
    )

def if_emulated(if_true):
    """`if_true` under --config=emu (testing/cuda_emu: the CUDA runtime emulated on the CPU)
    where CUDA is built, [] otherwise."""
    if not CUDA_FOUND:
        return []
    return select({
        "//testing/cuda_emu:emulated": if_true,
        "//conditions:default": [],
    })
