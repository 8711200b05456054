#include "coordinator/placement.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"

namespace ringmaster::coordinator {
namespace {

absl::Status CheckAtLeastOne(absl::string_view field, int value) {
  if (value >= 1) return absl::OkStatus();
  return FieldError(field, absl::StrCat("must be >= 1, got ", value));
}

absl::Status CheckLayout(const Layout& layout) {
  RETURN_IF_ERROR(CheckAtLeastOne("nodes", layout.nodes));
  RETURN_IF_ERROR(CheckAtLeastOne("devices_per_node", layout.devices_per_node));
  RETURN_IF_ERROR(CheckAtLeastOne("parallelism.tensor", layout.tensor));
  RETURN_IF_ERROR(CheckAtLeastOne("parallelism.pipeline", layout.pipeline));
  RETURN_IF_ERROR(CheckAtLeastOne("parallelism.data", layout.data));
  const int64_t product = int64_t{layout.tensor} * layout.pipeline * layout.data;
  const int64_t world = int64_t{layout.nodes} * layout.devices_per_node;
  if (product != world) {
    return FieldError("parallelism",
                      absl::StrCat("tensor*pipeline*data (", product,
                                   ") must equal nodes*devices_per_node (", world, ")"));
  }
  if (layout.devices_per_node % layout.tensor != 0) {
    return FieldError("parallelism.tensor",
                      absl::StrCat("must divide devices_per_node (", layout.devices_per_node,
                                   "), got ", layout.tensor));
  }
  return absl::OkStatus();
}

// A node that is not excluded, with (once Place sorted them) the devices that whole TP groups
// can use, in the order groups take them: domain by domain (ascending domain id), lowest device
// index first. The devices of a domain that are left over after its whole groups are dropped.
struct Candidate {
  const NodeCapacity* node = nullptr;
  std::vector<int> devices;
};

std::vector<int> GroupedDevices(const NodeCapacity& node, int tensor) {
  std::vector<FreeDevice> free = node.free;
  std::sort(free.begin(), free.end(), [](const FreeDevice& a, const FreeDevice& b) {
    return std::tie(a.domain, a.index) < std::tie(b.domain, b.index);
  });
  std::vector<int> devices;
  devices.reserve(free.size());
  size_t begin = 0;
  while (begin < free.size()) {
    size_t end = begin;
    while (end < free.size() && free[end].domain == free[begin].domain) ++end;
    const size_t whole = (end - begin) / tensor * tensor;
    for (size_t i = begin; i < begin + whole; ++i) devices.push_back(free[i].index);
    begin = end;
  }
  return devices;
}

// The node's devices cut into chunks of `tensor` inside one interconnect domain (each domain's
// devices free now first, then by index; a domain's remainder left out), the chunks with the
// most devices in `idle` first, each chunk's devices ascending.
std::vector<std::vector<int>> ChunksNearestToFree(const NodeCapacity& node,
                                                  const std::set<int>& idle, int tensor) {
  std::map<int, std::vector<int>> domains;
  for (const FreeDevice& d : node.free) domains[d.domain].push_back(d.index);
  std::vector<std::pair<int, std::vector<int>>> chunks;  // (devices free now, devices)
  for (auto& [domain, devices] : domains) {
    std::sort(devices.begin(), devices.end(), [&](int a, int b) {
      return std::make_pair(idle.count(a) == 0, a) < std::make_pair(idle.count(b) == 0, b);
    });
    for (size_t i = 0; i + tensor <= devices.size(); i += tensor) {
      std::vector<int> chunk(devices.begin() + static_cast<ptrdiff_t>(i),
                             devices.begin() + static_cast<ptrdiff_t>(i + tensor));
      const int free_now = static_cast<int>(
          std::count_if(chunk.begin(), chunk.end(), [&](int d) { return idle.count(d) > 0; }));
      std::sort(chunk.begin(), chunk.end());
      chunks.emplace_back(free_now, std::move(chunk));
    }
  }
  std::stable_sort(chunks.begin(), chunks.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::vector<int>> out;
  for (auto& [free_now, chunk] : chunks) out.push_back(std::move(chunk));
  return out;
}

// Best fit: fewest free devices first, ties broken by name.
bool BestFitOrder(const Candidate& a, const Candidate& b) {
  const size_t a_free = a.node->free.size();
  const size_t b_free = b.node->free.size();
  if (a_free != b_free) return a_free < b_free;
  return a.node->name < b.node->name;
}

std::string Plural(int count, absl::string_view noun) {
  return absl::StrCat(count, " ", noun, count == 1 ? "" : "s");
}

absl::Status NotEnoughNodes(const Layout& layout, int usable, int excluded) {
  std::string message = absl::StrCat("needs ", Plural(layout.nodes, "node"), " with ",
                                     Plural(layout.devices_per_node, "free device"));
  if (layout.tensor > 1) {
    absl::StrAppend(&message, " in whole interconnect domains of ", layout.tensor,
                    " (TP=", layout.tensor, ")");
  }
  absl::StrAppend(&message, "; ", usable, " usable");
  if (excluded > 0) absl::StrAppend(&message, " (", excluded, " excluded)");
  return absl::ResourceExhaustedError(message);
}

// Lays the TP groups of node number `n` (in `chosen` order) onto its devices, stage-major, and
// numbers its ranks' local_rank in ascending global-rank order.
void AssignNode(const Layout& layout, int n, const Candidate& node,
                std::vector<v1::RankAssignment>* assignments) {
  const int groups_per_node = layout.devices_per_node / layout.tensor;
  std::vector<int> ranks;
  ranks.reserve(layout.devices_per_node);
  for (int slot = 0; slot < groups_per_node; ++slot) {
    const int64_t group = int64_t{n} * groups_per_node + slot;  // pp * DP + dp.
    const int pp = static_cast<int>(group / layout.data);
    const int dp = static_cast<int>(group % layout.data);
    for (int tp = 0; tp < layout.tensor; ++tp) {
      const int rank = (dp * layout.pipeline + pp) * layout.tensor + tp;
      v1::RankAssignment& a = (*assignments)[rank];
      a.set_rank(rank);
      a.set_node(node.node->name);
      a.set_local_device(node.devices[slot * layout.tensor + tp]);
      a.set_tp_rank(tp);
      a.set_pp_rank(pp);
      a.set_dp_rank(dp);
      ranks.push_back(rank);
    }
  }
  std::sort(ranks.begin(), ranks.end());
  for (size_t i = 0; i < ranks.size(); ++i) {
    (*assignments)[ranks[i]].set_local_rank(static_cast<int>(i));
  }
}

// The placement on the first `layout.nodes` of `chosen`, whose devices are set.
Placement PlaceOn(const Layout& layout, const std::vector<Candidate>& chosen) {
  Placement placement;
  placement.assignments.resize(static_cast<size_t>(layout.nodes) * layout.devices_per_node);
  placement.nodes.reserve(layout.nodes);
  for (int n = 0; n < layout.nodes; ++n) {
    placement.nodes.push_back(chosen[n].node->name);
    AssignNode(layout, n, chosen[n], &placement.assignments);
  }
  placement.groups = MakeGroups(layout);
  return placement;
}

v1::RankGroup* AddGroup(google::protobuf::RepeatedPtrField<v1::RankGroup>* groups,
                        absl::string_view prefix, int index, int size) {
  v1::RankGroup* group = groups->Add();
  group->set_name(absl::StrCat(prefix, index));
  group->mutable_ranks()->Reserve(size);
  return group;
}

}  // namespace

absl::StatusOr<Placement> Place(const std::vector<NodeCapacity>& nodes, const Layout& layout,
                                const std::set<std::string>& excluded) {
  RETURN_IF_ERROR(CheckLayout(layout));

  // Nodes with enough free devices, without sorting their devices yet.
  std::vector<Candidate> usable;
  usable.reserve(nodes.size());
  int excluded_count = 0;
  for (const NodeCapacity& node : nodes) {
    if (excluded.count(node.name) > 0) {
      ++excluded_count;
      continue;
    }
    if (static_cast<int64_t>(node.free.size()) < layout.devices_per_node) continue;
    usable.push_back(Candidate{&node, {}});
  }
  // Sorts the candidate's devices into whole TP groups (once); true if enough are left.
  auto fits = [&](Candidate& candidate) {
    if (candidate.devices.empty()) {
      candidate.devices = GroupedDevices(*candidate.node, layout.tensor);
    }
    return static_cast<int64_t>(candidate.devices.size()) >= layout.devices_per_node;
  };
  // Best fit orders by free devices and name only: when the best nodes all have whole TP groups
  // there, they are the placement, and the other nodes' devices need not be sorted.
  if (static_cast<int64_t>(usable.size()) >= layout.nodes) {
    std::partial_sort(usable.begin(), usable.begin() + layout.nodes, usable.end(), BestFitOrder);
    bool best_fit = true;
    for (int n = 0; n < layout.nodes && best_fit; ++n) best_fit = fits(usable[n]);
    if (best_fit) return PlaceOn(layout, usable);
  }
  std::vector<Candidate> fitting;
  fitting.reserve(usable.size());
  for (Candidate& candidate : usable) {
    if (fits(candidate)) fitting.push_back(std::move(candidate));
  }
  usable = std::move(fitting);
  const int usable_count = static_cast<int>(usable.size());
  if (usable_count < layout.nodes) return NotEnoughNodes(layout, usable_count, excluded_count);
  std::partial_sort(usable.begin(), usable.begin() + layout.nodes, usable.end(), BestFitOrder);
  return PlaceOn(layout, usable);
}

absl::StatusOr<Placement> PlaceOnceFree(const std::vector<NodeCapacity>& usable,
                                        const std::vector<NodeCapacity>& free, const Layout& layout,
                                        const std::set<std::string>& excluded) {
  std::map<std::string, std::set<int>> free_now;
  for (const NodeCapacity& node : free) {
    for (const FreeDevice& d : node.free) free_now[node.name].insert(d.index);
  }
  auto idle = [&](const std::string& node) -> size_t {
    auto it = free_now.find(node);
    return it == free_now.end() ? 0 : it->second.size();
  };
  std::vector<NodeCapacity> nearest;
  for (const NodeCapacity& node : usable) {
    if (excluded.count(node.name) == 0) nearest.push_back(node);
  }
  std::stable_sort(nearest.begin(), nearest.end(),
                   [&](const NodeCapacity& a, const NodeCapacity& b) {
                     return std::make_pair(-static_cast<int64_t>(idle(a.name)), a.name) <
                            std::make_pair(-static_cast<int64_t>(idle(b.name)), b.name);
                   });
  auto first = [&](size_t k) {
    return std::vector<NodeCapacity>(nearest.begin(), nearest.begin() + static_cast<ptrdiff_t>(k));
  };
  RETURN_IF_ERROR(Place(nearest, layout, {}).status());
  // The shortest prefix of that order that can hold it: adding nodes never makes it fit less.
  size_t low = std::min(static_cast<size_t>(std::max(layout.nodes, 1)), nearest.size());
  size_t high = nearest.size();
  while (low < high) {
    const size_t mid = (low + high) / 2;
    if (Place(first(mid), layout, {}).ok()) {
      high = mid;
    } else {
      low = mid + 1;
    }
  }
  ASSIGN_OR_RETURN(Placement placement, Place(first(high), layout, {}));
  // On each node, the tensor-parallel groups move to the whole-domain chunks with the most
  // devices free now: any chunk of one domain serves a group as well as another.
  for (const std::string& name : placement.nodes) {
    const auto node = std::find_if(nearest.begin(), nearest.end(),
                                   [&](const NodeCapacity& n) { return n.name == name; });
    const std::vector<std::vector<int>> chunks =
        ChunksNearestToFree(*node, free_now[name], layout.tensor);
    std::map<int, std::vector<v1::RankAssignment*>> groups;  // by rank / tensor, tp order
    for (v1::RankAssignment& a : placement.assignments) {
      if (a.node() == name) groups[a.rank() / layout.tensor].push_back(&a);
    }
    RM_CHECK(chunks.size() >= groups.size()) << "node " << name << " has too few chunks";
    size_t chunk = 0;
    for (auto& [group, members] : groups) {
      std::sort(members.begin(), members.end(),
                [](const v1::RankAssignment* a, const v1::RankAssignment* b) {
                  return a->tp_rank() < b->tp_rank();
                });
      for (size_t t = 0; t < members.size(); ++t) {
        members[t]->set_local_device(chunks[chunk][t]);
      }
      ++chunk;
    }
  }
  return placement;
}

void TakeDevices(const Placement& placement, std::vector<NodeCapacity>* nodes) {
  std::map<std::string, std::set<int>> taken;
  for (const v1::RankAssignment& a : placement.assignments) {
    taken[a.node()].insert(a.local_device());
  }
  for (const auto& [name, devices] : taken) {
    auto node = std::lower_bound(
        nodes->begin(), nodes->end(), name,
        [](const NodeCapacity& n, const std::string& wanted) { return n.name < wanted; });
    if (node == nodes->end() || node->name != name) continue;
    node->free.erase(
        std::remove_if(node->free.begin(), node->free.end(),
                       [&](const FreeDevice& d) { return devices.count(d.index) > 0; }),
        node->free.end());
    if (node->free.empty()) nodes->erase(node);
  }
}

std::vector<NodeCapacity> WithoutDevicesOf(std::vector<NodeCapacity> nodes,
                                           const Placement& placement) {
  TakeDevices(placement, &nodes);
  return nodes;
}

v1::ParallelismGroups MakeGroups(const Layout& layout) {
  const int tp_size = layout.tensor;
  const int pp_size = layout.pipeline;
  const int dp_size = layout.data;
  v1::ParallelismGroups groups;
  if (tp_size < 1 || pp_size < 1 || dp_size < 1) return groups;

  groups.mutable_tensor()->Reserve(dp_size * pp_size);
  for (int replica_stage = 0; replica_stage < dp_size * pp_size; ++replica_stage) {
    v1::RankGroup* group = AddGroup(groups.mutable_tensor(), "tp", replica_stage, tp_size);
    for (int tp = 0; tp < tp_size; ++tp) group->add_ranks(replica_stage * tp_size + tp);
  }
  groups.mutable_pipeline()->Reserve(dp_size * tp_size);
  for (int index = 0; index < dp_size * tp_size; ++index) {
    const int dp = index / tp_size;
    const int tp = index % tp_size;
    v1::RankGroup* group = AddGroup(groups.mutable_pipeline(), "pp", index, pp_size);
    for (int pp = 0; pp < pp_size; ++pp) group->add_ranks((dp * pp_size + pp) * tp_size + tp);
  }
  groups.mutable_data()->Reserve(pp_size * tp_size);
  for (int index = 0; index < pp_size * tp_size; ++index) {
    const int pp = index / tp_size;
    const int tp = index % tp_size;
    v1::RankGroup* group = AddGroup(groups.mutable_data(), "dp", index, dp_size);
    for (int dp = 0; dp < dp_size; ++dp) group->add_ranks((dp * pp_size + pp) * tp_size + tp);
  }
  return groups;
}

}  // namespace ringmaster::coordinator
