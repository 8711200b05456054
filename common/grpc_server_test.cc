// Checks that every Ringmaster gRPC server answers the standard health service and server
// reflection, using only a generic stub and the wire format (no generated client for either).
#include "common/grpc_server.h"

#include "common/grpc_health_client.h"
#include "google/protobuf/descriptor.pb.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/unknown_field_set.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/byte_buffer.h"
#include "gtest/gtest.h"
#include "proto/ringmaster/v1/coordinator.grpc.pb.h"

namespace ringmaster {
namespace {

using google::protobuf::UnknownField;
using google::protobuf::UnknownFieldSet;

grpc::ByteBuffer ToBuffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

std::string FromBuffer(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

// Encodes a message that has a single string field.
std::string StringField(int number, const std::string& value) {
  std::string out;
  google::protobuf::io::StringOutputStream stream(&out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.WriteTag((number << 3) | 2);
  coded.WriteVarint32(value.size());
  coded.WriteString(value);
  return out;
}

const UnknownField* FindField(const UnknownFieldSet& set, int number) {
  for (int i = 0; i < set.field_count(); ++i) {
    if (set.field(i).number() == number) return &set.field(i);
  }
  return nullptr;
}

void Await(grpc::CompletionQueue* cq) {
  void* tag;
  bool ok;
  ASSERT_TRUE(cq->Next(&tag, &ok));
}

class GrpcServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GrpcServerOptions options;
    options.address = "127.0.0.1:0";
    options.credentials = grpc::InsecureServerCredentials();
    options.services = {&job_service_};
    auto server = GrpcServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    ASSERT_GT(server_->port(), 0);
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                                   grpc::InsecureChannelCredentials());
  }

  // One request/response exchange on the reflection stream.
  std::string Reflect(const std::string& request) {
    grpc::GenericStub stub(channel_);
    grpc::ClientContext context;
    grpc::CompletionQueue cq;
    auto call = stub.PrepareCall(
        &context, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
    call->StartCall(nullptr);
    Await(&cq);
    call->Write(ToBuffer(request), nullptr);
    Await(&cq);
    call->WritesDone(nullptr);
    Await(&cq);
    grpc::ByteBuffer reply;
    call->Read(&reply, nullptr);
    Await(&cq);
    grpc::Status status;
    call->Finish(&status, nullptr);
    Await(&cq);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return FromBuffer(reply);
  }

  v1::JobService::Service job_service_;  // Every method answers UNIMPLEMENTED.
  std::unique_ptr<GrpcServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(GrpcServerTest, HealthServiceAnswersServing) {
  auto status = CheckHealth(channel_, "");
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, ServingStatus::kServing);
  server_->SetServing("", false);
  status = CheckHealth(channel_, "");
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, ServingStatus::kNotServing);
}

TEST_F(GrpcServerTest, HealthServiceKnowsNamedServices) {
  EXPECT_EQ(CheckHealth(channel_, "ringmaster.v1.JobService").status().code(),
            absl::StatusCode::kNotFound);
  server_->SetServing("ringmaster.v1.JobService", true);
  auto status = CheckHealth(channel_, "ringmaster.v1.JobService");
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, ServingStatus::kServing);
}

TEST(GrpcHealthClientTest, UnreachableServerIsUnavailable) {
  auto channel = grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials());
  EXPECT_EQ(CheckHealth(channel, "", absl::Seconds(2)).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(GrpcServerTest, ReflectionListsServices) {
  UnknownFieldSet reply;
  ASSERT_TRUE(reply.ParseFromString(Reflect(StringField(7, "*"))));  // list_services
  const UnknownField* list = FindField(reply, 6);                    // list_services_response
  ASSERT_NE(list, nullptr);
  UnknownFieldSet services;
  ASSERT_TRUE(services.ParseFromString(list->length_delimited()));
  std::vector<std::string> names;
  for (int i = 0; i < services.field_count(); ++i) {
    UnknownFieldSet service;
    ASSERT_TRUE(service.ParseFromString(services.field(i).length_delimited()));
    names.push_back(FindField(service, 1)->length_delimited());
  }
  EXPECT_NE(std::find(names.begin(), names.end(), "ringmaster.v1.JobService"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "grpc.health.v1.Health"), names.end());
}

TEST_F(GrpcServerTest, ReflectionServesOurProtoFiles) {
  UnknownFieldSet reply;
  // file_containing_symbol
  ASSERT_TRUE(reply.ParseFromString(Reflect(StringField(4, "ringmaster.v1.JobService"))));
  const UnknownField* files = FindField(reply, 4);  // file_descriptor_response
  ASSERT_NE(files, nullptr);
  UnknownFieldSet file_list;
  ASSERT_TRUE(file_list.ParseFromString(files->length_delimited()));
  google::protobuf::FileDescriptorProto file;
  ASSERT_TRUE(file.ParseFromString(FindField(file_list, 1)->length_delimited()));
  EXPECT_EQ(file.name(), "proto/ringmaster/v1/coordinator.proto");
  ASSERT_GE(file.service_size(), 1);
  EXPECT_EQ(file.service(0).name(), "JobService");
}

TEST_F(GrpcServerTest, UnimplementedMethodsSayUnimplemented) {
  auto stub = v1::JobService::NewStub(channel_);
  grpc::ClientContext context;
  v1::SubmitJobResponse response;
  grpc::Status status = stub->SubmitJob(&context, v1::SubmitJobRequest(), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED);
}

TEST(GrpcServerStartTest, RequiresCredentials) {
  GrpcServerOptions options;
  options.address = "127.0.0.1:0";
  EXPECT_EQ(GrpcServer::Start(options).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(GrpcServerStartTest, PlaintextMustBeAskedFor) {
  auto creds = MakeServerCredentials(ServerTlsOptions{}, /*insecure=*/false);
  EXPECT_EQ(creds.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MakeServerCredentials(ServerTlsOptions{}, /*insecure=*/true).ok());
}

TEST(GrpcServerStartTest, MissingCertificateFileNamesTheFlag) {
  ServerTlsOptions tls{"", "/nonexistent/cert.pem", "/nonexistent/key.pem"};
  auto creds = MakeServerCredentials(tls, false);
  EXPECT_EQ(creds.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(creds.status().message().find("--tls_cert"), std::string::npos);
}

}  // namespace
}  // namespace ringmaster
