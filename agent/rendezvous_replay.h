// What an agent re-sends to a coordinator that restarted, so that a rendezvous under way survives
// it: the coordinator keeps each generation's key/value store in memory only.
//
// It remembers the keys its workers set that the coordinator acknowledged (the latest value of
// each, by job and generation), and the requests still waiting for an answer. After every new
// stream's RegisterAck the agent sends the remembered sets first (request id 0: nobody waits for
// their answers), then the unanswered requests again with their own ids and deadlines. Every
// operation is idempotent (a set overwrites with the same value, a get or wait reads), so sending
// one to a coordinator that already had it changes nothing; a stale generation's is refused by
// the coordinator.
//
// Bounded: sets of at most kMaxGenerations (job, generation) pairs and kMaxBytes of keys and
// values in all; past either the oldest generation is forgotten, and a set that alone exceeds
// kMaxBytes is not remembered (a coordinator restart then loses it, as without this class).
//
// Not thread-safe: the agent calls it under its own lock.
#ifndef RINGMASTER_AGENT_RENDEZVOUS_REPLAY_H_
#define RINGMASTER_AGENT_RENDEZVOUS_REPLAY_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "proto/ringmaster/v1/agent.pb.h"

namespace ringmaster::agent {

class RendezvousReplay {
 public:
  static constexpr size_t kMaxGenerations = 64;
  static constexpr size_t kMaxBytes = 16 << 20;

  // A request was sent to the coordinator (it carries a request id > 0).
  void Sent(const v1::RendezvousRequest& request);
  // The coordinator answered request `id` with status code `code` (0: OK); a set answered OK is
  // remembered. Unknown ids are ignored.
  void Answered(int64_t id, int code);
  // The requester stopped waiting for `id` (its deadline passed, or the agent is shutting down).
  void Abandoned(int64_t id);
  // A newer generation of the job started here: the older ones' sets are forgotten.
  void NewGeneration(const std::string& job_id, int64_t generation);
  // No worker of the job's `generation` (or older) runs here any more: the sets of those
  // generations are forgotten, so they are not sent to every later stream only to be refused as
  // stale. A newer generation's (launched meanwhile) are kept.
  void ForgetThrough(const std::string& job_id, int64_t generation);

  // What to send on a new stream after RegisterAck, in order: the remembered sets, then the
  // unanswered requests by id.
  std::vector<v1::RendezvousRequest> ToResend() const;

  // Bytes of keys and values remembered (for tests).
  size_t bytes() const { return bytes_; }

 private:
  using Generation = std::pair<std::string, int64_t>;  // (job id, generation)

  void Remember(const v1::RendezvousRequest& set);
  void Forget(const Generation& generation);

  std::map<int64_t, v1::RendezvousRequest> unanswered_;
  std::map<Generation, std::map<std::string, std::string>> sets_;
  std::deque<Generation> order_;  // sets_' generations, oldest first
  size_t bytes_ = 0;
};

}  // namespace ringmaster::agent

#endif  // RINGMASTER_AGENT_RENDEZVOUS_REPLAY_H_
