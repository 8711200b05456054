// libFuzzer target: the agent's report socket (agent/report_socket.h) on datagrams any local
// process can send it: ParseReportDatagram (size, UTF-8, JSON nesting, protobuf's JSON parser),
// then WorkerService::HandleReport, as the socket's reader runs them.
//
// Input: the first byte says whether the report speaks for the running worker (bit 0: its job,
// generation, rank and token replace the identity of the request the report carries, of every
// step of a "steps" report; bit 1 then keeps the report's own token, a wrong one); the rest is the
// datagram. The worker, agent, metrics and watchdog are fuzz/worker_fixture.h's; the agent's
// /metrics text is rendered after every report.
//
// Checks: a datagram refused by the parser is INVALID_ARGUMENT "report: ..."; a parsed report
// prints as JSON that protobuf's parser reads back as the same report (read again without the
// datagram's limits: escapes and enum names make the printed form longer than what was sent); a
// report that does not speak for the worker is never accepted and its refusal does not name the
// worker's job; one that does is never refused for its identity; every refusal has a message.

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "agent/report_socket.h"
#include "agent/worker_service.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/worker_fixture.h"
#include "google/protobuf/util/json_util.h"
#include "proto/ringmaster/v1/worker.pb.h"

namespace {

namespace v1 = ringmaster::v1;
using ringmaster::fuzz::kWorkerJob;
using ringmaster::fuzz::WorkerFixture;

// The identity of the request `report` carries (of each step of a "steps" report), made the
// worker's; its own token kept when `own_token`. False when the report carries none.
bool SpeakFor(const v1::WorkerIdentity& worker, bool own_token, v1::WorkerReport* report) {
  auto stamp = [&](v1::WorkerIdentity* identity) {
    const std::string token = identity->token();
    *identity = worker;
    if (own_token) identity->set_token(token);
  };
  switch (report->report_case()) {
    case v1::WorkerReport::kStep:
      stamp(report->mutable_step()->mutable_worker());
      return true;
    case v1::WorkerReport::kPhase:
      stamp(report->mutable_phase()->mutable_worker());
      return true;
    case v1::WorkerReport::kExit:
      stamp(report->mutable_exit()->mutable_worker());
      return true;
    case v1::WorkerReport::kCollectives:
      stamp(report->mutable_collectives()->mutable_worker());
      return true;
    case v1::WorkerReport::kCheckpointFailure:
      stamp(report->mutable_checkpoint_failure()->mutable_worker());
      return true;
    case v1::WorkerReport::kSteps:
      for (v1::ReportStepRequest& step : *report->mutable_steps()->mutable_steps()) {
        stamp(step.mutable_worker());
      }
      return report->steps().steps_size() > 0;
    case v1::WorkerReport::REPORT_NOT_SET:
      return false;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static WorkerFixture* const f = ringmaster::fuzz::MakeWorkerFixture("report_datagram_fuzz");
  if (size == 0) return 0;
  const bool as_worker = (data[0] & 0x01) != 0;
  const bool own_token = (data[0] & 0x02) != 0;
  const absl::string_view datagram(reinterpret_cast<const char*>(data) + 1, size - 1);
  FUZZ_CHECK(f->node->RunningWorkers() == 1, "the fuzzed reports ended the worker");

  absl::StatusOr<v1::WorkerReport> report = ringmaster::agent::ParseReportDatagram(datagram);
  if (!report.ok()) {
    FUZZ_CHECK(report.status().code() == absl::StatusCode::kInvalidArgument &&
                   absl::StartsWith(report.status().message(), "report: "),
               "a refused datagram's error: " + report.status().ToString());
    return 0;
  }
  // What the parser read prints, and reads back, as the same report.
  std::string json;
  FUZZ_CHECK(google::protobuf::util::MessageToJsonString(*report, &json).ok(),
             "a parsed report does not print as JSON");
  v1::WorkerReport again;
  const auto reread = google::protobuf::util::JsonStringToMessage(json, &again);
  FUZZ_CHECK(reread.ok(), "a parsed report's JSON is refused: " + reread.ToString() + "\n  " +
                              json.substr(0, 500));
  FUZZ_CHECK(ringmaster::fuzz::DeterministicBytes(again) ==
                 ringmaster::fuzz::DeterministicBytes(*report),
             "a parsed report's JSON reads back as another report: " + json.substr(0, 500));

  const bool speaks_for_worker = as_worker && !own_token && SpeakFor(f->worker, false, &*report);
  if (as_worker && own_token) SpeakFor(f->worker, true, &*report);
  const absl::Status status = f->service->HandleReport(*report);
  if (!speaks_for_worker) {
    FUZZ_CHECK(!status.ok(), "a report that does not speak for the running worker was accepted");
    FUZZ_CHECK(status.message().find(kWorkerJob) == absl::string_view::npos,
               "a refusal tells a sender without the token of the job here: " +
                   std::string(status.message()));
  } else {
    FUZZ_CHECK(status.code() != absl::StatusCode::kFailedPrecondition &&
                   status.code() != absl::StatusCode::kPermissionDenied,
               "the running worker's own report was refused: " + status.ToString());
  }
  if (!status.ok()) {
    FUZZ_CHECK(!status.message().empty(),
               absl::StrCat("a refusal without a message, code ", status.code()));
  }
  ringmaster::fuzz::RenderOutputs(f);
  return 0;
}
