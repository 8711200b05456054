#include "coordinator/scheduler.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ringmaster::coordinator {
namespace {

// Says what decides whether a job fits in a scheduling pass.
std::string ShapeOf(const Layout& layout, bool held_back, const std::set<std::string>& excluded,
                    const std::set<std::string>& settling) {
  return absl::StrCat(layout.nodes, "x", layout.devices_per_node, " tp", layout.tensor, " pp",
                      layout.pipeline, " dp", layout.data, held_back ? " held back" : "",
                      " avoiding ", absl::StrJoin(excluded, ","), " settling ",
                      absl::StrJoin(settling, ","));
}

// `place` off each set of nodes in turn, strictest first, while there is no room: the excluded
// and the settling nodes, then the settling ones only (an excluded node is used again before a
// settling one), then none.
template <typename PlaceFn>
absl::StatusOr<Placement> AvoidingWhileItFits(const std::set<std::string>& excluded,
                                              const std::set<std::string>& settling,
                                              PlaceFn place) {
  std::set<std::string> both = excluded;
  both.insert(settling.begin(), settling.end());
  absl::StatusOr<Placement> placement = place(both);
  if (!excluded.empty() && !settling.empty() && absl::IsResourceExhausted(placement.status())) {
    placement = place(settling);
  }
  if (!both.empty() && absl::IsResourceExhausted(placement.status())) {
    placement = place(std::set<std::string>());
  }
  return placement;
}

}  // namespace

std::string HeldNodes(const Placement& placement) {
  constexpr size_t kNamed = 8;
  std::map<std::string, int> devices;
  for (const v1::RankAssignment& a : placement.assignments) ++devices[a.node()];
  auto count_of = [](int count) {
    return absl::StrCat(count, count == 1 ? " device" : " devices");
  };
  std::vector<std::string> parts;
  int unnamed_devices = 0;
  for (const auto& [node, count] : devices) {
    if (parts.size() < kNamed) {
      parts.push_back(absl::StrCat(node, " (", count_of(count), ")"));
    } else {
      unnamed_devices += count;
    }
  }
  if (devices.size() > kNamed) {
    const size_t more = devices.size() - kNamed;
    parts.push_back(absl::StrCat("and ", more, more == 1 ? " more node (" : " more nodes (",
                                 count_of(unnamed_devices), ")"));
  }
  return absl::StrJoin(parts, ", ");
}

absl::StatusOr<Placement> PlaceBehind(const std::vector<NodeCapacity>& free, const Hold* hold,
                                      const Layout& layout, const std::set<std::string>& excluded,
                                      const std::set<std::string>& settling) {
  std::vector<NodeCapacity> not_held;  // copied only when something is held
  if (hold != nullptr) not_held = WithoutDevicesOf(free, hold->placement);
  const std::vector<NodeCapacity>& open = hold == nullptr ? free : not_held;
  absl::StatusOr<Placement> placement = AvoidingWhileItFits(
      excluded, settling, [&](const std::set<std::string>& avoid) {
        return Place(open, layout, avoid);
      });
  if (placement.ok() || hold == nullptr || !absl::IsResourceExhausted(placement.status())) {
    return placement;
  }
  // Say what is free, not what is left once the held devices are taken out.
  absl::StatusOr<Placement> unheld = Place(free, layout, {});
  return absl::ResourceExhaustedError(
      unheld.ok() ? absl::StrCat("waiting behind job ", hold->job_id,
                                 ": it would fit only on devices held for that job, on ",
                                 HeldNodes(hold->placement))
                  : absl::StrCat(unheld.status().message(), "; devices are also held for job ",
                                 hold->job_id, " on ", HeldNodes(hold->placement)));
}

int IdleHeldDevices(const Hold& hold, const std::vector<NodeCapacity>& free) {
  std::set<std::pair<std::string, int>> free_devices;
  for (const NodeCapacity& node : free) {
    for (const FreeDevice& d : node.free) free_devices.emplace(node.name, d.index);
  }
  int idle = 0;
  for (const v1::RankAssignment& a : hold.placement.assignments) {
    idle += free_devices.count({a.node(), a.local_device()}) > 0 ? 1 : 0;
  }
  return idle;
}

absl::Duration CrashLoopBackoff(int failures, absl::Duration base, absl::Duration max) {
  if (failures < 2 || base <= absl::ZeroDuration()) return absl::ZeroDuration();
  absl::Duration wait = base;
  for (int i = 2; i < failures && wait < max; ++i) wait *= 2;
  return std::min(wait, max);
}

SchedulingPass::SchedulingPass(NodeManager* nodes, bool hold_for_oldest_pending)
    : nodes_(nodes), hold_for_oldest_pending_(hold_for_oldest_pending) {}

void SchedulingPass::Forget() {
  free_.reset();
  misfits_.clear();
  never_fit_.clear();
}

SchedulingPass::Outcome SchedulingPass::Place(const Candidate& job) {
  const std::set<std::string>& excluded = *job.excluded;
  const std::set<std::string> no_settling;
  const std::set<std::string>& settling = job.settling == nullptr ? no_settling : *job.settling;
  if (!free_.has_value()) free_ = nodes_->FreeCapacity();
  const std::vector<NodeCapacity>& free = *free_;
  // A RESTARTING job is running, between generations: it takes any free device.
  // (An elastic job tried at a smaller size is not held back by the devices held for its own
  // full size.)
  const bool held_back = !hold_.job_id.empty() && hold_.job_id != job.job_id && job.pending;
  const std::string shape = ShapeOf(job.layout, held_back, excluded, settling);
  auto misfit = misfits_.find(shape);
  const bool judged = misfit != misfits_.end();
  absl::StatusOr<Placement> placement =
      judged ? absl::StatusOr<Placement>(misfit->second)
             : PlaceBehind(free, held_back ? &hold_ : nullptr, job.layout, excluded, settling);
  if (!judged && absl::IsResourceExhausted(placement.status())) {
    misfits_.emplace(shape, placement.status());
  }
  Outcome outcome;
  if (!placement.ok()) {
    outcome.reason = std::string(placement.status().message());
    if (!absl::IsResourceExhausted(placement.status())) {
      outcome.kind = Outcome::kUnplaceable;
      return outcome;
    }
    outcome.kind = Outcome::kWaiting;
    if (hold_.job_id.empty() && hold_for_oldest_pending_ && never_fit_.count(shape) == 0) {
      // The first job that does not fit holds the devices nearest to being free that it would
      // run on (off the nodes it avoids, if it can). A job that would not fit even on every
      // usable device waits for nodes to join, holding nothing.
      const std::vector<NodeCapacity> usable = nodes_->UsableCapacity();
      absl::StatusOr<Placement> once_free = AvoidingWhileItFits(
          excluded, settling, [&](const std::set<std::string>& avoid) {
            return PlaceOnceFree(usable, free, job.layout, avoid);
          });
      if (once_free.ok()) {
        hold_.job_id = job.job_id;
        hold_.placement = *std::move(once_free);
        absl::StrAppend(&outcome.reason, "; devices are held for it as they free up on ",
                        HeldNodes(hold_.placement));
      } else {
        never_fit_.insert(shape);
      }
    }
    if (!cordoned_.has_value()) cordoned_ = nodes_->Cordoned();
    if (!cordoned_->empty()) {
      absl::StrAppend(&outcome.reason, "; cordoned: ", absl::StrJoin(*cordoned_, ", "));
    }
    return outcome;
  }
  if (!nodes_->Allocate(job.job_id, *placement).ok()) {  // A node was lost or left meanwhile.
    Forget();
    ++refused_;
    outcome.kind = Outcome::kRefused;
    return outcome;
  }
  TakeDevices(*placement, &*free_);
  if (hold_.job_id == job.job_id) hold_ = Hold{};  // placed at a smaller size: it runs now
  misfits_.clear();
  never_fit_.clear();
  outcome.kind = Outcome::kPlaced;
  outcome.placement = *std::move(placement);
  return outcome;
}

}  // namespace ringmaster::coordinator
