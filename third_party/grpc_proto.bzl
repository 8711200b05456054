"""cc_grpc_proto: protoc + grpc_cpp_plugin from Debian, then a cc_library over the generated code."""

def cc_grpc_proto(name, srcs, deps = [], services = True):
    """Generates C++ messages (and gRPC stubs when `services`) for `srcs`.

    Imports are resolved from the workspace root, so `import "proto/ringmaster/v1/job.proto";` works.
    `deps` are other cc_grpc_proto targets whose .proto files these import.
    """
    outs = []
    for src in srcs:
        base = src[:-len(".proto")]
        outs += [base + ".pb.h", base + ".pb.cc"]
        if services:
            outs += [base + ".grpc.pb.h", base + ".grpc.pb.cc"]
    pkg = native.package_name()
    proto_srcs = [pkg + "/" + s for s in srcs]
    grpc_flags = ""
    if services:
        grpc_flags = "--grpc_out=$(GENDIR) --plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin "
    native.genrule(
        name = name + "_protoc",
        srcs = srcs + [d + "_srcs" for d in deps],
        outs = outs,
        cmd = ("/usr/bin/protoc -I. --cpp_out=$(GENDIR) " + grpc_flags + " ".join(proto_srcs)),
    )
    native.filegroup(name = name + "_srcs", srcs = srcs + [d + "_srcs" for d in deps])
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        deps = deps + ["//third_party/system:grpc", "//third_party/system:protobuf"],
    )
