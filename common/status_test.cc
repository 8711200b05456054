#include "common/status.h"

#include "common/grpc_status.h"
#include "gtest/gtest.h"

namespace ringmaster {
namespace {

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return FieldError("x", "must be even");
  return x / 2;
}

absl::Status Quarter(int x, int* out) {
  ASSIGN_OR_RETURN(int half, Half(x));
  ASSIGN_OR_RETURN(*out, Half(half));
  RETURN_IF_ERROR(absl::OkStatus());
  return absl::OkStatus();
}

TEST(StatusTest, FieldErrorNamesFieldAndRule) {
  absl::Status s = FieldError("parallelism.tensor", "must divide devices_per_node");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "parallelism.tensor: must divide devices_per_node");
}

TEST(StatusTest, MacrosPropagateErrors) {
  int out = 0;
  EXPECT_TRUE(Quarter(8, &out).ok());
  EXPECT_EQ(out, 2);
  EXPECT_EQ(Quarter(6, &out).message(), "x: must be even");
  EXPECT_EQ(Quarter(3, &out).code(), absl::StatusCode::kInvalidArgument);
}

TEST(StatusTest, AnnotateKeepsCodeAndPrefixesMessage) {
  EXPECT_TRUE(Annotate(absl::OkStatus(), "ctx").ok());
  absl::Status s = Annotate(absl::NotFoundError("no job"), "GetJob");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "GetJob: no job");
}

TEST(StatusTest, ExitCodes) {
  EXPECT_EQ(ExitCodeFor(absl::OkStatus()), kExitOk);
  EXPECT_EQ(ExitCodeFor(absl::UnavailableError("peer gone")), kExitRetryable);
  EXPECT_EQ(ExitCodeFor(absl::DeadlineExceededError("t")), kExitRetryable);
  EXPECT_EQ(ExitCodeFor(absl::InvalidArgumentError("bad")), kExitFatal);
  EXPECT_EQ(ExitCodeFor(absl::NotFoundError("file")), kExitFatal);
}

TEST(GrpcStatusTest, RoundTripsEveryCode) {
  for (int code = 0; code <= 16; ++code) {
    absl::Status s(static_cast<absl::StatusCode>(code), code == 0 ? "" : "msg");
    grpc::Status g = ToGrpcStatus(s);
    EXPECT_EQ(static_cast<int>(g.error_code()), code);
    EXPECT_EQ(FromGrpcStatus(g), s);
  }
  EXPECT_EQ(ToGrpcStatus(FieldError("name", "empty")).error_message(), "name: empty");
}

}  // namespace
}  // namespace ringmaster
