#include "tests/netns_cluster.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status.h"
#include "common/testing/wait.h"

namespace ringmaster::testing {
namespace {

constexpr char kSubnet[] = "10.77.0.";  // /24, inside the cluster's own namespaces only
constexpr char kBridge[] = "br0";       // in the hub
constexpr char kAgentLink[] = "eth0";   // in each agent's namespace

// Runs argv (`ip`, `tc`); INTERNAL naming the command and its output unless it exits 0.
absl::Status Run(const std::vector<std::string>& argv) {
  absl::StatusOr<CommandResult> r = RunCommand(argv, "");
  if (!r.ok()) return r.status();
  if (r->exit_code != 0) {
    return absl::InternalError(absl::StrCat(absl::StrJoin(argv, " "), " exited ", r->exit_code,
                                            ": ", r->output));
  }
  return absl::OkStatus();
}

// `ip` in namespace `ns`.
absl::Status Ip(const std::string& ns, std::vector<std::string> args) {
  args.insert(args.begin(), {"ip", "-n", ns});
  return Run(args);
}

// `tc` in namespace `ns`.
absl::Status Tc(const std::string& ns, std::vector<std::string> args) {
  args.insert(args.begin(), {"ip", "netns", "exec", ns, "tc"});
  return Run(args);
}

std::vector<std::string> ListNamespaces() {
  std::vector<std::string> names;
  absl::StatusOr<CommandResult> r = RunCommand({"ip", "netns", "list"}, "");
  if (!r.ok() || r->exit_code != 0) return names;
  for (absl::string_view line : absl::StrSplit(r->output, '\n', absl::SkipEmpty())) {
    // "NAME" or "NAME (id: N)"
    names.emplace_back(line.substr(0, line.find(' ')));
  }
  return names;
}

// Deletes the namespace `name` if it exists (the interfaces in it go with it).
void DeleteNamespace(const std::string& name) {
  const std::vector<std::string> names = ListNamespaces();
  if (std::find(names.begin(), names.end(), name) == names.end()) return;
  absl::Status deleted = Run({"ip", "netns", "del", name});
  if (!deleted.ok()) std::fprintf(stderr, "netns cluster: %s\n", deleted.ToString().c_str());
}

// Namespaces "rmt<pid>-..." of processes that no longer run: a test that crashed left them.
void RemoveStaleNamespaces() {
  const std::regex owner("^rmt(\\d+)-");
  for (const std::string& name : ListNamespaces()) {
    std::smatch m;
    int pid = 0;
    if (!std::regex_search(name, m, owner) || !absl::SimpleAtoi(m[1].str(), &pid)) continue;
    if (pid == getpid() || kill(pid, 0) == 0 || errno != ESRCH) continue;
    std::fprintf(stderr, "netns cluster: removing stale namespace %s (pid %d is gone)\n",
                 name.c_str(), pid);
    DeleteNamespace(name);
  }
}

std::string HubLink(int i) { return absl::StrCat("v", i); }

}  // namespace

std::string NetnsCluster::Unsupported() {
  if (geteuid() != 0) return "needs root (network namespaces, veths, tc)";
  const std::string probe = absl::StrCat("rmt", getpid(), "-probe");
  absl::Status added = Run({"ip", "netns", "add", probe});
  if (!added.ok()) return absl::StrCat("`ip netns` is unavailable: ", added.ToString());
  // What the cluster builds, in the probe namespace (deleting it deletes them): a kernel or a
  // container without the bridge, veth or tbf modules fails here, not half-way through a test.
  std::string why;
  if (absl::Status s = Ip(probe, {"link", "add", "probebr", "type", "bridge"}); !s.ok()) {
    why = absl::StrCat("cannot create a bridge: ", s.ToString());
  } else if (absl::Status s =
                 Ip(probe, {"link", "add", "probev0", "type", "veth", "peer", "name", "probev1"});
             !s.ok()) {
    why = absl::StrCat("cannot create a veth pair: ", s.ToString());
  } else if (absl::Status s = Tc(probe, {"qdisc", "add", "dev", "probev0", "root", "tbf", "rate",
                                         "20mbit", "burst", "64kb", "latency", "500ms"});
             !s.ok()) {
    why = absl::StrCat("cannot add a tbf qdisc (tc): ", s.ToString());
  }
  DeleteNamespace(probe);
  return why;
}

std::vector<std::string> NetnsCluster::NamespacesWithPrefix(const std::string& prefix) {
  std::vector<std::string> found;
  for (const std::string& name : ListNamespaces()) {
    if (name.rfind(prefix, 0) == 0) found.push_back(name);
  }
  return found;
}

std::string NetnsCluster::bridge_address() const { return absl::StrCat(kSubnet, 1); }
std::string NetnsCluster::agent_address(int i) const { return absl::StrCat(kSubnet, i + 2); }
std::string NetnsCluster::coordinator_address() const {
  return absl::StrCat(bridge_address(), ":", coordinator_->grpc_port);
}

absl::Status NetnsCluster::CreateNetwork(int agents) {
  hub_ = prefix_ + "hub";
  RETURN_IF_ERROR(Run({"ip", "netns", "add", hub_}));
  RETURN_IF_ERROR(Ip(hub_, {"link", "set", "lo", "up"}));
  RETURN_IF_ERROR(Ip(hub_, {"link", "add", kBridge, "type", "bridge"}));
  RETURN_IF_ERROR(Ip(hub_, {"addr", "add", bridge_address() + "/24", "dev", kBridge}));
  RETURN_IF_ERROR(Ip(hub_, {"link", "set", kBridge, "up"}));
  for (int i = 0; i < agents; ++i) {
    const std::string ns = absl::StrCat(prefix_, "a", i);
    agent_ns_.push_back(ns);  // recorded first: the teardown deletes it even if this fails
    degraded_.push_back(false);
    RETURN_IF_ERROR(Run({"ip", "netns", "add", ns}));
    RETURN_IF_ERROR(Ip(ns, {"link", "set", "lo", "up"}));
    RETURN_IF_ERROR(Ip(hub_, {"link", "add", HubLink(i), "type", "veth", "peer", "name",
                              kAgentLink, "netns", ns}));
    RETURN_IF_ERROR(Ip(hub_, {"link", "set", HubLink(i), "master", kBridge}));
    RETURN_IF_ERROR(Ip(hub_, {"link", "set", HubLink(i), "up"}));
    RETURN_IF_ERROR(Ip(ns, {"addr", "add", agent_address(i) + "/24", "dev", kAgentLink}));
    RETURN_IF_ERROR(Ip(ns, {"link", "set", kAgentLink, "up"}));
  }
  return absl::OkStatus();
}

absl::Status NetnsCluster::EnterHub() {
  original_netns_fd_ = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  if (original_netns_fd_ < 0) return ErrnoError(errno, "open /proc/thread-self/ns/net");
  const std::string path = "/run/netns/" + hub_;
  const int hub = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (hub < 0) return ErrnoError(errno, "open " + path);
  const int entered = setns(hub, CLONE_NEWNET);
  const int error = errno;
  close(hub);
  if (entered != 0) return ErrnoError(error, "setns " + path);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<NetnsCluster>> NetnsCluster::Start(
    const std::string& dir, const NetnsClusterOptions& options) {
  if (std::string why = Unsupported(); !why.empty()) return absl::FailedPreconditionError(why);
  static int instance = 0;
  std::unique_ptr<NetnsCluster> c(new NetnsCluster());
  c->prefix_ = absl::StrCat("rmt", getpid(), "-", instance++, "-");
  c->dir_ = dir;
  std::filesystem::create_directories(dir);
  RemoveStaleNamespaces();
  // On any error below, `c`'s destructor stops what started and deletes what was created.
  RETURN_IF_ERROR(c->CreateNetwork(options.agents));
  RETURN_IF_ERROR(c->EnterHub());

  std::vector<std::string> flags = {"--insecure", "--state=" + dir + "/state.db",
                                    "--stop_grace=2", "--listen=" + c->bridge_address() + ":0"};
  flags.insert(flags.end(), options.coordinator_flags.begin(), options.coordinator_flags.end());
  ASSIGN_OR_RETURN(CoordinatorProcess coordinator, StartCoordinator(flags));
  c->coordinator_ = std::make_unique<CoordinatorProcess>(std::move(coordinator));

  // Unix socket paths must be short (107 bytes); Bazel's temp dir is not.
  char short_dir[] = "/tmp/rm-sock-XXXXXX";
  if (mkdtemp(short_dir) == nullptr) return ErrnoError(errno, "mkdtemp");
  c->socket_dir_ = short_dir;
  for (int i = 0; i < options.agents; ++i) {
    const std::string work = absl::StrCat(dir, "/agent-", i);
    std::vector<std::string> argv = {
        "ip",
        "netns",
        "exec",
        c->agent_ns_[i],
        std::filesystem::absolute("agent/agent").string(),
        "--insecure",
        "--coordinator=" + c->coordinator_address(),
        absl::StrCat("--node_name=agent-", i),
        absl::StrCat("--devices=cpu:", options.slots),
        "--host_address=" + c->agent_address(i),
        "--work_dir=" + work,
        absl::StrCat("--worker_socket=", c->socket_dir_, "/a", i, ".sock"),
        "--metrics_listen=" + c->agent_address(i) + ":0",
        "--stop_grace=2",
        "--trainer_binary=" + std::filesystem::absolute("trainer/trainer").string()};
    argv.insert(argv.end(), options.agent_flags.begin(), options.agent_flags.end());
    c->agent_argv_.push_back(argv);
    c->work_dirs_.push_back(work);
  }
  for (int i = 0; i < options.agents; ++i) {
    RETURN_IF_ERROR(c->StartAgent(i));
  }
  const bool registered = WaitFor(
      [&] {
        const std::string nodes = c->Ctl({"nodes"}).output;
        for (int i = 0; i < options.agents; ++i) {
          if (nodes.find(absl::StrCat("agent-", i)) == std::string::npos) return false;
        }
        return true;
      },
      absl::Seconds(30));
  if (!registered) {
    return absl::DeadlineExceededError(
        absl::StrCat("agents did not register:\n", c->agents_[0].Log(), "\ncoordinator:\n",
                     c->coordinator_->process.Log()));
  }
  return c;
}

absl::Status NetnsCluster::StartAgent(int i) {
  ASSIGN_OR_RETURN(Subprocess agent, Subprocess::Start(agent_argv_[i], work_dirs_[i] + ".log"));
  if (i < agent_count()) {
    agents_[i] = std::move(agent);
  } else {
    agents_.push_back(std::move(agent));  // the first start, in order
  }
  return absl::OkStatus();
}

absl::Status NetnsCluster::RestartAgent(int i) { return StartAgent(i); }

NetnsCluster::~NetnsCluster() { Teardown(); }

void NetnsCluster::Teardown() {
  agents_.clear();  // SIGKILLs the agents' process groups (their workers die with them)
  coordinator_.reset();
  std::error_code ec;
  if (!socket_dir_.empty()) std::filesystem::remove_all(socket_dir_, ec);
  if (original_netns_fd_ >= 0) {
    if (setns(original_netns_fd_, CLONE_NEWNET) != 0) {
      std::perror("netns cluster: setns back to the original namespace");
    }
    close(original_netns_fd_);
    original_netns_fd_ = -1;
  }
  for (const std::string& ns : agent_ns_) DeleteNamespace(ns);
  if (!hub_.empty()) DeleteNamespace(hub_);
}

CommandResult NetnsCluster::Ctl(std::vector<std::string> args) {
  return CtlAt(coordinator_address(), std::move(args));
}

std::string NetnsCluster::Submit(const std::string& name, const std::string& yaml) {
  return SubmitJobFile(coordinator_address(), dir_, name, yaml);
}

std::string NetnsCluster::WaitForEnd(const std::string& job, absl::Duration timeout) {
  return WaitForJobEnd(coordinator_address(), job, timeout);
}

std::string NetnsCluster::RankLog(const std::string& job, int generation, int rank) const {
  return RankLogIn(work_dirs_, job, generation, rank);
}

int NetnsCluster::RankAgent(const std::string& job, int generation, int rank) const {
  for (int i = 0; i < static_cast<int>(work_dirs_.size()); ++i) {
    std::error_code error;
    if (std::filesystem::exists(absl::StrCat(work_dirs_[i], "/logs/", job, "/", generation,
                                             "/rank-", rank, ".log"),
                                error)) {
      return i;
    }
  }
  return -1;
}

int NetnsCluster::AgentMetricsPort(int i) const {
  std::smatch m;
  const std::string log = agents_[i].Log();
  int port = 0;
  if (std::regex_search(log, m, std::regex("agent metrics listening on [0-9.]+:(\\d+)"))) {
    (void)absl::SimpleAtoi(m[1].str(), &port);  // the regex guarantees digits
  }
  return port;
}

absl::Status NetnsCluster::CheckAgent(int i) const {
  if (i >= 0 && i < static_cast<int>(agent_ns_.size())) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("agent: ", i, " is not one of the cluster's ", agent_ns_.size(), " agents"));
}

absl::Status NetnsCluster::Degrade(int i, int64_t bits_per_second) {
  RETURN_IF_ERROR(CheckAgent(i));
  if (bits_per_second < 8000) {
    return absl::InvalidArgumentError("bits_per_second: must be at least 8000");
  }
  // A burst of 10 ms at the rate (tbf needs at least rate/HZ) and never under 64 KiB, so that
  // one GSO packet of the veth fits; packets wait up to 500 ms in the queue before any drop.
  const int64_t burst = std::max<int64_t>(bits_per_second / 8 / 100, 64 * 1024);
  const std::vector<std::string> tbf = {"root", "tbf", "rate", absl::StrCat(bits_per_second, "bit"),
                                        "burst", absl::StrCat(burst), "latency", "500ms"};
  std::vector<std::string> agent_side = {"qdisc", "replace", "dev", kAgentLink};
  agent_side.insert(agent_side.end(), tbf.begin(), tbf.end());
  std::vector<std::string> hub_side = {"qdisc", "replace", "dev", HubLink(i)};
  hub_side.insert(hub_side.end(), tbf.begin(), tbf.end());
  degraded_[i] = true;  // before: Restore removes a half-applied one too
  RETURN_IF_ERROR(Tc(agent_ns_[i], agent_side));
  return Tc(hub_, hub_side);
}

absl::Status NetnsCluster::Restore(int i) {
  RETURN_IF_ERROR(CheckAgent(i));
  if (!degraded_[i]) return absl::OkStatus();
  // "replace" with the veth's default (no queue) would need a handle; deleting the root qdisc
  // gives the default back. A side that has none (half-applied Degrade) answers an error that
  // does not matter.
  absl::Status agent_side = Tc(agent_ns_[i], {"qdisc", "del", "dev", kAgentLink, "root"});
  absl::Status hub_side = Tc(hub_, {"qdisc", "del", "dev", HubLink(i), "root"});
  degraded_[i] = false;
  if (!agent_side.ok() && !hub_side.ok()) return agent_side;
  return absl::OkStatus();
}

absl::Status NetnsCluster::Cut(int i) {
  RETURN_IF_ERROR(CheckAgent(i));
  return Ip(hub_, {"link", "set", HubLink(i), "down"});
}

absl::Status NetnsCluster::Heal(int i) {
  RETURN_IF_ERROR(CheckAgent(i));
  return Ip(hub_, {"link", "set", HubLink(i), "up"});
}

absl::StatusOr<LinkCounters> NetnsCluster::LinkBytes(int i) const {
  RETURN_IF_ERROR(CheckAgent(i));
  const std::vector<std::string> argv = {"ip", "-n", hub_, "-j", "-s", "link", "show", "dev",
                                         HubLink(i)};
  ASSIGN_OR_RETURN(CommandResult r, RunCommand(argv, ""));
  std::smatch rx, tx;
  LinkCounters counters;
  if (r.exit_code != 0 ||
      !std::regex_search(r.output, rx, std::regex("\"rx\":\\{\"bytes\":(\\d+)")) ||
      !std::regex_search(r.output, tx, std::regex("\"tx\":\\{\"bytes\":(\\d+)")) ||
      !absl::SimpleAtoi(rx[1].str(), &counters.from_agent) ||
      !absl::SimpleAtoi(tx[1].str(), &counters.to_agent)) {
    return absl::InternalError(
        absl::StrCat(absl::StrJoin(argv, " "), " (exit ", r.exit_code, "): ", r.output));
  }
  return counters;
}

}  // namespace ringmaster::testing
