"""Macros for the integration tests in //tests."""

# The programs a whole-cluster test starts: a coordinator, an agent, the trainer and ringctl.
CLUSTER_PROGRAMS = [
    "//agent",
    "//coordinator",
    "//ctl:ringctl",
    "//trainer",
]

def cluster_test(name, size = "large", data = [], tags = [], deps = [], **kwargs):
    """A cc_test of <name>.cc that runs a local cluster (tests/test_cluster.h) of real processes.

    Tagged "local": it starts processes that talk over loopback, so it runs outside the sandbox.

    Args:
      name: the test's name; its source is <name>.cc.
      size: the test's size.
      data: what it needs besides CLUSTER_PROGRAMS.
      tags: tags besides "local".
      deps: what it links besides :test_cluster and gtest_main.
      **kwargs: passed on to cc_test.
    """
    native.cc_test(
        name = name,
        size = size,
        srcs = [name + ".cc"],
        data = CLUSTER_PROGRAMS + data,
        tags = ["local"] + tags,
        deps = [":test_cluster"] + deps + ["//third_party/system:gtest_main"],
        **kwargs
    )
