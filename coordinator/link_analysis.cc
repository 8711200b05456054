#include "coordinator/link_analysis.h"

#include <algorithm>
#include <utility>

namespace ringmaster::coordinator {
namespace {

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

double Bandwidth(const LinkSample& s) { return s.seconds > 0 ? s.bytes / s.seconds : 0; }

}  // namespace

bool LinkCheckCollector::Add(int rank, const std::vector<LinkSample>& samples, double seconds) {
  if (rank < 0 || rank >= world_ || reported_.count(rank) > 0) return false;
  reported_[rank] = seconds;
  for (LinkSample s : samples) {
    if (!IsLinkGroupName(s.group)) continue;  // its kind would be an unbounded label value
    if (s.rank > s.peer_rank) {
      std::swap(s.rank, s.peer_rank);
      std::swap(s.node, s.peer_node);
    }
    Link& link = links_[{s.group, s.rank, s.peer_rank}];
    if (link.reports == 0) {
      link.sample = s;
    } else {
      // The other end's view of the same exchanges: keep the slower time, add what each end
      // received wrong.
      link.sample.seconds = std::max(link.sample.seconds, s.seconds);
      link.sample.bytes = std::max(link.sample.bytes, s.bytes);
      link.sample.wrong += s.wrong;
    }
    ++link.reports;
  }
  return true;
}

double LinkCheckCollector::seconds(int rank) const {
  auto it = reported_.find(rank);
  return it == reported_.end() ? 0 : it->second;
}

v1::LinkCheckSummary LinkCheckCollector::Summarize() const {
  v1::LinkCheckSummary summary;
  summary.set_generation(generation_);
  summary.set_ranks_reported(static_cast<int>(reported_.size()));
  summary.set_ranks_expected(world_);
  // Links by kind: (group kind, cross-node).
  std::map<std::pair<std::string, bool>, std::vector<const LinkSample*>> kinds;
  for (const auto& [key, link] : links_) {
    const LinkSample& s = link.sample;
    kinds[{GroupKind(s.group), s.node != s.peer_node}].push_back(&s);
  }
  struct Listed {
    v1::LinkState state;
    double ratio;  // bandwidth over baseline; 0 when corrupt with no baseline
  };
  std::vector<Listed> listed;
  for (const auto& [kind, samples] : kinds) {
    std::vector<double> bandwidths;
    for (const LinkSample* s : samples) bandwidths.push_back(Bandwidth(*s));
    v1::LinkClass* c = summary.add_classes();
    c->set_kind(kind.first);
    c->set_cross_node(kind.second);
    c->set_links(static_cast<int>(samples.size()));
    c->set_median_bytes_per_second(Median(bandwidths));
    c->set_min_bytes_per_second(*std::min_element(bandwidths.begin(), bandwidths.end()));
    for (size_t i = 0; i < samples.size(); ++i) {
      std::vector<double> others = bandwidths;
      others.erase(others.begin() + static_cast<std::ptrdiff_t>(i));
      const double baseline = Median(others);
      const bool slow = !others.empty() && bandwidths[i] < slow_ratio_ * baseline;
      const LinkSample& s = *samples[i];
      if (!slow && s.wrong == 0) continue;
      Listed l;
      l.state.set_group(s.group);
      l.state.set_rank(s.rank);
      l.state.set_peer_rank(s.peer_rank);
      l.state.set_node(s.node);
      l.state.set_peer_node(s.peer_node);
      l.state.set_bytes_per_second(bandwidths[i]);
      l.state.set_baseline_bytes_per_second(baseline);
      l.state.set_wrong(s.wrong);
      l.ratio = baseline > 0 ? bandwidths[i] / baseline : 0;
      listed.push_back(std::move(l));
    }
  }
  // Corrupting links first, then the slowest relative to their kind.
  std::sort(listed.begin(), listed.end(), [](const Listed& a, const Listed& b) {
    if ((a.state.wrong() > 0) != (b.state.wrong() > 0)) return a.state.wrong() > 0;
    return a.ratio < b.ratio;
  });
  for (size_t i = 0; i < listed.size() && i < kMaxListedLinks; ++i) {
    *summary.add_slow() = std::move(listed[i].state);
  }
  return summary;
}

}  // namespace ringmaster::coordinator
