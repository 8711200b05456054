"""The one exception type of the ringmaster package."""

from __future__ import annotations

import grpc


class RingmasterError(Exception):
    """A call to the coordinator failed, or a job spec was refused before it was sent.

    Attributes:
        code: the gRPC status code (``grpc.StatusCode``): INVALID_ARGUMENT for a refused spec
            (the message names the field), NOT_FOUND for an unknown job id, UNAUTHENTICATED for a
            missing or wrong token, PERMISSION_DENIED for someone else's job, UNAVAILABLE when the
            coordinator cannot be reached, DEADLINE_EXCEEDED when a call timed out.
        message: the coordinator's message (one line per problem for a refused spec).
    """

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__("%s: %s" % (code.name, message))
        self.code = code
        self.message = message


class JobSpecError(RingmasterError, ValueError):
    """A job spec (dict or YAML file) with an unknown key or a value of the wrong type, refused
    before anything is sent. ``code`` is INVALID_ARGUMENT; ``message`` has one line per problem,
    "FILE[:LINE:COLUMN]: FIELD: what", as ``ringctl submit`` prints them."""

    def __init__(self, problems: "list[str]") -> None:
        super().__init__(grpc.StatusCode.INVALID_ARGUMENT, "\n".join(problems))
        self.problems = list(problems)


def from_rpc_error(error: grpc.RpcError, coordinator: str) -> RingmasterError:
    """The RingmasterError for a failed call (an UNAVAILABLE names the coordinator's address)."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = error.details() if hasattr(error, "details") else str(error)
    if code is None:
        code = grpc.StatusCode.UNKNOWN
    if code == grpc.StatusCode.UNAVAILABLE:
        details = "coordinator %s unreachable: %s" % (coordinator, details)
    return RingmasterError(code, details or "")
