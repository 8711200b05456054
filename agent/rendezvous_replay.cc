#include "agent/rendezvous_replay.h"

#include <algorithm>
#include <limits>

namespace ringmaster::agent {

void RendezvousReplay::Sent(const v1::RendezvousRequest& request) {
  if (request.request_id() > 0) unanswered_[request.request_id()] = request;
}

void RendezvousReplay::Answered(int64_t id, int code) {
  auto it = unanswered_.find(id);
  if (it == unanswered_.end()) return;
  if (code == 0 && it->second.op_case() == v1::RendezvousRequest::kSetValue) {
    Remember(it->second);
  }
  unanswered_.erase(it);
}

void RendezvousReplay::Abandoned(int64_t id) { unanswered_.erase(id); }

void RendezvousReplay::NewGeneration(const std::string& job_id, int64_t generation) {
  std::vector<Generation> older;
  for (const auto& [g, values] : sets_) {
    if (g.first == job_id && g.second < generation) older.push_back(g);
  }
  for (const Generation& g : older) Forget(g);
}

void RendezvousReplay::ForgetThrough(const std::string& job_id, int64_t generation) {
  if (generation < std::numeric_limits<int64_t>::max()) NewGeneration(job_id, generation + 1);
}

void RendezvousReplay::Remember(const v1::RendezvousRequest& set) {
  const size_t size = set.key().size() + set.set_value().size();
  if (size > kMaxBytes) return;
  const Generation g{set.job().job_id(), set.job().generation()};
  auto [values, fresh] = sets_.try_emplace(g);
  if (fresh) order_.push_back(g);
  auto [slot, added] = values->second.try_emplace(set.key());
  if (!added) bytes_ -= set.key().size() + slot->second.size();
  slot->second = set.set_value();
  bytes_ += size;
  while ((bytes_ > kMaxBytes || order_.size() > kMaxGenerations) && !order_.empty()) {
    Forget(order_.front());
  }
}

void RendezvousReplay::Forget(const Generation& generation) {
  auto it = sets_.find(generation);
  if (it == sets_.end()) return;
  for (const auto& [key, value] : it->second) bytes_ -= key.size() + value.size();
  sets_.erase(it);
  order_.erase(std::find(order_.begin(), order_.end(), generation));
}

std::vector<v1::RendezvousRequest> RendezvousReplay::ToResend() const {
  std::vector<v1::RendezvousRequest> out;
  for (const Generation& g : order_) {
    for (const auto& [key, value] : sets_.at(g)) {
      v1::RendezvousRequest& set = out.emplace_back();
      set.mutable_job()->set_job_id(g.first);
      set.mutable_job()->set_generation(g.second);
      set.set_key(key);
      set.set_set_value(value);
    }
  }
  for (const auto& [id, request] : unanswered_) out.push_back(request);
  return out;
}

}  // namespace ringmaster::agent
