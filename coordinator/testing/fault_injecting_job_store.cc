#include "coordinator/testing/fault_injecting_job_store.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/enum_name.h"
#include "common/status.h"

namespace ringmaster::coordinator {
namespace {

absl::Status Crashed() { return absl::UnavailableError("the store crashed (injected)"); }

}  // namespace

absl::string_view JobStoreWriteName(JobStoreWrite write) {
  static constexpr std::pair<JobStoreWrite, absl::string_view> kNames[] = {
      {JobStoreWrite::kPutJob, "PutJob"},
      {JobStoreWrite::kAppendEvent, "AppendEvent"},
      {JobStoreWrite::kPutJobWithEvents, "PutJobWithEvents"},
      {JobStoreWrite::kCreateJob, "CreateJob"},
      {JobStoreWrite::kDeleteJobs, "DeleteJobs"},
      {JobStoreWrite::kPutCordon, "PutCordon"},
      {JobStoreWrite::kPutNodeIdentity, "PutNodeIdentity"}};
  return EnumName(kNames, write, "?");
}

absl::Status FaultInjectingJobStore::InjectedFailure() {
  return absl::UnavailableError("injected write failure");
}

FaultInjectingJobStore::FaultInjectingJobStore(std::unique_ptr<JobStore> base)
    : base_(std::move(base)) {}

FaultInjectingJobStore::~FaultInjectingJobStore() {
  absl::MutexLock lock(&mu_);
  holding_ = false;
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return held_ == 0 && in_flight_ == 0; };
  mu_.Await(absl::Condition(&idle));
}

void FaultInjectingJobStore::FailNextWrites(int count, absl::Status status) {
  absl::MutexLock lock(&mu_);
  fail_next_ = count;
  fail_next_status_ = std::move(status);
}

void FaultInjectingJobStore::FailWrites(std::optional<JobStoreWrite> method, absl::Status status) {
  absl::MutexLock lock(&mu_);
  failing_ = true;
  fail_method_ = method;
  fail_status_ = std::move(status);
}

void FaultInjectingJobStore::HealWrites() {
  absl::MutexLock lock(&mu_);
  fail_next_ = 0;
  failing_ = false;
}

void FaultInjectingJobStore::SetWriteLatency(FakeClock* clock, absl::Duration latency) {
  absl::MutexLock lock(&mu_);
  latency_clock_ = clock;
  latency_ = latency;
}

void FaultInjectingJobStore::HoldWrites() {
  absl::MutexLock lock(&mu_);
  holding_ = true;
}

void FaultInjectingJobStore::ReleaseWrites() {
  absl::MutexLock lock(&mu_);
  holding_ = false;
}

bool FaultInjectingJobStore::AwaitHeldWrites(int count, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto enough = [this, count]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return held_ >= count; };
  return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

void FaultInjectingJobStore::CrashAfterWrites(int count) {
  std::unique_ptr<JobStore> closed;  // destroyed outside the lock
  absl::MutexLock lock(&mu_);
  if (count > 0) {
    writes_until_crash_ = count;
    return;
  }
  crashed_ = true;
  writes_until_crash_.reset();
  if (in_flight_ == 0) closed = std::move(base_);
}

bool FaultInjectingJobStore::crashed() const {
  absl::MutexLock lock(&mu_);
  return crashed_;
}

std::vector<JobStoreWrite> FaultInjectingJobStore::writes() const {
  absl::MutexLock lock(&mu_);
  return writes_;
}

int64_t FaultInjectingJobStore::injected_failures() const {
  absl::MutexLock lock(&mu_);
  return injected_failures_;
}

int64_t FaultInjectingJobStore::write_attempts() const {
  absl::MutexLock lock(&mu_);
  return write_attempts_;
}

absl::Status FaultInjectingJobStore::Write(JobStoreWrite write,
                                           const std::function<absl::Status(JobStore*)>& call) {
  JobStore* base = nullptr;
  FakeClock* clock = nullptr;
  absl::Duration latency;
  {
    absl::MutexLock lock(&mu_);
    ++write_attempts_;
    ++held_;
    auto open = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !holding_; };
    mu_.Await(absl::Condition(&open));
    --held_;
    if (crashed_) return Crashed();
    if (fail_next_ > 0) {
      --fail_next_;
      ++injected_failures_;
      return Annotate(fail_next_status_, absl::StrCat("JobStore::", JobStoreWriteName(write)));
    }
    if (failing_ && (!fail_method_.has_value() || *fail_method_ == write)) {
      ++injected_failures_;
      return Annotate(fail_status_, absl::StrCat("JobStore::", JobStoreWriteName(write)));
    }
    clock = latency_clock_;
    latency = latency_;
    base = base_.get();
    ++in_flight_;
  }
  if (clock != nullptr && latency > absl::ZeroDuration()) clock->Advance(latency);
  absl::Status status = call(base);
  {
    absl::MutexLock lock(&mu_);
    writes_.push_back(write);
    if (writes_until_crash_.has_value() && --*writes_until_crash_ <= 0) {
      crashed_ = true;
      writes_until_crash_.reset();
    }
  }
  EndCall();
  return status;
}

JobStore* FaultInjectingJobStore::BeginRead() {
  absl::MutexLock lock(&mu_);
  if (crashed_) return nullptr;
  ++in_flight_;
  return base_.get();
}

void FaultInjectingJobStore::EndCall() {
  std::unique_ptr<JobStore> closed;  // destroyed outside the lock
  absl::MutexLock lock(&mu_);
  --in_flight_;
  if (crashed_ && in_flight_ == 0) closed = std::move(base_);
}

template <typename T>
absl::StatusOr<T> FaultInjectingJobStore::Read(
    const std::function<absl::StatusOr<T>(JobStore*)>& call) {
  JobStore* base = BeginRead();
  if (base == nullptr) return Crashed();
  absl::StatusOr<T> result = call(base);
  EndCall();
  return result;
}

absl::Status FaultInjectingJobStore::PutJob(const v1::JobStatus& status) {
  return Write(JobStoreWrite::kPutJob, [&](JobStore* base) { return base->PutJob(status); });
}

absl::Status FaultInjectingJobStore::AppendEvent(const std::string& job_id,
                                                 const v1::JobEvent& event) {
  return Write(JobStoreWrite::kAppendEvent,
               [&](JobStore* base) { return base->AppendEvent(job_id, event); });
}

absl::Status FaultInjectingJobStore::PutJobWithEvents(const v1::JobStatus& status,
                                                      const std::vector<v1::JobEvent>& events) {
  return Write(JobStoreWrite::kPutJobWithEvents,
               [&](JobStore* base) { return base->PutJobWithEvents(status, events); });
}

absl::StatusOr<std::vector<StoredJob>> FaultInjectingJobStore::LoadAll(size_t newest_events) {
  return Read<std::vector<StoredJob>>([&](JobStore* base) { return base->LoadAll(newest_events); });
}

absl::StatusOr<std::vector<v1::JobEvent>> FaultInjectingJobStore::ReadEvents(
    const std::string& job_id, int64_t after_sequence, int64_t up_to_sequence) {
  return Read<std::vector<v1::JobEvent>>(
      [&](JobStore* base) { return base->ReadEvents(job_id, after_sequence, up_to_sequence); });
}

absl::StatusOr<std::optional<std::string>> FaultInjectingJobStore::FindRequest(
    const std::string& request_id) {
  return Read<std::optional<std::string>>(
      [&](JobStore* base) { return base->FindRequest(request_id); });
}

absl::Status FaultInjectingJobStore::CreateJob(const v1::JobStatus& status,
                                               const std::vector<v1::JobEvent>& events,
                                               const std::string& request_id) {
  return Write(JobStoreWrite::kCreateJob,
               [&](JobStore* base) { return base->CreateJob(status, events, request_id); });
}

absl::Status FaultInjectingJobStore::DeleteJobs(const std::vector<std::string>& job_ids) {
  return Write(JobStoreWrite::kDeleteJobs,
               [&](JobStore* base) { return base->DeleteJobs(job_ids); });
}

absl::StatusOr<bool> FaultInjectingJobStore::JobIdUsed(const std::string& job_id) {
  return Read<bool>([&](JobStore* base) { return base->JobIdUsed(job_id); });
}

absl::Status FaultInjectingJobStore::PutCordon(const std::string& node,
                                               const std::optional<v1::NodeCordon>& cordon) {
  return Write(JobStoreWrite::kPutCordon,
               [&](JobStore* base) { return base->PutCordon(node, cordon); });
}

absl::StatusOr<std::vector<std::pair<std::string, v1::NodeCordon>>>
FaultInjectingJobStore::LoadCordons() {
  return Read<std::vector<std::pair<std::string, v1::NodeCordon>>>(
      [](JobStore* base) { return base->LoadCordons(); });
}

absl::Status FaultInjectingJobStore::PutNodeIdentity(const std::string& node,
                                                     const std::optional<std::string>& identity) {
  return Write(JobStoreWrite::kPutNodeIdentity,
               [&](JobStore* base) { return base->PutNodeIdentity(node, identity); });
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>>
FaultInjectingJobStore::LoadNodeIdentities() {
  return Read<std::vector<std::pair<std::string, std::string>>>(
      [](JobStore* base) { return base->LoadNodeIdentities(); });
}

}  // namespace ringmaster::coordinator
