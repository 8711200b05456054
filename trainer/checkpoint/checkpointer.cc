#include "trainer/checkpoint/checkpointer.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file_contents.h"
#include "common/logging.h"
#include "common/status.h"

namespace ringmaster::trainer {
namespace {

namespace fs = std::filesystem;

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Each rank's contribution to the commit decision: whether its file is durable, its size and
// CRC-32C.
struct Record {
  int32_t ok = 0;
  int32_t crc = 0;
  int64_t bytes = 0;
};
static_assert(sizeof(Record) == 16, "Record is exchanged as 4 int32 values");

Tensor I32View(void* data, int64_t count) { return Tensor{data, count, DType::kI32}; }

// What a rank returns when another one found the generation stale (CheckOwner).
absl::Status StaleOnAnotherRank(const std::string& what) {
  return absl::AbortedError(absl::StrCat(what,
                                         ": another rank found checkpoint.dir claimed by a newer "
                                         "generation of this job or by another job (its log "
                                         "says which); stopping without writing to it"));
}

}  // namespace

Checkpointer::Checkpointer(CheckpointOptions options, CheckpointLayout layout, Communicator* ctl,
                           const StatePartition* partition)
    : options_(std::move(options)), layout_(layout), ctl_(ctl), partition_(partition) {}

Checkpointer::~Checkpointer() {
  if (writer_.joinable()) writer_.join();
}

std::string Checkpointer::StepDir(int64_t step) const {
  return (fs::path(options_.dir) / StepDirName(step)).string();
}

std::vector<int64_t> Checkpointer::CommittedSteps() const {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(options_.dir, ec)) {
    const std::string name = entry.path().filename().string();
    int64_t step = 0;
    if (name.rfind("step-", 0) == 0 && absl::SimpleAtoi(name.substr(5), &step) &&
        fs::exists(entry.path() / "MANIFEST")) {
      steps.push_back(step);
    }
  }
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

absl::StatusOr<Manifest> Checkpointer::ReadManifest(int64_t step) const {
  const std::string dir = StepDir(step);
  ASSIGN_OR_RETURN(std::string text, ReadFileContents(dir + "/MANIFEST"));
  ASSIGN_OR_RETURN(Manifest manifest, ParseManifest(text));
  if (manifest.step != step) {
    return absl::DataLossError(absl::StrCat(dir, "/MANIFEST names step ", manifest.step));
  }
  return manifest;
}

absl::StatusOr<Manifest> Checkpointer::CheckSizes(int64_t step) const {
  ASSIGN_OR_RETURN(Manifest manifest, ReadManifest(step));
  const std::string dir = StepDir(step);
  for (const ManifestFile& f : manifest.files) {
    std::error_code ec;
    const uintmax_t bytes = fs::file_size(dir + "/" + f.name, ec);
    if (ec) return absl::DataLossError(absl::StrCat(dir, "/", f.name, ": ", ec.message()));
    if (static_cast<int64_t>(bytes) != f.bytes) {
      return absl::DataLossError(absl::StrCat(dir, "/", f.name, " has ", bytes,
                                              " bytes, its MANIFEST entry ", f.bytes,
                                              ": torn or corrupt"));
    }
  }
  return manifest;
}

absl::StatusOr<std::optional<RankState>> Checkpointer::Resume(int source_rank) {
  std::vector<int64_t> steps;  // rank 0's candidates, newest first
  absl::Status owner;          // rank 0's claim of the directory
  if (ctl_->rank() == 0 && !options_.dir.empty()) {
    owner = CheckOwner(/*claim=*/true);
    if (owner.ok()) {
      RemoveUncommitted(/*before=*/std::numeric_limits<int64_t>::max());
      steps = CommittedSteps();
    }
  }
  size_t next = 0;
  for (;;) {
    // Rank 0 proposes, the others learn its proposal: {step or -1, layout matches (1), not (0),
    // this generation is stale (2), or it differs in the data-parallel degree only (3)}.
    int64_t proposal[2] = {-1, owner.ok() ? 1 : 2};
    std::string mismatch;
    while (ctl_->rank() == 0 && next < steps.size()) {
      const int64_t step = steps[next++];
      absl::StatusOr<Manifest> m = CheckSizes(step);
      if (!m.ok()) {
        RM_LOG(WARNING) << "skipping checkpoint at step " << step << ": " << m.status().message();
        continue;
      }
      proposal[0] = step;
      if (!SameLayout(m->layout, layout_)) {
        const absl::Status reshardable = CheckReshardable(m->layout, layout_);
        if (partition_ != nullptr && reshardable.ok()) {
          proposal[1] = 3;
          RM_LOG(INFO) << "resharding the checkpoint at step " << step << " from "
                       << m->layout.ToString() << " to " << layout_.ToString();
        } else {
          proposal[1] = 0;
          mismatch = absl::StrCat(m->layout.ToString(), "; this run has ", layout_.ToString(),
                                  ": ",
                                  reshardable.ok() ? "this trainer cannot reshard it"
                                                   : std::string(reshardable.message()));
        }
      }
      break;
    }
    RETURN_IF_ERROR(ctl_->Broadcast(I32View(proposal, 4), 0));
    if (proposal[1] == 2) {
      return ctl_->rank() == 0 ? owner : StaleOnAnotherRank("resume");
    }
    if (proposal[1] == 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the newest complete checkpoint (step ", proposal[0], ") was written with layout ",
          mismatch.empty() ? absl::StrCat("(see rank 0's log); this run has ", layout_.ToString())
                           : mismatch,
          "; resume with the same layout, or another data-parallel degree only, or use another "
          "checkpoint.dir"));
    }
    if (proposal[0] < 0) return std::nullopt;
    // Every rank reads and verifies the one file it needs, all at once; then they agree: a
    // damaged file (DATA_LOSS) anywhere means the next older checkpoint for all, any other
    // failure (a file this run cannot use, an I/O or permission error) ends the resume on all,
    // since an older checkpoint would not fix it and a fresh start would lose the run.
    absl::StatusOr<RankState> state =
        proposal[1] == 3 ? LoadResharded(proposal[0]) : Load(proposal[0], source_rank);
    bool votes[2] = {absl::IsDataLoss(state.status()),
                     !state.ok() && !absl::IsDataLoss(state.status())};
    RETURN_IF_ERROR(ctl_->AnyOf(absl::MakeSpan(votes)));
    if (votes[1]) {
      if (!state.ok()) return state.status();
      return absl::AbortedError(absl::StrCat("checkpoint at step ", proposal[0],
                                             ": another rank could not read its file (its log "
                                             "says why)"));
    }
    if (!votes[0]) return std::optional<RankState>(std::move(*state));
    if (!state.ok()) {
      RM_LOG(WARNING) << "skipping checkpoint at step " << proposal[0] << ": "
                      << state.status().message();
    } else if (ctl_->rank() == 0) {
      RM_LOG(WARNING) << "skipping checkpoint at step " << proposal[0]
                      << ": another rank's file is damaged (its log says which)";
    }
  }
}

absl::StatusOr<RankState> Checkpointer::Load(int64_t step, int source_rank) {
  ASSIGN_OR_RETURN(Manifest manifest, ReadManifest(step));
  if (source_rank < 0 || source_rank >= static_cast<int>(manifest.files.size())) {
    return absl::FailedPreconditionError(
        absl::StrCat("no rank ", source_rank, "'s file in ", StepDir(step)));
  }
  const ManifestFile& f = manifest.files[source_rank];
  // Resume found the layouts the same (SameLayout): a checkpoint that did not record its bucket
  // has none in its files' headers either.
  CheckpointLayout expected = layout_;
  if (manifest.layout.bucket == 0) expected.bucket = 0;
  return ReadRankFile(StepDir(step) + "/" + f.name, f, expected, step);
}

absl::StatusOr<RankState> Checkpointer::LoadResharded(int64_t step) {
  if (partition_ == nullptr) {
    return absl::FailedPreconditionError("resharding a checkpoint needs the state's partition");
  }
  ASSIGN_OR_RETURN(Manifest manifest, ReadManifest(step));
  ASSIGN_OR_RETURN(ReshardPlan plan,
                   PlanReshard(manifest.layout, layout_, ctl_->rank(), *partition_));
  return AssembleState(plan, [&](const ReshardSource& source) -> absl::StatusOr<RankState> {
    if (source.rank >= static_cast<int>(manifest.files.size())) {
      return absl::FailedPreconditionError(
          absl::StrCat("no rank ", source.rank, "'s file in ", StepDir(step)));
    }
    const ManifestFile& f = manifest.files[source.rank];
    return ReadRankFile(StepDir(step) + "/" + f.name, f, source.layout, step);
  });
}

absl::Status Checkpointer::Save(RankState state) {
  RETURN_IF_ERROR(Flush());
  const double start = NowSeconds();
  writer_ = std::thread([this, state = std::move(state), start] {
    absl::Status s = Write(state, start);
    absl::MutexLock lock(&mu_);
    if (!s.ok() && writer_status_.ok()) writer_status_ = s;
  });
  return absl::OkStatus();
}

bool Checkpointer::failed() const {
  absl::MutexLock lock(&mu_);
  return !writer_status_.ok();
}

absl::Status Checkpointer::Flush() {
  if (writer_.joinable()) writer_.join();
  absl::MutexLock lock(&mu_);
  absl::Status s = writer_status_;
  writer_status_ = absl::OkStatus();
  return s;
}

std::optional<CommittedCheckpoint> Checkpointer::TakeCommitted() {
  absl::MutexLock lock(&mu_);
  return std::exchange(committed_, std::nullopt);
}

std::vector<CheckpointFailure> Checkpointer::TakeFailures() {
  absl::MutexLock lock(&mu_);
  return std::exchange(failures_, {});
}

absl::Status Checkpointer::Write(const RankState& state, double start_seconds) {
  const int rank = ctl_->rank();
  const std::string dir = StepDir(state.step);
  Record mine;
  // Every rank checks the owner before writing its file, so a stale generation's files do not
  // replace those of a checkpoint the new one committed at the same step.
  absl::Status fence = CheckOwner(/*claim=*/false);
  std::error_code ec;
  if (fence.ok()) fs::create_directories(dir, ec);
  absl::StatusOr<ManifestFile> file =
      !fence.ok() ? absl::StatusOr<ManifestFile>(fence)
      : ec        ? absl::StatusOr<ManifestFile>(
                 absl::UnavailableError(absl::StrCat("cannot create ", dir, ": ", ec.message())))
           : WriteRankFile(dir + "/" + RankFileName(rank), rank, layout_, state);
  if (file.ok()) {
    mine.ok = 1;
    mine.crc = static_cast<int32_t>(file->crc32c);
    mine.bytes = file->bytes;
  } else if (!fence.ok()) {
    mine.ok = -1;  // stale
  } else {
    // A rank that cannot write makes this checkpoint incomplete; training goes on and the next
    // checkpoint tries again.
    RM_LOG(ERROR) << "checkpoint at step " << state.step << ": " << file.status();
  }
  std::vector<Record> all(ctl_->size());
  RETURN_IF_ERROR(ctl_->AllGather(I32View(&mine, 4), I32View(all.data(), 4 * ctl_->size())));
  int32_t committed = 0;  // 1: committed, -1: this generation is stale
  absl::Status commit_error;  // rank 0: the MANIFEST's
  std::vector<int> failed_ranks;  // rank 0: those that could not write their files
  if (rank == 0) {
    std::vector<ManifestFile> files;
    bool complete = true;
    for (int r = 0; r < ctl_->size(); ++r) {
      complete = complete && all[r].ok == 1;
      if (all[r].ok == 0) failed_ranks.push_back(r);
      if (all[r].ok == -1) committed = -1;
      files.push_back({r, RankFileName(r), all[r].bytes, static_cast<uint32_t>(all[r].crc)});
    }
    // Checked again before the MANIFEST: the files took a while to write.
    if (committed == 0) fence = CheckOwner(/*claim=*/false);
    if (!fence.ok()) committed = -1;
    if (committed == -1) {
      // Stale: nothing is committed or pruned.
    } else if (complete) {
      absl::Status s = Commit(state.step, files);
      if (s.ok()) {
        committed = 1;
      } else {
        RM_LOG(ERROR) << "checkpoint at step " << state.step << " not committed: " << s;
        commit_error = s;
      }
    } else {
      RM_LOG(ERROR) << "checkpoint at step " << state.step << " not committed: a rank failed";
    }
  }
  RETURN_IF_ERROR(ctl_->Broadcast(I32View(&committed, 1), 0));
  if (committed == -1) {
    // This rank's own finding, else another rank's.
    return fence.ok() ? StaleOnAnotherRank(absl::StrCat("the checkpoint at step ", state.step))
                      : fence;
  }
  if (committed == 1) {
    consecutive_failures_ = 0;
    absl::MutexLock lock(&mu_);
    committed_ = CommittedCheckpoint{state.step, NowSeconds() - start_seconds};
    return absl::OkStatus();
  }
  // Not committed: nothing of it stays to fill the disk, and this rank's own failure, if it had
  // one, goes to the caller to report.
  RemoveFailed(state.step);
  ++consecutive_failures_;
  const absl::Status own = !file.ok() ? file.status() : commit_error;
  if (!own.ok()) {
    absl::MutexLock lock(&mu_);
    failures_.push_back({state.step, own, consecutive_failures_});
  }
  const int most = options_.max_consecutive_failures;
  if (most <= 0 || consecutive_failures_ < most) return absl::OkStatus();
  const std::string why =
      !own.ok()         ? own.ToString()
      : rank == 0       ? absl::StrCat("rank(s) ", absl::StrJoin(failed_ranks, ", "),
                                       " could not write their files (their logs say why)")
                        : std::string("another rank could not write its file (its log says why)");
  return absl::FailedPreconditionError(absl::StrCat(
      "checkpoint.dir ", options_.dir, ": ", consecutive_failures_,
      " checkpoints in a row could not be saved (checkpoint.max_consecutive_failures is ", most,
      "); the last, at step ", state.step, ": ", why));
}

void Checkpointer::RemoveFailed(int64_t step) const {
  const std::string dir = StepDir(step);
  std::error_code ec;
  if (ctl_->rank() == 0) {
    fs::remove_all(dir, ec);
    if (ec) RM_LOG(WARNING) << "cannot remove " << dir << ": " << ec.message();
    return;
  }
  // Where the directory is shared, rank 0 removes it all; these removals then find nothing (or
  // a directory not yet empty), which is no error.
  fs::remove(fs::path(dir) / RankFileName(ctl_->rank()), ec);
  fs::remove(dir, ec);
}

void Checkpointer::RemoveUncommitted(int64_t before) const {
  std::error_code ec;
  int removed = 0;
  for (const auto& entry : fs::directory_iterator(options_.dir, ec)) {
    const std::string name = entry.path().filename().string();
    int64_t step = 0;
    std::error_code exists;
    if (name.rfind("step-", 0) == 0 && absl::SimpleAtoi(name.substr(5), &step) &&
        step < before && !fs::exists(entry.path() / "MANIFEST", exists)) {
      std::error_code gone;
      fs::remove_all(entry.path(), gone);
      if (gone) {
        RM_LOG(WARNING) << "cannot remove " << entry.path().string() << ": " << gone.message();
      } else {
        ++removed;
      }
    }
  }
  if (removed > 0) {
    RM_LOG(INFO) << "removed " << removed << " uncommitted checkpoint director"
                 << (removed == 1 ? "y" : "ies") << " from " << options_.dir;
  }
}

absl::Status Checkpointer::Commit(int64_t step, const std::vector<ManifestFile>& files) {
  Manifest m;
  m.step = step;
  m.layout = layout_;
  m.files = files;
  RETURN_IF_ERROR(WriteFileDurably(StepDir(step) + "/MANIFEST", FormatManifest(m)));
  RM_LOG(INFO) << "checkpoint at step " << step << " committed in " << StepDir(step);
  return Prune();
}

absl::Status Checkpointer::CheckOwner(bool claim) {
  if (options_.generation <= 0 || options_.dir.empty()) return absl::OkStatus();
  const std::string path = options_.dir + "/OWNER";
  std::error_code ec;
  if (fs::exists(path, ec)) {
    absl::StatusOr<std::string> text = ReadFileContents(path);
    absl::StatusOr<CheckpointOwner> owner =
        text.ok() ? ParseOwner(*text) : absl::StatusOr<CheckpointOwner>(text.status());
    if (!owner.ok()) {
      RM_LOG(WARNING) << "ignoring " << path << ": " << owner.status().message();
    } else if (owner->job == options_.job && owner->generation > options_.generation) {
      return absl::AbortedError(absl::StrCat(
          "generation ", options_.generation, " of job ", options_.job, " is stale: generation ",
          owner->generation, " has claimed ", options_.dir,
          " (this one went on running after the job was restarted); stopping without writing "
          "to it"));
    } else if (owner->job != options_.job && !claim) {
      // Claimed by another job since this generation resumed (a resubmission continuing from
      // the directory): this one went on after its job ended or moved.
      return absl::AbortedError(absl::StrCat("job ", owner->job, " has claimed ", options_.dir,
                                             " since generation ", options_.generation, " of job ",
                                             options_.job,
                                             " resumed from it; stopping without writing to it"));
    }
  }
  if (!claim) return absl::OkStatus();
  fs::create_directories(options_.dir, ec);
  const absl::Status claimed =
      ec ? absl::UnavailableError(absl::StrCat("cannot create ", options_.dir, ": ", ec.message()))
         : WriteFileDurably(path, FormatOwner({options_.job, options_.generation}));
  if (!claimed.ok()) {
    RM_LOG(WARNING) << "cannot claim " << options_.dir << " for generation " << options_.generation
                    << ": " << claimed.message()
                    << " (an older generation still running would not be stopped)";
  }
  return absl::OkStatus();
}

absl::Status Checkpointer::Prune() {
  const std::vector<int64_t> steps = CommittedSteps();
  if (steps.empty()) return absl::OkStatus();
  std::error_code ec;
  for (size_t i = static_cast<size_t>(std::max(options_.keep, 1)); i < steps.size(); ++i) {
    fs::remove_all(StepDir(steps[i]), ec);
    if (ec) RM_LOG(WARNING) << "cannot remove " << StepDir(steps[i]) << ": " << ec.message();
  }
  // Leftovers of checkpoints that never committed, older than the newest committed one.
  RemoveUncommitted(steps.front());
  return absl::OkStatus();
}

}  // namespace ringmaster::trainer
