"""Repository rule that finds the CUDA toolkit, or stands in for it when there is none.

@local_cuda//:defs.bzl exports CUDA_FOUND; @local_cuda//:cuda links cudart and NCCL when the
toolkit is present, and is an empty library otherwise. cuBLAS and cuBLASLt are not linked: they
are opened on first use (//trainer/cuda:cublas_loader).
"""

_FOUND_BUILD = """
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "cuda",
    # CUDA 13 keeps CCCL (libcu++, CUB, Thrust) in include/cccl, some of it in extension-less
    # headers (<nv/target>, which cuda_fp16.h and cuda_bf16.h include).
    hdrs = glob(["include/**/*.h", "include/**/*.hpp", "include/**/*.inl", "include/**/*.cuh",
                 "include/cccl/**"]),
    includes = ["include", "include/cccl"],
    linkopts = [
        "-L{path}/lib64",
        "-Wl,-rpath,{path}/lib64",
        "-lnccl",
        "-lcudart",
    ],
)

exports_files(glob(["bin/**"]))

filegroup(
    name = "nvcc",
    srcs = ["bin/nvcc"],
)
"""

_MISSING_BUILD = """
package(default_visibility = ["//visibility:public"])

# No CUDA toolkit on this machine: CUDA targets are skipped (see //third_party/cuda:defs.bzl).
cc_library(name = "cuda")

filegroup(name = "nvcc")
"""

def _cuda_configure_impl(ctx):
    path = ctx.os.environ.get("RINGMASTER_CUDA_PATH", "/usr/local/cuda")
    found = ctx.path(path + "/bin/nvcc").exists and ctx.path(path + "/include/cuda_runtime.h").exists
    if found:
        for entry in ["bin", "include", "lib64"]:
            ctx.symlink(path + "/" + entry, entry)
        ctx.file("BUILD", _FOUND_BUILD.format(path = path))
    else:
        ctx.file("BUILD", _MISSING_BUILD)
    ctx.file("defs.bzl", "CUDA_FOUND = %s\nCUDA_PATH = %r\n" % (found, path if found else ""))

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["RINGMASTER_CUDA_PATH"],
    local = True,
)
