#include "common/proto_edge.h"

#include <functional>
#include <map>
#include <set>
#include <string>

#include "common/testing/wire_bytes.h"
#include "gtest/gtest.h"
#include "proto/ringmaster/v1/agent.pb.h"
#include "proto/ringmaster/v1/coordinator.pb.h"
#include "proto/ringmaster/v1/job.pb.h"
#include "proto/ringmaster/v1/worker.pb.h"

namespace ringmaster {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using ::ringmaster::testing::LengthDelimited;
using ::ringmaster::testing::NestedUnknownGroups;

grpc::ByteBuffer Buffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

// A SubmitJobRequest whose spec carries `levels` nested unknown groups.
std::string PoisonedSubmit(int levels) {
  v1::JobSpec spec;
  spec.set_name("poison");
  return LengthDelimited(v1::SubmitJobRequest::kSpecFieldNumber,
                         spec.SerializeAsString() + NestedUnknownGroups(levels));
}

// The deepest chain of message fields below `d`; fails the test on a cycle.
int Depth(const Descriptor* d, std::set<const Descriptor*>* path,
          std::map<const Descriptor*, int>* memo) {
  if (auto it = memo->find(d); it != memo->end()) return it->second;
  if (!path->insert(d).second) {
    ADD_FAILURE() << d->full_name() << " is recursive";
    return 0;
  }
  int deepest = 0;
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    if (f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) continue;
    deepest = std::max(deepest, 1 + Depth(f->message_type(), path, memo));
  }
  path->erase(d);
  (*memo)[d] = deepest;
  return deepest;
}

// What proto_edge.h promises: no Ringmaster message is recursive, so without unknown fields a
// message's nesting is bounded by the schema, far below both parsers' limits.
TEST(ProtoEdgeTest, NoRingmasterMessageIsRecursiveAndNestingIsShallow) {
  std::map<const Descriptor*, int> memo;
  int deepest = 0;
  for (const Descriptor* top :
       {v1::JobStatus::descriptor(), v1::ListJobsRequest::descriptor(),
        v1::AgentMessage::descriptor(), v1::ReportStepRequest::descriptor()}) {
    const google::protobuf::FileDescriptor* file = top->file();
    for (int i = 0; i < file->message_type_count(); ++i) {
      std::set<const Descriptor*> path;
      deepest = std::max(deepest, Depth(file->message_type(i), &path, &memo));
    }
  }
  EXPECT_GT(deepest, 2);
  EXPECT_LT(deepest, kMaxIncomingNesting / 2);
}

TEST(ProtoEdgeTest, NestedUnknownGroupsDeeperThanTheLimitAreRefused) {
  v1::SubmitJobRequest request;
  // protobuf alone takes 99 levels (the attack); the edge does not.
  ASSERT_TRUE(request.ParseFromString(PoisonedSubmit(99)));
  absl::Status status = ParseIncoming(Buffer(PoisonedSubmit(99)), &request);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("request: not a valid ringmaster.v1.SubmitJobRequest"),
            std::string::npos)
      << status;
}

TEST(ProtoEdgeTest, ShallowUnknownFieldsAreDropped) {
  v1::SubmitJobRequest request;
  ASSERT_TRUE(ParseIncoming(Buffer(PoisonedSubmit(10)), &request).ok());
  EXPECT_EQ(request.spec().name(), "poison");
  v1::SubmitJobRequest clean;
  clean.mutable_spec()->set_name("poison");
  EXPECT_EQ(request.SerializeAsString(), clean.SerializeAsString());
}

TEST(ProtoEdgeTest, SanitizeSaysWhetherAnythingWasDropped) {
  v1::JobStatus status;
  status.set_job_id("a");
  EXPECT_FALSE(SanitizeIncoming(&status));
  ASSERT_TRUE(status.mutable_spec()->mutable_trainer()->MergeFromString(NestedUnknownGroups(5)));
  EXPECT_TRUE(SanitizeIncoming(&status));
  EXPECT_EQ(status.spec().trainer().ByteSizeLong(), 0u);
  EXPECT_EQ(status.job_id(), "a");
}

TEST(ProtoEdgeTest, GarbageIsInvalidArgumentWithAMessage) {
  v1::GetJobRequest request;
  for (const std::string& garbage :
       {std::string("\xff\xff\xff\xff\xff", 5), std::string("\x0a\x7f", 2), std::string("\x07")}) {
    absl::Status status = ParseIncoming(Buffer(garbage), &request);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("ringmaster.v1.GetJobRequest"), std::string::npos) << status;
  }
  EXPECT_TRUE(ParseIncoming(Buffer(""), &request).ok());  // all fields at their defaults
}

TEST(ProtoEdgeTest, AJsonFormOverTheLimitIsRefusedNamingTheField) {
  v1::JobSpec spec;
  spec.set_name("big");
  EXPECT_TRUE(CheckJsonSize(spec, "spec", kMaxJobSpecJsonBytes).ok());
  (*spec.mutable_trainer()->mutable_env())["BLOB"] = std::string(kMaxJobSpecJsonBytes, 'x');
  absl::Status status = CheckJsonSize(spec, "spec", kMaxJobSpecJsonBytes);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("spec: must be at most 65536 bytes (64 KiB) as JSON, got "),
            std::string::npos)
      << status;
}

TEST(ProtoEdgeTest, SerializeOutgoingRoundTrips) {
  v1::GetJobRequest request;
  request.set_job_id("abc");
  v1::GetJobRequest back;
  ASSERT_TRUE(ParseIncoming(SerializeOutgoing(request), &back).ok());
  EXPECT_EQ(back.job_id(), "abc");
}

}  // namespace
}  // namespace ringmaster
