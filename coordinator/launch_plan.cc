#include "coordinator/launch_plan.h"

#include <cstdint>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"

namespace ringmaster::coordinator {

Layout DesiredLayoutOf(const v1::JobStatus& status) {
  const v1::JobSpec& spec = status.spec();
  const v1::ParallelismSpec& p =
      spec.parallelism().tensor() > 0 ? spec.parallelism() : status.plan().parallelism();
  Layout layout;
  layout.nodes = spec.nodes();
  layout.devices_per_node = spec.devices_per_node();
  layout.tensor = p.tensor();
  layout.pipeline = p.pipeline();
  layout.data = p.data();
  return layout;
}

Layout LayoutAtNodes(const Layout& desired, int nodes) {
  Layout layout = desired;
  if (nodes < 1 || desired.nodes < 1 || nodes == desired.nodes) return layout;
  layout.nodes = nodes;
  layout.data = static_cast<int>(int64_t{desired.data} * nodes / desired.nodes);
  return layout;
}

Layout LayoutOf(const v1::JobStatus& status) {
  const Layout desired = DesiredLayoutOf(status);
  const int nodes = status.elastic_nodes();
  return nodes > 0 && nodes < desired.nodes ? LayoutAtNodes(desired, nodes) : desired;
}

int MasterPort(int port_base, const std::string& job_id, int64_t generation) {
  return port_base + static_cast<int>(absl::HashOf(job_id, generation) % 1000);
}

int MasterPort(int port_base, const std::string& job_id, int64_t generation,
               const std::set<int>& taken) {
  const int first = MasterPort(port_base, job_id, generation) - port_base;
  for (int i = 0; i < 1000; ++i) {
    const int port = port_base + (first + i) % 1000;
    if (!taken.count(port)) return port;
  }
  return port_base + first;
}

std::string LaunchPlan::Summary(int64_t generation) const {
  return absl::StrCat("placed ", world_size, " ranks on ", messages.size(), " nodes (generation ",
                      generation, ")");
}

LaunchPlan PlanLaunch(const v1::JobStatus& status, const std::string& master_addr,
                      int master_port) {
  LaunchPlan plan;
  plan.world_size = status.assignments_size();
  for (const v1::RankAssignment& a : status.assignments()) {
    *plan.messages[a.node()].mutable_launch()->add_assignments() = a;
  }
  const Layout layout = LayoutOf(status);
  for (auto& [node, message] : plan.messages) {
    v1::LaunchWorkers* launch = message.mutable_launch();
    launch->mutable_job()->set_job_id(status.job_id());
    launch->mutable_job()->set_generation(status.generation());
    *launch->mutable_spec() = status.spec();
    launch->mutable_layout()->set_tensor(layout.tensor);
    launch->mutable_layout()->set_pipeline(layout.pipeline);
    launch->mutable_layout()->set_data(layout.data);
    launch->set_world_size(plan.world_size);
    launch->set_master_addr(master_addr);
    launch->set_master_port(master_port);
    launch->set_restart_count(status.restarts());
  }
  return plan;
}

}  // namespace ringmaster::coordinator
