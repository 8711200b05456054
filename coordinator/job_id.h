// Job ids: the job's name, a dash and a random hex suffix ("train-gpt-3f2a").
#ifndef RINGMASTER_COORDINATOR_JOB_ID_H_
#define RINGMASTER_COORDINATOR_JOB_ID_H_

#include <cstdint>
#include <functional>
#include <string>

namespace ringmaster::coordinator {

// A new id for a job named `name`: `random()`'s low 16 bits as 4 hex digits, while fewer than 8
// tries collide with an id for which `taken` is true; then 8 digits (32 bits), then 16 (64 bits).
// Ids stay short for the common case, and a name used for very many jobs (a nightly job's 65,536
// ids of 4 digits can all be taken) still gets a free one.
std::string NewJobId(const std::string& name, const std::function<uint64_t()>& random,
                     const std::function<bool(const std::string&)>& taken);

}  // namespace ringmaster::coordinator

#endif  // RINGMASTER_COORDINATOR_JOB_ID_H_
