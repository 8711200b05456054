"""Compiler options for the trainer's numeric code.

The numeric code is always optimised, also in Bazel's default fastbuild mode: tests train real
models and would otherwise spend minutes in unoptimised loops. No -ffast-math: results stay
IEEE-exact and deterministic, which the resume and parity tests rely on.
"""

TRAINER_COPTS = ["-O3", "-fno-math-errno"]

def trainer_library(name, **kwargs):
    """A cc_library of the numeric code in <name>.cc and <name>.h, built with TRAINER_COPTS.

    Args:
      name: the library's name, also its files'.
      **kwargs: passed on to cc_library (deps, ...).
    """
    native.cc_library(
        name = name,
        srcs = [name + ".cc"],
        hdrs = [name + ".h"],
        copts = TRAINER_COPTS,
        **kwargs
    )
