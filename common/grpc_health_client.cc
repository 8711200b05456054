#include "common/grpc_health_client.h"

#include "common/grpc_status.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/unknown_field_set.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/support/byte_buffer.h"

namespace ringmaster {

absl::StatusOr<ServingStatus> CheckHealth(const std::shared_ptr<grpc::Channel>& channel,
                                          const std::string& service, absl::Duration timeout) {
  // HealthCheckRequest { string service = 1; }
  std::string request;
  if (!service.empty()) {
    google::protobuf::io::StringOutputStream stream(&request);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.WriteTag((1 << 3) | 2);
    coded.WriteVarint32(service.size());
    coded.WriteString(service);
  }
  grpc::Slice slice(request);
  grpc::ByteBuffer request_buffer(&slice, 1);

  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  grpc::CompletionQueue cq;
  auto call = stub.PrepareUnaryCall(&context, "/grpc.health.v1.Health/Check", request_buffer, &cq);
  call->StartCall();
  grpc::ByteBuffer reply;
  grpc::Status status;
  call->Finish(&reply, &status, nullptr);
  void* tag;
  bool ok;
  if (!cq.Next(&tag, &ok)) return absl::InternalError("completion queue shut down");
  if (!status.ok()) return FromGrpcStatus(status);

  std::string bytes;
  std::vector<grpc::Slice> slices;
  if (!reply.Dump(&slices).ok()) return absl::InternalError("unreadable health reply");
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  // HealthCheckResponse { ServingStatus status = 1; }; an absent field means UNKNOWN (0).
  google::protobuf::UnknownFieldSet fields;
  if (!fields.ParseFromString(bytes)) return absl::InternalError("unparseable health reply");
  for (int i = 0; i < fields.field_count(); ++i) {
    if (fields.field(i).number() == 1 &&
        fields.field(i).type() == google::protobuf::UnknownField::TYPE_VARINT) {
      return static_cast<ServingStatus>(fields.field(i).varint());
    }
  }
  return ServingStatus::kUnknown;
}

}  // namespace ringmaster
