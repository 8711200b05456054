// ringctl: the Ringmaster command-line client.
//
// Commands available now: `health` (is the coordinator serving?) and `version`. The job commands
// (submit, get, describe, cancel, watch, nodes, plan, logs) arrive with the coordinator's JobService.
//
// The coordinator address comes from --coordinator, else $RINGMASTER_COORDINATOR.
// Exit codes: 0 success, 1 the command failed, 2 bad usage.
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "common/build_info.h"
#include "common/flags.h"
#include "common/grpc_client.h"
#include "common/grpc_health_client.h"
#include "common/status.h"

ABSL_FLAG(std::string, coordinator, "",
          "Coordinator address HOST:PORT (default: $RINGMASTER_COORDINATOR).");
ABSL_FLAG(bool, insecure, false, "Talk to the coordinator in plaintext (local development).");
ABSL_FLAG(std::string, tls_ca, "", "PEM CA certificate that signed the coordinator's certificate.");
ABSL_FLAG(std::string, tls_cert, "", "PEM client certificate, for mutual TLS.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of the client certificate.");
ABSL_FLAG(double, timeout, 5, "Seconds to wait for the coordinator.");

namespace ringmaster {
namespace {

constexpr char kUsage[] =
    "ringctl: the Ringmaster command-line client.\n"
    "\n"
    "usage: ringctl [flags] COMMAND\n"
    "\n"
    "commands:\n"
    "  health    check that the coordinator is serving (grpc.health.v1)\n"
    "  version   print ringctl's version\n";

absl::StatusOr<std::string> CoordinatorAddress() {
  std::string address = absl::GetFlag(FLAGS_coordinator);
  if (address.empty()) {
    const char* env = std::getenv("RINGMASTER_COORDINATOR");
    if (env != nullptr) address = env;
  }
  if (address.empty()) {
    return FieldError("--coordinator", "not set (nor RINGMASTER_COORDINATOR)");
  }
  return address;
}

absl::Status Health() {
  ASSIGN_OR_RETURN(std::string address, CoordinatorAddress());
  ClientTlsOptions tls{absl::GetFlag(FLAGS_tls_ca), absl::GetFlag(FLAGS_tls_cert),
                       absl::GetFlag(FLAGS_tls_key)};
  ASSIGN_OR_RETURN(auto credentials, MakeChannelCredentials(tls, absl::GetFlag(FLAGS_insecure)));
  auto status = CheckHealth(MakeChannel(address, credentials), "",
                            absl::Seconds(absl::GetFlag(FLAGS_timeout)));
  if (!status.ok()) {
    return absl::Status(status.status().code(),
                        "coordinator " + address + " unreachable: " +
                            std::string(status.status().message()));
  }
  if (*status != ServingStatus::kServing) {
    return absl::UnavailableError("coordinator " + address + " is not serving");
  }
  std::cout << "coordinator " << address << " is SERVING\n";
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  std::vector<std::string> args;
  absl::Status status = InitBinary(argc, argv, kUsage, &args);
  if (!status.ok()) {
    std::cerr << "ringctl: " << status.message() << "\n";
    return 2;
  }
  if (args.size() != 2) {
    std::cerr << kUsage;
    return 2;
  }
  const std::string& command = args[1];
  if (command == "version") {
    std::cout << "ringctl " << kVersion << "\n";
    return 0;
  }
  if (command == "health") {
    status = Health();
  } else {
    std::cerr << "ringctl: unknown command \"" << command << "\"\n\n" << kUsage;
    return 2;
  }
  if (!status.ok()) {
    std::cerr << "ringctl: " << status.message() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace ringmaster

int main(int argc, char** argv) { return ringmaster::Main(argc, argv); }
