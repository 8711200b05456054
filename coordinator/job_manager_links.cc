// JobManager's link checks: a rank's start-up check, the checks a user requests
// (RequestLinkCheck) and those the coordinator runs by itself when a job's step time rises
// unexplained and when it comes back (WatchLinks, link_watch.h), collected per generation
// (LinkCheckCollector, link_analysis.h), their corrupting links named at once and their slow links
// once every rank reported, with the events and series of the verdict, and the links of the
// previous verdict that recovered.
#include <algorithm>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/format_double.h"
#include "common/job_state.h"
#include "common/logging.h"
#include "common/status.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_manager_internal.h"
#include "coordinator/link_analysis.h"
#include "coordinator/link_watch.h"
#include "coordinator/spec_validation.h"

namespace ringmaster::coordinator {

absl::StatusOr<v1::CheckLinksResponse> JobManager::RequestLinkCheck(const std::string& job_id,
                                                                    const Caller& caller) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Job * job, FindForCaller(job_id, caller, "check its links"));
  if (job->status.state() != v1::JOB_STATE_RUNNING) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " is ", StateName(job->status.state()),
                     ": only a running job's links can be checked"));
  }
  if (job->status.spec().watchdog().link_check_disabled()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " has watchdog.link_check: false"));
  }
  if (job->status.assignments_size() < 2) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " has one rank: it has no link to check"));
  }
  if (!job->status.generation_stepped()) {
    // Before its first step rank 0 may not run yet (its agent would drop the request), and the
    // generation's own start-up check is under way.
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " generation ", job->status.generation(),
                     " has not completed a step yet; ask again once it trains"));
  }
  if (!SendLinkCheck(job)) {
    return absl::UnavailableError(absl::StrCat("node ", job->status.assignments(0).node(),
                                               " (rank 0) is not connected; try again"));
  }
  const int64_t sequence =
      AddEvent(job, "link_check",
               absl::StrCat("link check requested",
                            caller.identity.empty() ? "" : " by " + caller.identity,
                            ": the ranks run it after an upcoming step"))
          .sequence();
  Persist(job);
  v1::CheckLinksResponse response;
  *response.mutable_job() = job->status;
  response.set_request_sequence(sequence);
  return response;
}

bool JobManager::SendLinkCheck(Job* job) {
  // One rank is told; the ranks' per-step vote spreads it, so the request runs one check.
  v1::CoordinatorMessage message;
  v1::CheckLinks* check = message.mutable_check_links();
  check->mutable_job()->set_job_id(job->status.job_id());
  check->mutable_job()->set_generation(job->status.generation());
  check->set_rank(0);
  return agents_->Send(job->status.assignments(0).node(), message);
}

void JobManager::WatchLinks(Job* job, const v1::StepSummary& summary) {
  const v1::JobSpec& spec = job->status.spec();
  // Only a program that ran the start-up check can be asked for one (the trainer, builtin or as a
  // command; not the Python watch): a generation none of whose ranks reported one is not watched.
  // A one-rank job has no link.
  if (summary.steps_in_summary() <= 0 || job->gen.link_check == nullptr ||
      spec.watchdog().link_check_disabled() || spec.watchdog().auto_link_check_disabled() ||
      job->status.assignments_size() < 2 || !job->status.generation_stepped()) {
    return;
  }
  GenerationState& gen = job->gen;
  if (gen.link_watch == nullptr) {
    v1::JobSpec defaulted = spec;
    ApplyDefaults(&defaulted);  // a job stored before the interval existed gets its default
    LinkWatchOptions options;
    options.min_interval =
        absl::Seconds(defaulted.watchdog().auto_link_check_interval_seconds());
    gen.link_watch = std::make_unique<LinkWatch>(options);
  }
  const absl::Time now = clock_->Now();
  // The means over the steps the summary covers (an agent sends at most one summary a second per
  // rank, and one step of a job of 10 ms steps is mostly noise: a host's scheduling, a queue); an
  // agent before mean_step_seconds sends 0 there, and its summary's last step is the sample.
  const bool means = summary.mean_step_seconds() > 0;
  const std::optional<LinkWatch::Trigger> trigger = gen.link_watch->Add(
      {summary.rank(), summary.step(),
       means ? summary.mean_step_seconds() : summary.step_seconds(),
       means ? summary.mean_compute_seconds() : summary.compute_seconds()},
      now);
  // Not sent (rank 0's node is not connected): still owed, asked again at the next summary.
  if (!trigger.has_value() || !SendLinkCheck(job)) return;
  gen.link_watch->Sent(now);
  const bool drop = trigger->kind == LinkWatch::Trigger::kDrop;
  RM_LOG(INFO) << "job " << job->status.job_id() << " generation " << job->status.generation()
               << ": automatic link check: " << trigger->why;
  v1::JobEvent& event =
      AddEvent(job, "link_check",
               absl::StrCat(drop ? "link check started by the coordinator: "
                                 : "link check started by the coordinator to confirm the links "
                                   "recovered: ",
                            trigger->why, "; the ranks run it after an upcoming step"));
  event.set_step(summary.step());
  Persist(job);
}

void JobManager::OnLinkReport(const v1::LinkReport& report) {
  absl::MutexLock lock(&mu_);
  Job* job = Find(report.job().job_id());
  const int world = job == nullptr ? 0 : job->status.assignments_size();
  if (job == nullptr || job->status.state() != v1::JOB_STATE_RUNNING ||
      report.job().generation() != job->status.generation() || report.rank() < 0 ||
      report.rank() >= world) {
    return;
  }
  if (report.step() < 0) return;
  if (job->gen.link_check != nullptr && report.step() < job->gen.link_check->step()) {
    return;  // an earlier check's, superseded
  }
  if (job->gen.link_check == nullptr || report.step() > job->gen.link_check->step()) {
    v1::JobSpec spec = job->status.spec();
    ApplyDefaults(&spec);  // a job stored before slow_link_ratio existed gets its default
    job->gen.link_check = std::make_unique<LinkCheckCollector>(
        job->status.generation(), report.step(), world, spec.watchdog().slow_link_ratio(),
        spec.watchdog().min_link_bytes_per_second());
  }
  if (report.step() == 0)
    job->gen.start_link_check_seconds.emplace(report.rank(), report.seconds());
  std::vector<LinkSample> samples;
  for (const v1::LinkStat& l : report.links()) {
    if (l.peer_rank() < 0 || l.peer_rank() >= world || l.peer_rank() == report.rank()) continue;
    samples.push_back(
        {l.group(), report.rank(), l.peer_rank(), job->status.assignments(report.rank()).node(),
         job->status.assignments(l.peer_rank()).node(), l.bytes(), l.seconds(), l.wrong()});
  }
  if (!job->gen.link_check->Add(report.rank(), samples)) return;
  // A rank that received wrong data exits right after its report and the generation ends before
  // the others report: corruption is named at once.
  const std::vector<v1::LinkState> corrupt = job->gen.link_check->TakeNewCorruptions();
  for (const v1::LinkState& link : corrupt) AnnounceLink(job, link);
  if (!corrupt.empty()) Persist(job);
  if (job->gen.link_check->complete()) JudgeLinks(job);
}

void JobManager::AnnounceLink(Job* job, const v1::LinkState& link) {
  const LinkCheckCollector& check = *job->gen.link_check;
  std::string what = absl::StrFormat("%s: rank %d (%s) <-> rank %d (%s): %s each way", link.group(),
                                     link.rank(), link.node(), link.peer_rank(), link.peer_node(),
                                     FormatBandwidth(link.bytes_per_second()));
  if (link.baseline_bytes_per_second() > 0) {
    absl::StrAppend(
        &what, absl::StrFormat(", %.2fx the median of the other %s links %s (%s)",
                               link.bytes_per_second() / link.baseline_bytes_per_second(),
                               GroupKind(link.group()),
                               link.node() == link.peer_node() ? "inside a node" : "across nodes",
                               FormatBandwidth(link.baseline_bytes_per_second())));
  }
  if (link.wrong() > 0) {
    absl::StrAppend(&what, "; ", link.wrong(), link.wrong() == 1 ? " element" : " elements",
                    " arrived wrong: the link corrupts data");
  } else if (link.below_floor()) {
    absl::StrAppend(&what, ": slow (below the job's floor of ",
                    FormatBandwidth(check.min_bytes_per_second()), ")");
  } else {
    absl::StrAppend(&what, absl::StrFormat(": slow (threshold %.2fx)", check.slow_ratio()));
  }
  RM_LOG(WARNING) << "job " << job->status.job_id() << " generation " << job->status.generation()
                  << " link check: " << what;
  v1::JobEvent& event = AddEvent(job, "slow_link", what);
  event.add_ranks(link.rank());
  event.add_ranks(link.peer_rank());
  metrics_.AddSlowLink(job->status.job_id(), link, &job->series);
}

void JobManager::JudgeLinks(Job* job) {
  const v1::LinkCheckSummary summary = job->gen.link_check->Summarize();
  // The verdict's series replace the previous check's (and this one's corruptions, named again).
  metrics_.ForgetLinks(&job->series);
  bool announced = false;
  // The previous verdict's slow links that this one does not name: recovered (its series is gone
  // with the others).
  auto same = [](const v1::LinkState& a, const v1::LinkState& b) {
    return a.group() == b.group() && a.rank() == b.rank() && a.peer_rank() == b.peer_rank() &&
           a.node() == b.node() && a.peer_node() == b.peer_node();
  };
  for (const v1::LinkState& was : job->slow_links) {
    if (std::any_of(summary.slow().begin(), summary.slow().end(),
                    [&](const v1::LinkState& now) { return same(was, now); })) {
      continue;
    }
    std::string what = absl::StrFormat(
        "%s: rank %d (%s) <-> rank %d (%s) recovered: not slow in the link check %s", was.group(),
        was.rank(), was.node(), was.peer_rank(), was.peer_node(),
        summary.step() > 0 ? absl::StrCat("after step ", summary.step())
                           : std::string("at the generation's start"));
    RM_LOG(INFO) << "job " << job->status.job_id() << ": link " << what;
    v1::JobEvent& event = AddEvent(job, "link_recovered", what);
    event.add_ranks(was.rank());
    event.add_ranks(was.peer_rank());
    announced = true;
  }
  job->slow_links.assign(summary.slow().begin(), summary.slow().end());
  if (summary.slow_size() == 0 && job->gen.link_watch != nullptr) {
    job->gen.link_watch->NothingFound();  // an automatic check's drop was not a link it can see
  }
  for (const v1::LinkState& link : summary.slow()) {
    if (link.wrong() > 0) {
      metrics_.AddSlowLink(job->status.job_id(), link,
                           &job->series);  // its event came with the report; only the series again
      continue;
    }
    AnnounceLink(job, link);
    announced = true;
  }
  if (summary.step() > 0) {
    // Someone asked for this check (ringctl check-links): say how it went, fine or not.
    int links = 0;
    for (const v1::LinkClass& c : summary.classes()) links += c.links();
    v1::JobEvent& verdict =
        AddEvent(job, "link_check",
                 absl::StrCat("link check after step ", summary.step(), ": ", links, " links, ",
                              summary.slow_size() == 0
                                  ? "none slow or corrupting"
                                  : absl::StrCat(summary.slow_size(), " slow or corrupting")));
    verdict.set_step(summary.step());
    std::set<int> ends;
    for (const v1::LinkState& link : summary.slow()) ends.insert({link.rank(), link.peer_rank()});
    for (int rank : ends) verdict.add_ranks(rank);
    announced = true;
  }
  if (announced) Persist(job);
  metrics_.SetLinkBandwidth(job->status.job_id(), summary, &job->series);
}

}  // namespace ringmaster::coordinator
