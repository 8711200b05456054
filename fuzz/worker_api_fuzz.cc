// libFuzzer target: the agent's worker API (agent/worker_service.h) on requests any local
// process can send to the agent's socket.
//
// Input: the first byte picks the method (bits 0-3, modulo the number of methods) and whether the
// call speaks for the running worker (bit 4: its job, generation, rank and token replace the
// request's identity; bit 5 then keeps the request's own token, a wrong one); the rest is the
// request as it arrives on the wire, parsed by the code the agent's server runs
// (grpc::SerializationTraits, after the server's size limit kMaxGrpcServerReceiveBytes). The
// request then goes to a real WorkerService over a real NodeAgent, RankMetrics and LocalWatchdog,
// and the agent's /metrics text is rendered after every call.
//
// The running worker is fuzz/worker_fixture.h's (launched through fuzz/fake_launcher.h: no
// process); its token is the one the agent put into its environment. The agent is never
// connected, so what it forwards goes nowhere, and rendezvous calls never speak for the worker
// (they would wait for the coordinator's answer until their deadline); with any other identity
// they are refused by the identity check like every method.
//
// Checks: a call that does not speak for the worker is never OK and its refusal does not name
// the worker's job (any local process can call), and one that does is never refused for its
// identity.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "agent/worker_service.h"
#include "common/grpc_limits.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/worker_fixture.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/byte_buffer.h"
#include "proto/ringmaster/v1/worker.grpc.pb.h"

namespace {

namespace v1 = ringmaster::v1;

using Fixture = ringmaster::fuzz::WorkerFixture;
using ringmaster::fuzz::kWorkerJob;

template <typename Request>
bool Parse(const uint8_t* data, size_t size, Request* request) {
  if (size > static_cast<size_t>(ringmaster::kMaxGrpcServerReceiveBytes)) return false;
  grpc::Slice slice(data, size);
  grpc::ByteBuffer buffer(&slice, 1);
  return grpc::SerializationTraits<Request>::Deserialize(&buffer, request).ok();
}

// Parses the request, gives it the worker's identity when `as_worker` (keeping its own token
// when `own_token`), and calls `method` on the service.
template <typename Request, typename Response>
bool Call(grpc::Status (v1::WorkerService::Service::*method)(grpc::ServerContext*, const Request*,
                                                             Response*),
          Fixture* f, const uint8_t* data, size_t size, bool as_worker, bool own_token,
          grpc::Status* status) {
  Request request;
  if (!Parse(data, size, &request)) return false;
  if (as_worker) {
    const std::string token = request.worker().token();
    *request.mutable_worker() = f->worker;
    if (own_token) request.mutable_worker()->set_token(token);
  }
  grpc::ServerContext context;
  Response response;
  v1::WorkerService::Service* service = f->service.get();
  *status = (service->*method)(&context, &request, &response);
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture* const f = ringmaster::fuzz::MakeWorkerFixture("worker_api_fuzz");
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  ++data;
  --size;
  bool as_worker = (mode & 0x10) != 0;
  const bool own_token = (mode & 0x20) != 0;
  FUZZ_CHECK(f->node->RunningWorkers() == 1, "the fuzzed calls ended the worker");
  grpc::Status status;
  bool parsed = false;
  using S = v1::WorkerService::Service;
  switch ((mode & 0x0f) % 9) {
    case 0:
      as_worker = false;  // would wait for the coordinator
      parsed = Call(&S::RendezvousSet, f, data, size, false, false, &status);
      break;
    case 1:
      as_worker = false;
      parsed = Call(&S::RendezvousGet, f, data, size, false, false, &status);
      break;
    case 2:
      as_worker = false;
      parsed = Call(&S::RendezvousWait, f, data, size, false, false, &status);
      break;
    case 3:
      parsed = Call(&S::ReportStep, f, data, size, as_worker, own_token, &status);
      break;
    case 4:
      parsed = Call(&S::ReportPhase, f, data, size, as_worker, own_token, &status);
      break;
    case 5:
      parsed = Call(&S::ReportExit, f, data, size, as_worker, own_token, &status);
      break;
    case 6:
      parsed = Call(&S::ReportCollectives, f, data, size, as_worker, own_token, &status);
      break;
    case 7:
      parsed = Call(&S::ReportLinks, f, data, size, as_worker, own_token, &status);
      break;
    case 8:
      parsed = Call(&S::ReportCheckpointFailure, f, data, size, as_worker, own_token, &status);
      break;
  }
  if (!parsed) return 0;
  const bool speaks_for_worker = as_worker && !own_token;
  if (!speaks_for_worker) {
    FUZZ_CHECK(!status.ok(), "a call that does not speak for the running worker was accepted");
    FUZZ_CHECK(
        status.error_message().find(kWorkerJob) == std::string::npos,
        "a refusal tells a caller without the token of the job here: " + status.error_message());
  } else {
    FUZZ_CHECK(status.error_code() != grpc::StatusCode::FAILED_PRECONDITION &&
                   status.error_code() != grpc::StatusCode::PERMISSION_DENIED,
               "the running worker's own call was refused: " + status.error_message());
  }
  // (UNIMPLEMENTED: a method of worker.proto the agent does not serve, answered by gRPC's base.)
  if (!status.ok() && status.error_code() != grpc::StatusCode::UNIMPLEMENTED) {
    FUZZ_CHECK(!status.error_message().empty(),
               absl::StrCat("a refusal without a message, code ", status.error_code()));
  }
  ringmaster::fuzz::RenderOutputs(f);
  return 0;
}
