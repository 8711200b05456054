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
// The running worker is one the agent launched at start-up through fuzz/fake_launcher.h (no
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
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "agent/node_agent.h"
#include "agent/worker_service.h"
#include "common/clock.h"
#include "common/grpc_limits.h"
#include "fuzz/fake_launcher.h"
#include "fuzz/fuzz_agent.h"
#include "fuzz/fuzz_check.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/byte_buffer.h"
#include "proto/ringmaster/v1/worker.grpc.pb.h"

namespace {

namespace agent = ringmaster::agent;
namespace v1 = ringmaster::v1;

constexpr char kJob[] = "fuzz-job";
constexpr int64_t kGeneration = 3;
constexpr int kRank = 1;

struct Fixture {
  ringmaster::fuzz::AgentParts parts;  // what the node is built from
  std::unique_ptr<agent::NodeAgent> node;
  std::unique_ptr<agent::WorkerService> service;
  ringmaster::fuzz::FakeLauncher* launcher = nullptr;
  v1::WorkerIdentity worker;  // the running worker's identity, token included
};

// Built once; lives until the process exits (its threads with it).
Fixture* MakeFixture() {
  auto* f = new Fixture;
  ringmaster::fuzz::InitAgentParts("worker_api_fuzz", "cpu:2", &f->parts);
  f->node = std::make_unique<agent::NodeAgent>(
      f->parts.options, f->parts.metrics.get(), f->parts.watchdog.get(), ringmaster::Clock::Real(),
      ringmaster::fuzz::FakeLauncher::Factory(&f->launcher));
  f->service = std::make_unique<agent::WorkerService>(f->node.get(), f->parts.metrics.get(),
                                                      f->parts.watchdog.get());

  v1::CoordinatorMessage launch;
  v1::LaunchWorkers* l = launch.mutable_launch();
  l->mutable_job()->set_job_id(kJob);
  l->mutable_job()->set_generation(kGeneration);
  l->mutable_spec()->set_name("fuzz");
  l->mutable_spec()->mutable_trainer()->mutable_command()->add_argv("/nonexistent/worker");
  v1::RankAssignment* a = l->add_assignments();
  a->set_rank(kRank);
  a->set_local_device(1);
  l->set_world_size(2);
  l->set_master_addr("127.0.0.1");
  f->node->OnCommand(launch);
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  std::string token;
  while (token.empty()) {
    for (const auto& [pid, spec] : f->launcher->Specs()) {
      auto it = spec.env.find("RINGMASTER_WORKER_TOKEN");
      if (it != spec.env.end()) token = it->second;
    }
    FUZZ_CHECK(!token.empty() || absl::Now() < deadline, "the agent did not launch the worker");
    if (token.empty()) absl::SleepFor(absl::Milliseconds(1));
  }
  f->worker.set_job_id(kJob);
  f->worker.set_generation(kGeneration);
  f->worker.set_rank(kRank);
  f->worker.set_token(token);
  return f;
}

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
  static Fixture* const f = MakeFixture();
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
        status.error_message().find(kJob) == std::string::npos,
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
  // What Prometheus would scrape, and what the agent would send the coordinator.
  (void)f->parts.registry.RenderText();
  f->parts.metrics->Refresh();
  (void)f->parts.metrics->TakeSummaries();
  return 0;
}
