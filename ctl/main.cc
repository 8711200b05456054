// ringctl: the Ringmaster command-line client (kubectl-like).
//
// Each connection flag falls back to an environment variable: --coordinator to
// $RINGMASTER_COORDINATOR, --token to $RINGMASTER_TOKEN, --insecure to $RINGMASTER_INSECURE,
// --tls_ca/--tls_cert/--tls_key to $RINGMASTER_TLS_CA/_CERT/_KEY. Help texts: ctl/help.h.
// Exit codes: 0 success; 1 the command failed (RPC error, job did not succeed with --wait);
// 2 bad usage or a bad job file.
#include <cstdlib>
#include <optional>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/build_info.h"
#include "common/flags.h"
#include "common/grpc_health_client.h"
#include "common/status.h"
#include "ctl/client.h"
#include "ctl/commands.h"
#include "ctl/completion.h"
#include "ctl/help.h"
#include "ctl/live_block.h"

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
ABSL_FLAG(std::string, o, "table", "get jobs, get job, nodes: table, wide, json or yaml.");
ABSL_FLAG(std::string, reason, "",
          "cancel: reason recorded in the job's events; cordon, drain: reason kept with the "
          "cordon.");
ABSL_FLAG(std::string, state, "",
          "get jobs: only jobs in these states, comma-separated (pending, running, restarting, "
          "succeeded, failed, cancelled).");
ABSL_FLAG(int, rank, -1, "logs: the global rank whose log to show (default: every rank).");
ABSL_FLAG(bool, follow, false, "logs: keep printing new output until the rank exits.");
ABSL_FLAG(bool, plain, false,
          "watch, submit --wait, top: plain lines even on a terminal (no live block, no redraw).");
ABSL_FLAG(double, interval, 2, "top: seconds between two refreshes.");
ABSL_FLAG(int, n, 0, "top: stop after N refreshes (0: when the job ends).");
ABSL_FLAG(int, iterations, 0, "top: the same as -n.");

namespace ringmaster::ctl {
namespace {

std::string FromFlagOrEnv(const std::string& flag, const char* env) {
  if (!flag.empty()) return flag;
  const char* value = std::getenv(env);
  return value == nullptr ? "" : value;
}

// --insecure when given on the command line (so --insecure=false overrides the environment),
// else $RINGMASTER_INSECURE: 1, true or yes (any case) for plaintext; 0, false, no or empty for TLS.
// `insecure_given`: --insecure, --insecure=..., or --noinsecure was on the command line.
absl::StatusOr<bool> Insecure(bool insecure_given) {
  if (insecure_given) return absl::GetFlag(FLAGS_insecure);
  const char* env = std::getenv("RINGMASTER_INSECURE");
  const std::string value = absl::AsciiStrToLower(env == nullptr ? "" : env);
  if (value == "1" || value == "true" || value == "yes") return true;
  if (value.empty() || value == "0" || value == "false" || value == "no") return false;
  return FieldError("RINGMASTER_INSECURE",
                    absl::StrCat("must be 1, true, yes, 0, false or no, got \"", env, "\""));
}

absl::StatusOr<Client> Connect(bool insecure_given) {
  ClientOptions options;
  options.coordinator = FromFlagOrEnv(absl::GetFlag(FLAGS_coordinator), "RINGMASTER_COORDINATOR");
  options.token = FromFlagOrEnv(absl::GetFlag(FLAGS_token), "RINGMASTER_TOKEN");
  ASSIGN_OR_RETURN(options.insecure, Insecure(insecure_given));
  options.tls_ca = FromFlagOrEnv(absl::GetFlag(FLAGS_tls_ca), "RINGMASTER_TLS_CA");
  options.tls_cert = FromFlagOrEnv(absl::GetFlag(FLAGS_tls_cert), "RINGMASTER_TLS_CERT");
  options.tls_key = FromFlagOrEnv(absl::GetFlag(FLAGS_tls_key), "RINGMASTER_TLS_KEY");
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
absl::Status Run(const std::vector<std::string>& args, bool insecure_given, bool* usage_error) {
  static const std::vector<std::vector<std::string>> kShapes = {
      {"version"},      {"health"},         {"submit"},           {"plan"},
      {"nodes"},        {"get", "jobs"},    {"get", "job", "ID"}, {"describe", "job", "ID"},
      {"cancel", "ID"}, {"watch", "ID"},    {"logs", "ID"},       {"cordon", "ID"},
      {"drain", "ID"},  {"uncordon", "ID"}, {"check-links", "ID"}, {"release-node", "ID"},
      {"completion", "ID"}, {"top", "ID"}};
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
  if (command == "completion") {
    std::optional<std::string> script = CompletionScript(args[2]);
    if (!script.has_value()) {
      *usage_error = true;
      return FieldError("completion", absl::StrCat("the shell must be bash or zsh, got \"", args[2], "\""));
    }
    std::cout << *script;
    return absl::OkStatus();
  }
  absl::StatusOr<Client> client_or = Connect(insecure_given);
  if (!client_or.ok()) return client_or.status();
  Client client = *std::move(client_or);
  std::ostream& out = std::cout;
  // Live views (ctl/live_block.h) on a terminal that can move the cursor, unless --plain.
  const bool live = !absl::GetFlag(FLAGS_plain) && LiveOutputWanted();
  if (command == "health") return Health(client);
  if (command == "submit") {
    return Submit(client, absl::GetFlag(FLAGS_f), absl::GetFlag(FLAGS_wait),
                  absl::GetFlag(FLAGS_request_id), out, live);
  }
  if (command == "plan") return Plan(client, absl::GetFlag(FLAGS_f), out);
  if (command == "nodes") return Nodes(client, out, absl::GetFlag(FLAGS_o));
  if (command == "get" && (*shape)[1] == "jobs") {
    return GetJobs(client, absl::GetFlag(FLAGS_state), out, absl::GetFlag(FLAGS_o));
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
  if (command == "top") {
    const int n = absl::GetFlag(FLAGS_n);
    return Top(client, args[2], absl::Seconds(absl::GetFlag(FLAGS_interval)),
               n != 0 ? n : absl::GetFlag(FLAGS_iterations), live, TerminalWidth(), out);
  }
  return Watch(client, args[2], out, live);
}

// The words of `ringctl [help] WORDS... --help`: nullopt unless help is asked for.
std::optional<std::vector<std::string>> HelpWords(int argc, char** argv) {
  std::vector<std::string> words;
  bool help = false;
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    // --helpfull stays Abseil's list of every flag the binary accepts (libraries' included):
    // what tools read to check the flags they pass (deploy/validation/binaries_test.js).
    if (arg == "--help" || arg == "-help" || arg == "-h" || arg == "--helpshort" || arg == "-?") {
      help = true;
    } else if (i == 1 && arg == "help") {
      help = true;
    } else if (!absl::StartsWith(arg, "-")) {
      words.push_back(std::string(arg));
    }
  }
  if (!help) return std::nullopt;
  return words;
}

int Main(int argc, char** argv) {
  // gRPC's own log lines (a TLS handshake's failure) would repeat, less clearly, the one-line
  // error ringctl prints; a user who wants them sets GRPC_VERBOSITY.
  setenv("GRPC_VERBOSITY", "NONE", /*overwrite=*/0);
  // Our help, not Abseil's flag dump: asked for, it is all that runs.
  if (std::optional<std::vector<std::string>> words = HelpWords(argc, argv); words.has_value()) {
    if (words->empty()) {
      std::cout << MainHelp();
      return 0;
    }
    std::optional<std::string> text = CommandHelpText(*words);
    if (!text.has_value()) {
      std::cerr << "ringctl: unknown command \"" << absl::StrJoin(*words, " ") << "\"\n\n"
                << MainHelp();
      return 2;
    }
    std::cout << *text;
    return 0;
  }
  std::vector<std::string> args;
  absl::Status status = InitBinary(argc, argv, "ringctl COMMAND [ARGS] [FLAGS]; ringctl --help", &args);
  if (!status.ok()) {
    std::cerr << "ringctl: " << status.message() << "\n";
    return 2;
  }
  bool usage_error = false;
  bool insecure_given = false;
  for (int i = 1; i < argc; ++i) {
    if (absl::string_view(argv[i]) == "--") break;
    const absl::string_view arg = absl::StripPrefix(absl::StripPrefix(argv[i], "-"), "-");
    insecure_given |= arg == "insecure" || arg == "noinsecure" || absl::StartsWith(arg, "insecure=");
  }
  status = Run(args, insecure_given, &usage_error);
  if (status.ok()) return 0;
  std::cerr << "ringctl: " << status.message() << "\n";
  if (usage_error) {
    std::cerr << "\n" << MainHelp();
    return 2;
  }
  // A bad job file is the user's input to fix, like bad usage.
  return IsInputError(status) ? 2 : 1;
}

}  // namespace
}  // namespace ringmaster::ctl

int main(int argc, char** argv) { return ringmaster::ctl::Main(argc, argv); }
