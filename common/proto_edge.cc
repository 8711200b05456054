#include "common/proto_edge.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "grpcpp/support/proto_buffer_reader.h"

namespace ringmaster {

bool SanitizeIncoming(google::protobuf::Message* message) {
  const size_t before = message->ByteSizeLong();
  message->DiscardUnknownFields();  // recursive: every message field, repeated and map ones too
  return message->ByteSizeLong() != before;
}

absl::Status ParseIncoming(const grpc::ByteBuffer& bytes, google::protobuf::Message* message) {
  message->Clear();
  const std::string what = absl::StrCat("not a valid ", message->GetDescriptor()->full_name(),
                                        " (malformed protobuf, or nested deeper than ",
                                        kMaxIncomingNesting, " levels)");
  if (!bytes.Valid()) return FieldError("request", what);
  grpc::ByteBuffer copy(bytes);  // shares the slices; the reader needs a mutable buffer
  grpc::ProtoBufferReader reader(&copy);
  google::protobuf::io::CodedInputStream input(&reader);
  input.SetRecursionLimit(kMaxIncomingNesting);
  if (!message->ParseFromCodedStream(&input) || !input.ConsumedEntireMessage()) {
    message->Clear();
    return FieldError("request", what);
  }
  SanitizeIncoming(message);
  return absl::OkStatus();
}

grpc::ByteBuffer SerializeOutgoing(const google::protobuf::Message& message) {
  grpc::ByteBuffer buffer;
  bool own = false;
  // Fails only for a message over 2 GiB, which nothing here builds (the limits are far below).
  (void)grpc::SerializationTraits<google::protobuf::Message>::Serialize(message, &buffer, &own);
  return buffer;
}

absl::Status CheckJsonSize(const google::protobuf::Message& message, absl::string_view field,
                           size_t limit) {
  std::string json;
  if (!google::protobuf::util::MessageToJsonString(message, &json).ok()) {
    return FieldError(field, "has no JSON form");
  }
  if (json.size() > limit) {
    return FieldError(field, absl::StrCat("must be at most ", limit, " bytes (", limit / 1024,
                                          " KiB) as JSON, got ", json.size()));
  }
  return absl::OkStatus();
}

}  // namespace ringmaster
