#include "ctl/commands.h"

#include <functional>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/file_contents.h"
#include "common/job_state.h"
#include "common/status.h"
#include "ctl/format.h"
#include "ctl/job_yaml.h"
#include "ctl/live_block.h"
#include "ctl/proto_yaml.h"
#include "google/protobuf/util/json_util.h"

namespace ringmaster::ctl {
namespace {

constexpr char kInputErrorPayload[] = "ringmaster.ctl/input-error";

absl::StatusOr<v1::JobSpec> ReadJobFile(const std::string& file) {
  if (file.empty()) return InputError(FieldError("-f", "a job file is required"));
  absl::StatusOr<std::string> text = ReadFileContents(file);
  if (!text.ok()) return InputError(FieldError("-f", text.status().message()));
  absl::StatusOr<v1::JobSpec> spec = ParseJobYaml(*text, file);
  if (!spec.ok()) return InputError(spec.status());
  return spec;
}

// The status block of a watch on a terminal, with what it shows.
struct LiveView {
  LiveBlock block;
  LiveStatus status;

  // Draws the block for the job as GetJob sees it now.
  absl::Status Start(const Client& client, const std::string& id);
  // An update of the watch: an event printed above the block, the block redrawn with the state
  // and progress. A snapshot with no step yet (a generation's start) keeps the figures shown.
  void Show(const v1::WatchJobResponse& update) {
    status.state = update.state();
    status.generation = update.generation();
    if (update.has_progress() && update.progress().step() > 0) status.progress = update.progress();
    if (update.has_event()) {
      block.Print(FormatEvent(update.event()), status);
    } else {
      block.Update(status);
    }
  }
};

// Streams WatchJob, one line per event and per progress change (no line for a snapshot with no
// step yet, nor for one equal to the last printed); returns the final state seen. A watch the coordinator ends with
// RESOURCE_EXHAUSTED after sending updates (it fell behind: this end read too slowly, e.g. into a
// stalled pipe; or it replayed as many stored events as one watch may) is resumed after the last
// event printed, so every event is printed once, in order (progress snapshots missed meanwhile
// are not replayed: they are not stored). The coordinator cuts only a watch
// 1,024 updates behind, so each resume follows updates this end read; a RESOURCE_EXHAUSTED before
// any update (an oversized event, which the replay sends first) ends the watch instead.
//
// With `live` (a terminal), events go above the live block instead and progress redraws it.
absl::StatusOr<v1::JobState> Stream(const Client& client, const std::string& id,
                                    std::ostream& out, LiveView* live) {
  v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
  int64_t after = 0;
  std::string last_progress;
  while (true) {
    auto context = client.Context(/*streaming=*/true);
    v1::WatchJobRequest request;
    request.set_job_id(id);
    request.set_after_sequence(after);
    auto reader = client.jobs()->WatchJob(context.get(), request);
    v1::WatchJobResponse update;
    bool got_updates = false;
    while (reader->Read(&update)) {
      got_updates = true;
      state = update.state();
      if (live != nullptr) {
        live->Show(update);
        if (update.has_event()) after = update.event().sequence();
        continue;
      }
      if (update.has_event()) {
        out << FormatEvent(update.event()) << "\n";
        after = update.event().sequence();
      } else if (update.has_progress() && update.progress().step() > 0) {
        // One line per change: a generation's start (step 0, nothing measured yet) and a
        // snapshot equal to the last one printed say nothing new.
        std::string line = FormatProgress(update.progress());
        if (line != last_progress) out << "progress  " << line << "\n";
        last_progress = std::move(line);
      }
      out.flush();
    }
    const grpc::Status status = reader->Finish();
    if (status.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED || !got_updates) {
      RETURN_IF_ERROR(client.Check(status));
      return state;
    }
    const std::string note = absl::StrCat("(the coordinator ended this watch: ",
                                          status.error_message(), "; resuming after event ",
                                          after, ")");
    if (live != nullptr) {
      live->block.Print(note);
    } else {
      out << note << "\n";
    }
  }
}

// `message` as -o json or -o yaml print it: every field, zeros included, proto field names.
absl::Status PrintStructured(const google::protobuf::Message& message, const std::string& output,
                             std::ostream& out) {
  if (output == "yaml") {
    out << ProtoToYaml(message);
    return absl::OkStatus();
  }
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  if (!google::protobuf::util::MessageToJsonString(message, &json, options).ok()) {
    return absl::InternalError("cannot render the response as JSON");
  }
  out << json;
  return absl::OkStatus();
}

absl::StatusOr<v1::GetJobResponse> FetchJob(const Client& client, const std::string& id) {
  v1::GetJobRequest request;
  request.set_job_id(id);
  v1::GetJobResponse response;
  RETURN_IF_ERROR(client.Check(client.jobs()->GetJob(client.Context().get(), request, &response)));
  return response;
}

absl::Status LiveView::Start(const Client& client, const std::string& id) {
  ASSIGN_OR_RETURN(v1::GetJobResponse job, FetchJob(client, id));
  status.job_id = id;
  status.state = job.job().state();
  status.generation = job.job().generation();
  status.total_steps = job.job().spec().trainer().steps();
  status.progress = job.job().progress();
  block.Update(status);
  return absl::OkStatus();
}

// Streams the watch of `id` to `out`: on a terminal (`live_view`) with the live block, which ends
// showing the job as GetJob sees it at the end (its last progress; the watch sends no snapshot
// once the job ended), with `final_line` printed above it; plain lines otherwise.
absl::StatusOr<v1::JobState> WatchTo(const Client& client, const std::string& id, bool live_view,
                                     std::ostream& out,
                                     const std::function<std::string(v1::JobState)>& final_line) {
  if (!live_view) {
    ASSIGN_OR_RETURN(v1::JobState state, Stream(client, id, out, nullptr));
    const std::string line = final_line(state);
    if (!line.empty()) out << line << "\n";
    return state;
  }
  LiveView live{LiveBlock(&out, TerminalWidth()), {}};
  RETURN_IF_ERROR(live.Start(client, id));
  ASSIGN_OR_RETURN(v1::JobState state, Stream(client, id, out, &live));
  live.status.state = state;
  if (absl::StatusOr<v1::GetJobResponse> end = FetchJob(client, id); end.ok()) {
    if (end->job().progress().step() > 0) live.status.progress = end->job().progress();
    live.status.state = end->job().state();
    live.status.generation = end->job().generation();
  }  // else: the block keeps the last update seen (the stream's end was reported already)
  const std::string line = final_line(state);
  if (line.empty()) {
    live.block.Update(live.status);
  } else {
    live.block.Print(line, live.status);
  }
  return state;
}

}  // namespace

absl::Status InputError(absl::Status status) {
  status.SetPayload(kInputErrorPayload, absl::Cord("1"));
  return status;
}

bool IsInputError(const absl::Status& status) {
  return status.GetPayload(kInputErrorPayload).has_value();
}

absl::Status Submit(const Client& client, const std::string& file, bool wait,
                    const std::string& request_id, std::ostream& out, bool live) {
  ASSIGN_OR_RETURN(v1::JobSpec spec, ReadJobFile(file));
  v1::SubmitJobRequest request;
  *request.mutable_spec() = spec;
  request.set_request_id(request_id);
  v1::SubmitJobResponse response;
  RETURN_IF_ERROR(
      client.Check(client.jobs()->SubmitJob(client.Context().get(), request, &response)));
  const v1::JobStatus& job = response.job();
  out << "job " << job.job_id() << " submitted: " << StateName(job.state())
      << (job.reason().empty() ? "" : " (" + job.reason() + ")") << "\n";
  if (!wait) return absl::OkStatus();
  ASSIGN_OR_RETURN(v1::JobState final_state,
                   WatchTo(client, job.job_id(), live, out,
                           [](v1::JobState) { return std::string(); }));
  if (final_state != v1::JOB_STATE_SUCCEEDED) {
    return absl::AbortedError(
        absl::StrCat("job ", job.job_id(), " ended ", StateName(final_state)));
  }
  return absl::OkStatus();
}

namespace {

// The states a comma-separated list of names (any case) names; an input error naming --state for
// a name that is not one.
absl::StatusOr<std::vector<v1::JobState>> ParseStates(const std::string& list) {
  std::vector<v1::JobState> states;
  if (list.empty()) return states;
  for (absl::string_view name : absl::StrSplit(list, ',')) {
    const std::optional<v1::JobState> state = StateFromName(absl::StripAsciiWhitespace(name));
    if (!state.has_value()) {
      return InputError(FieldError("--state", absl::StrCat("\"", name, "\" is not a job state (",
                                                           StateNames(), "; comma-separated)")));
    }
    states.push_back(*state);
  }
  return states;
}

}  // namespace

absl::Status CheckOutputFormat(const std::string& output) {
  if (output == "table" || output == "wide" || output == "json" || output == "yaml") {
    return absl::OkStatus();
  }
  return InputError(
      FieldError("-o", absl::StrCat("must be table, wide, json or yaml, got \"", output, "\"")));
}

absl::Status GetJobs(const Client& client, const std::string& states, std::ostream& out,
                     const std::string& output) {
  RETURN_IF_ERROR(CheckOutputFormat(output));
  ASSIGN_OR_RETURN(std::vector<v1::JobState> wanted, ParseStates(states));
  v1::ListJobsRequest request;
  for (v1::JobState state : wanted) request.add_states(state);
  std::vector<v1::JobStatus> jobs;
  do {  // page by page (the coordinator's default page, 100 jobs, keeps each response small)
    v1::ListJobsResponse response;
    RETURN_IF_ERROR(
        client.Check(client.jobs()->ListJobs(client.Context().get(), request, &response)));
    jobs.insert(jobs.end(), response.jobs().begin(), response.jobs().end());
    if (!response.next_page_token().empty() && response.next_page_token() == request.page_token()) {
      return absl::InternalError("the coordinator answered the same page token twice");
    }
    request.set_page_token(response.next_page_token());
  } while (!request.page_token().empty());
  if (output == "json" || output == "yaml") {
    v1::ListJobsResponse all;
    for (v1::JobStatus& j : jobs) *all.add_jobs() = std::move(j);
    return PrintStructured(all, output, out);
  }
  out << FormatJobTable(jobs, absl::Now(), output == "wide");
  return absl::OkStatus();
}

absl::Status GetJob(const Client& client, const std::string& id, const std::string& output,
                    std::ostream& out) {
  RETURN_IF_ERROR(CheckOutputFormat(output));
  ASSIGN_OR_RETURN(v1::GetJobResponse response, FetchJob(client, id));
  if (output == "table" || output == "wide") {
    out << FormatJobTable({response.job()}, absl::Now(), output == "wide");
    return absl::OkStatus();
  }
  return PrintStructured(response, output, out);
}

absl::Status Describe(const Client& client, const std::string& id, std::ostream& out) {
  v1::GetJobRequest request;
  request.set_job_id(id);
  v1::GetJobResponse response;
  RETURN_IF_ERROR(client.Check(client.jobs()->GetJob(client.Context().get(), request, &response)));
  out << DescribeJob(response);
  return absl::OkStatus();
}

absl::Status Cancel(const Client& client, const std::string& id, const std::string& reason,
                    std::ostream& out) {
  ASSIGN_OR_RETURN(v1::GetJobResponse before, FetchJob(client, id));
  const v1::JobState ended = before.job().state();
  if (ended == v1::JOB_STATE_CANCELLED) {
    out << "job " << id << " was already CANCELLED (" << before.job().reason() << ")\n";
    return absl::OkStatus();
  }
  if (IsTerminal(ended)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", id, " already ended ", StateName(ended), ": there is nothing to cancel (`ringctl "
        "describe job ", id, "` shows how it ended)"));
  }
  v1::CancelJobRequest request;
  request.set_job_id(id);
  request.set_reason(reason);
  v1::CancelJobResponse response;
  RETURN_IF_ERROR(
      client.Check(client.jobs()->CancelJob(client.Context().get(), request, &response)));
  out << "job " << id << " " << StateName(response.job().state()) << "\n";
  return absl::OkStatus();
}

absl::Status CheckLinks(const Client& client, const std::string& id, bool wait,
                        absl::Duration timeout, std::ostream& out) {
  v1::CheckLinksRequest request;
  request.set_job_id(id);
  v1::CheckLinksResponse response;
  RETURN_IF_ERROR(
      client.Check(client.jobs()->CheckLinks(client.Context().get(), request, &response)));
  const int64_t generation = response.job().generation();
  out << "link check requested for job " << id << " (generation " << generation
      << "): its ranks run it after an upcoming step\n";
  if (!wait) return absl::OkStatus();
  // The verdict is the first "link_check" event with a step after the request's own event (one
  // check serves every request made before it runs).
  const int64_t requested = response.request_sequence();
  if (requested <= 0) {
    return absl::FailedPreconditionError(
        "the coordinator did not say which event records the request (an older coordinator?): "
        "follow it with ringctl describe job");
  }
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    v1::GetJobRequest get;
    get.set_job_id(id);
    v1::GetJobResponse job;
    RETURN_IF_ERROR(client.Check(client.jobs()->GetJob(client.Context().get(), get, &job)));
    for (const v1::JobEvent& e : job.events()) {
      if (e.kind() != "link_check" || e.sequence() <= requested || e.step() <= 0) continue;
      out << e.message() << "\n";
      const v1::LinkCheckSummary& summary = job.link_check();
      if (summary.step() == e.step() && summary.ranks_reported() == summary.ranks_expected()) {
        out << DescribeLinkCheck(summary);  // still the current check: its details
      }
      if (e.ranks_size() > 0) {
        return absl::FailedPreconditionError(
            absl::StrCat("job ", id, ": the link check names slow or corrupting link(s) of ranks ",
                         absl::StrJoin(e.ranks(), ", ")));
      }
      return absl::OkStatus();
    }
    if (job.job().generation() != generation || job.job().state() != v1::JOB_STATE_RUNNING) {
      return absl::AbortedError(absl::StrCat("job ", id, " is ", StateName(job.job().state()),
                                             ", generation ", job.job().generation(),
                                             ", before its ranks finished the check"));
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "no link check result for job ", id, " within ", absl::FormatDuration(timeout),
          " (the ranks run it after their next step; a longer step needs a longer "
          "--wait_timeout; only the builtin trainer runs it, a command job's program may not)"));
    }
    absl::SleepFor(absl::Milliseconds(500));  // polling the coordinator, not synchronising
  }
}

absl::Status Watch(const Client& client, const std::string& id, std::ostream& out, bool live) {
  return WatchTo(client, id, live, out, [&](v1::JobState state) {
           return IsTerminal(state) ? absl::StrCat("job ", id, " ended ", StateName(state))
                                    : std::string();
         }).status();
}

absl::Status Top(const Client& client, const std::string& id, absl::Duration interval,
                 int iterations, bool live, int width, std::ostream& out) {
  if (interval <= absl::ZeroDuration()) {
    return InputError(FieldError("--interval", absl::StrCat("must be > 0 seconds, got ",
                                                            absl::FormatDuration(interval))));
  }
  if (iterations < 0) {
    return InputError(FieldError("-n", absl::StrCat("must be >= 0 (0: until the job ends), got ",
                                                    iterations)));
  }
  google::protobuf::RepeatedPtrField<v1::RankLiveState> last_seen;
  for (int i = 0; iterations == 0 || i < iterations; ++i) {
    if (i > 0) absl::SleepFor(interval);  // the refresh period, not a synchronisation
    ASSIGN_OR_RETURN(v1::GetJobResponse job, FetchJob(client, id));
    if (job.ranks_size() > 0) last_seen = job.ranks();
    const std::string screen = RenderTop(job, last_seen, live ? width : 0);
    if (live) {
      out << "\x1b[H\x1b[2J" << screen;  // cursor home, clear the screen, redraw
    } else {
      out << (i > 0 ? "\n" : "") << screen;
    }
    out.flush();
    if (IsTerminal(job.job().state())) break;
  }
  return absl::OkStatus();
}

namespace {

// Prints one rank's log as it arrives: raw with prefix "", else whole lines, each after `prefix`
// (a last line without a newline is printed at the end), under `mu` so ranks do not interleave
// within a line.
absl::Status StreamRankLog(const Client& client, const std::string& id, int rank, bool follow,
                           const std::string& prefix, absl::Mutex* mu, std::ostream& out) {
  auto context = client.Context(/*streaming=*/true);
  v1::ReadLogsRequest request;
  request.set_job_id(id);
  request.set_rank(rank);
  request.set_follow(follow);
  auto reader = client.jobs()->ReadLogs(context.get(), request);
  v1::ReadLogsResponse chunk;
  std::string pending;
  while (reader->Read(&chunk)) {
    if (prefix.empty()) {
      absl::MutexLock lock(mu);
      out << chunk.data();
      out.flush();
      continue;
    }
    pending += chunk.data();
    const size_t end = pending.rfind('\n');
    if (end == std::string::npos) continue;
    std::string lines;
    for (absl::string_view line : absl::StrSplit(absl::string_view(pending).substr(0, end), '\n')) {
      absl::StrAppend(&lines, prefix, line, "\n");
    }
    pending.erase(0, end + 1);
    absl::MutexLock lock(mu);
    out << lines;
    out.flush();
  }
  if (!pending.empty()) {
    absl::MutexLock lock(mu);
    out << prefix << pending << "\n";
  }
  return client.Check(reader->Finish());
}

// The coordinator is the authority on who may read a job's logs and which ranks exist: its
// range error ("rank: must be in [0, N), got R"), met only after its owner check, is explained
// here with what to do. Any other status, or one that GetJob cannot explain, passes unchanged.
absl::Status ExplainRankError(const Client& client, const std::string& id, int rank,
                              const absl::Status& status) {
  if (status.code() != absl::StatusCode::kInvalidArgument ||
      !absl::StartsWith(status.message(), "rank: must be in [0, ")) {
    return status;
  }
  absl::StatusOr<v1::GetJobResponse> job = FetchJob(client, id);
  if (!job.ok()) return status;
  const int ranks = job->job().assignments_size();
  if (ranks == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", id, " is ", StateName(job->job().state()),
        job->job().reason().empty() ? "" : " (" + job->job().reason() + ")",
        " and has no ranks placed, so no logs yet: `ringctl watch ", id,
        "` shows when its ranks start"));
  }
  if (rank >= ranks) {
    return FieldError("--rank", absl::StrCat("job ", id, " has ranks 0 to ", ranks - 1, ", got ",
                                             rank, " (leave --rank out for every rank)"));
  }
  return status;
}

}  // namespace

absl::Status Logs(const Client& client, const std::string& id, int rank, bool follow,
                  std::ostream& out) {
  absl::Mutex mu;
  if (rank >= 0) {
    return ExplainRankError(client, id, rank,
                            StreamRankLog(client, id, rank, follow, "", &mu, out));
  }
  ASSIGN_OR_RETURN(v1::GetJobResponse job, FetchJob(client, id));
  const int ranks = job.job().assignments_size();
  if (ranks == 0) {
    // Rank 0 asked of the coordinator, which checks the caller first: someone else's job says
    // so, one's own pending job that it has no ranks (placed meanwhile, rank 0's log prints).
    return ExplainRankError(client, id, 0, StreamRankLog(client, id, 0, follow, "", &mu, out));
  }
  if (!follow) {  // one rank after the other
    for (int r = 0; r < ranks; ++r) {
      RETURN_IF_ERROR(StreamRankLog(client, id, r, false, absl::StrCat("[rank ", r, "] "), &mu, out));
    }
    return absl::OkStatus();
  }
  std::vector<absl::Status> results(ranks);
  std::vector<std::thread> readers;
  for (int r = 0; r < ranks; ++r) {
    readers.emplace_back([&, r] {
      results[r] = StreamRankLog(client, id, r, true, absl::StrCat("[rank ", r, "] "), &mu, out);
    });
  }
  for (std::thread& t : readers) t.join();
  for (const absl::Status& s : results) RETURN_IF_ERROR(s);
  return absl::OkStatus();
}

absl::Status Nodes(const Client& client, std::ostream& out, const std::string& output) {
  RETURN_IF_ERROR(CheckOutputFormat(output));
  v1::ListNodesResponse response;
  RETURN_IF_ERROR(client.Check(
      client.jobs()->ListNodes(client.Context().get(), v1::ListNodesRequest(), &response)));
  if (output == "json" || output == "yaml") return PrintStructured(response, output, out);
  out << FormatNodes({response.nodes().begin(), response.nodes().end()}, absl::Now(),
                     output == "wide");
  return absl::OkStatus();
}

absl::Status UpdateNode(const Client& client, const std::string& node, v1::NodeAction action,
                        const std::string& reason, std::ostream& out) {
  v1::UpdateNodeRequest request;
  request.set_node(node);
  request.set_action(action);
  request.set_reason(reason);
  v1::UpdateNodeResponse response;
  RETURN_IF_ERROR(
      client.Check(client.jobs()->UpdateNode(client.Context().get(), request, &response)));
  out << FormatNodeUpdate(action, response);
  return absl::OkStatus();
}

absl::Status ReleaseNode(const Client& client, const std::string& node, std::ostream& out) {
  v1::UpdateNodeRequest request;
  request.set_node(node);
  request.set_release_identity(true);
  v1::UpdateNodeResponse response;
  RETURN_IF_ERROR(
      client.Check(client.jobs()->UpdateNode(client.Context().get(), request, &response)));
  out << "node " << node
      << " released: the next agent identity to register it holds it (a connected agent stays "
         "connected)\n";
  return absl::OkStatus();
}

absl::Status Plan(const Client& client, const std::string& file, std::ostream& out) {
  ASSIGN_OR_RETURN(v1::JobSpec spec, ReadJobFile(file));
  v1::PlanJobRequest request;
  *request.mutable_spec() = spec;
  v1::PlanJobResponse response;
  RETURN_IF_ERROR(client.Check(client.jobs()->PlanJob(client.Context().get(), request, &response)));
  out << FormatPlan(response);
  return absl::OkStatus();
}

}  // namespace ringmaster::ctl
