"""Compiler options for the trainer's numeric code.

The numeric code is always optimised, also in Bazel's default fastbuild mode: tests train real
models and would otherwise spend minutes in unoptimised loops. No -ffast-math: results stay
IEEE-exact and deterministic, which the resume and parity tests rely on.
"""

TRAINER_COPTS = ["-O3", "-fno-math-errno"]
