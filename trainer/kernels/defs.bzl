"""kernel_family: one operation's CUDA targets in trainer/kernels, named by convention."""

load("//testing/cuda_emu:defs.bzl", "cuda_kernels", "cuda_test")
load("//third_party/cuda:defs.bzl", "cuda_only")

# Device-side helpers and host headers every .cu file may include.
CU_HDRS = [
    "kernel_utils.cuh",
    "tensor_core.cuh",
    "launch_shape.h",
]

def kernel_family(name, src = None, cu_hdrs = [], deps = [], test_deps = []):
    """The CUDA targets of the operation `name`, each built only where CUDA is:

    - `name`_kernels: the kernels of `src` (default `name`.cu; "" for an operation with no
      kernels of its own) behind the launch header `name`_launch.h, built by nvcc and emulated on
      the CPU (cuda_kernels); the .cu file sees CU_HDRS and `cu_hdrs`;
    - `name`_cuda: the Status wrapper (`name`_cuda.h/.cc) over the kernels, with `deps`;
    - `name`_cuda_test: its parity test against the CPU reference (`name`_cuda_test.cc), on a GPU
      and emulated (cuda_test), with cuda_test_util and `test_deps`.
    """
    wrapper_deps = list(deps)
    if src != "":
        cuda_kernels(
            name = name + "_kernels",
            src = src or name + ".cu",
            hdrs = [name + "_launch.h"],
            cu_hdrs = CU_HDRS + cu_hdrs,
            deps = [":launch_shape"],
        )
        wrapper_deps = [":" + name + "_kernels"] + wrapper_deps
    native.cc_library(
        name = name + "_cuda",
        srcs = [name + "_cuda.cc"],
        hdrs = [name + "_cuda.h"],
        target_compatible_with = cuda_only(),
        deps = wrapper_deps,
    )
    cuda_test(
        name = name + "_cuda_test",
        deps = [
            ":" + name + "_cuda",
            ":cuda_test_util",
            "//third_party/system:gtest_main",
        ] + test_deps,
    )
