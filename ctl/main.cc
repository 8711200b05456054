// ringctl: the Ringmaster command-line client (kubectl-like).
//
// The coordinator address comes from --coordinator, else $RINGMASTER_COORDINATOR; the bearer
// token from --token, else $RINGMASTER_TOKEN.
// Exit codes: 0 success; 1 the command failed (RPC error, job did not succeed with --wait);
// 2 bad usage or a bad job file.
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/build_info.h"
#include "common/flags.h"
#include "common/grpc_health_client.h"
#include "common/status.h"
#include "ctl/client.h"
#include "ctl/commands.h"

ABSL_FLAG(std::string, coordinator, "",
          "Coordinator address HOST:PORT (default: $RINGMASTER_COORDINATOR).");
ABSL_FLAG(std::string, token, "", "Bearer token (default: $RINGMASTER_TOKEN).");
ABSL_FLAG(bool, insecure, false, "Talk to the coordinator in plaintext (local development).");
ABSL_FLAG(std::string, tls_ca, "", "PEM CA certificate that signed the coordinator's certificate.");
ABSL_FLAG(std::string, tls_cert, "", "PEM client certificate, for mutual TLS.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of the client certificate.");
ABSL_FLAG(double, timeout, 10, "Seconds to wait for the coordinator on each call.");
ABSL_FLAG(std::string, f, "", "Job file (YAML) for submit and plan.");
ABSL_FLAG(bool, wait, false,
          "submit: wait for the job to end; fail unless it succeeds. check-links: wait for the "
          "check's result and print it; fail if it names a slow or corrupting link.");
ABSL_FLAG(std::string, request_id, "", "submit: idempotency key; a retry returns the same job.");
ABSL_FLAG(double, wait_timeout, 300,
          "check-links --wait: seconds to wait for the result (the ranks run the check after "
          "their next step).");
ABSL_FLAG(std::string, o, "table", "get job: output format, table, json or yaml.");
ABSL_FLAG(std::string, reason, "",
          "cancel: reason recorded in the job's events; cordon, drain: reason kept with the "
          "cordon.");
ABSL_FLAG(std::string, state, "",
          "get jobs: only jobs in these states, comma-separated (pending, running, restarting, "
          "succeeded, failed, cancelled).");
ABSL_FLAG(int, rank, 0, "logs: the global rank whose log to show.");
ABSL_FLAG(bool, follow, false, "logs: keep printing new output until the rank exits.");

namespace ringmaster::ctl {
namespace {

constexpr char kUsage[] =
    "ringctl: the Ringmaster command-line client.\n"
    "\n"
    "usage: ringctl [flags] COMMAND [ARGS]\n"
    "\n"
    "commands:\n"
    "  submit -f job.yaml [--wait]   submit a job (with --wait: follow it to the end)\n"
    "  get jobs [--state=S,...]      list jobs, newest first (all of them, or those in\n"
    "                                the states named)\n"
    "  get job ID [-o json|yaml]     one job\n"
    "  describe job ID               assignments, groups, events, planner reasoning\n"
    "  cancel ID [--reason=TEXT]     cancel a job and stop its workers\n"
    "  check-links ID [--wait]       have a running job's ranks measure their links again\n"
    "                                (--wait: print the result; exit 1 if a link is slow)\n"
    "  watch ID                      live events and progress\n"
    "  logs ID --rank N [--follow]   a rank's stdout and stderr\n"
    "  nodes                         registered nodes (and cordoned ones)\n"
    "  cordon NODE [--reason=TEXT]   no new placements on the node (admin)\n"
    "  drain NODE [--reason=TEXT]    cordon, and restart its running jobs elsewhere (admin)\n"
    "  uncordon NODE                 placements on the node again (admin)\n"
    "  release-node NODE             let another agent identity register the node's name\n"
    "                                (admin; docs/security.md)\n"
    "  plan -f job.yaml              what the planner would choose, without submitting\n"
    "  health                        is the coordinator serving?\n"
    "  version                       ringctl's version\n";

std::string FromFlagOrEnv(const std::string& flag, const char* env) {
  if (!flag.empty()) return flag;
  const char* value = std::getenv(env);
  return value == nullptr ? "" : value;
}

absl::StatusOr<Client> Connect() {
  ClientOptions options;
  options.coordinator = FromFlagOrEnv(absl::GetFlag(FLAGS_coordinator), "RINGMASTER_COORDINATOR");
  options.token = FromFlagOrEnv(absl::GetFlag(FLAGS_token), "RINGMASTER_TOKEN");
  options.insecure = absl::GetFlag(FLAGS_insecure);
  options.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  options.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  options.tls_key = absl::GetFlag(FLAGS_tls_key);
  options.timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout));
  return Client::Connect(options);
}

absl::Status Health(const Client& client) {
  auto status = CheckHealth(client.channel(), "", absl::Seconds(absl::GetFlag(FLAGS_timeout)));
  if (!status.ok()) {
    return absl::Status(status.status().code(),
                        absl::StrCat("coordinator unreachable: ", status.status().message()));
  }
  if (*status != ServingStatus::kServing) return absl::UnavailableError("coordinator not serving");
  std::cout << "coordinator is SERVING\n";
  return absl::OkStatus();
}

bool Matches(const std::vector<std::string>& args, const std::vector<std::string>& shape) {
  if (args.size() != shape.size() + 1) return false;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] != "ID" && shape[i] != args[i + 1]) return false;
  }
  return true;
}

// Runs the command in args (args[0] is the program). Sets *usage_error for bad usage.
absl::Status Run(const std::vector<std::string>& args, bool* usage_error) {
  static const std::vector<std::vector<std::string>> kShapes = {
      {"version"},      {"health"},         {"submit"},           {"plan"},
      {"nodes"},        {"get", "jobs"},    {"get", "job", "ID"}, {"describe", "job", "ID"},
      {"cancel", "ID"}, {"watch", "ID"},    {"logs", "ID"},       {"cordon", "ID"},
      {"drain", "ID"},  {"uncordon", "ID"}, {"check-links", "ID"}, {"release-node", "ID"}};
  const std::vector<std::string>* shape = nullptr;
  for (const auto& s : kShapes) {
    if (Matches(args, s)) shape = &s;
  }
  if (shape == nullptr) {
    *usage_error = true;
    if (args.size() < 2) return absl::InvalidArgumentError("a command is required");
    return absl::InvalidArgumentError(
        absl::StrCat("unknown command \"", absl::StrJoin(args.begin() + 1, args.end(), " "), "\""));
  }
  const std::string& command = (*shape)[0];
  if (command == "version") {
    std::cout << "ringctl " << kVersion << "\n";
    return absl::OkStatus();
  }
  absl::StatusOr<Client> client_or = Connect();
  if (!client_or.ok()) return client_or.status();
  Client client = *std::move(client_or);
  std::ostream& out = std::cout;
  if (command == "health") return Health(client);
  if (command == "submit") {
    return Submit(client, absl::GetFlag(FLAGS_f), absl::GetFlag(FLAGS_wait),
                  absl::GetFlag(FLAGS_request_id), out);
  }
  if (command == "plan") return Plan(client, absl::GetFlag(FLAGS_f), out);
  if (command == "nodes") return Nodes(client, out);
  if (command == "get" && (*shape)[1] == "jobs") {
    return GetJobs(client, absl::GetFlag(FLAGS_state), out);
  }
  if (command == "get") return GetJob(client, args[3], absl::GetFlag(FLAGS_o), out);
  if (command == "describe") return Describe(client, args[3], out);
  if (command == "cancel") return Cancel(client, args[2], absl::GetFlag(FLAGS_reason), out);
  if (command == "check-links") {
    return CheckLinks(client, args[2], absl::GetFlag(FLAGS_wait),
                      absl::Seconds(absl::GetFlag(FLAGS_wait_timeout)), out);
  }
  if (command == "cordon" || command == "drain" || command == "uncordon") {
    const v1::NodeAction action = command == "cordon"  ? v1::NODE_ACTION_CORDON
                                  : command == "drain" ? v1::NODE_ACTION_DRAIN
                                                       : v1::NODE_ACTION_UNCORDON;
    return UpdateNode(client, args[2], action, absl::GetFlag(FLAGS_reason), out);
  }
  if (command == "release-node") return ReleaseNode(client, args[2], out);
  if (command == "logs") {
    return Logs(client, args[2], absl::GetFlag(FLAGS_rank), absl::GetFlag(FLAGS_follow), out);
  }
  return Watch(client, args[2], out);
}

int Main(int argc, char** argv) {
  std::vector<std::string> args;
  absl::Status status = InitBinary(argc, argv, kUsage, &args);
  if (!status.ok()) {
    std::cerr << "ringctl: " << status.message() << "\n";
    return 2;
  }
  bool usage_error = false;
  status = Run(args, &usage_error);
  if (status.ok()) return 0;
  std::cerr << "ringctl: " << status.message() << "\n";
  if (usage_error) {
    std::cerr << "\n" << kUsage;
    return 2;
  }
  // A bad job file is the user's input to fix, like bad usage.
  return IsInputError(status) ? 2 : 1;
}

}  // namespace
}  // namespace ringmaster::ctl

int main(int argc, char** argv) { return ringmaster::ctl::Main(argc, argv); }
