#include "coordinator/link_analysis.h"

#include <algorithm>
#include <limits>
#include <utility>

namespace ringmaster::coordinator {
namespace {

double Bandwidth(const LinkSample& s) { return s.seconds > 0 ? s.bytes / s.seconds : 0; }

// The median of sorted `v` without its element `skip` (or of all of it when skip is past the
// end); 0 when nothing is left.
double MedianWithout(const std::vector<double>& v, size_t skip) {
  const size_t n = skip < v.size() ? v.size() - 1 : v.size();
  if (n == 0) return 0;
  auto at = [&](size_t j) { return v[j < skip ? j : j + 1]; };
  return n % 2 == 1 ? at(n / 2) : (at(n / 2 - 1) + at(n / 2)) / 2;
}

v1::LinkState StateOf(const LinkSample& s) {
  v1::LinkState state;
  state.set_group(s.group);
  state.set_rank(s.rank);
  state.set_peer_rank(s.peer_rank);
  state.set_node(s.node);
  state.set_peer_node(s.peer_node);
  state.set_bytes_per_second(Bandwidth(s));
  state.set_wrong(s.wrong);
  return state;
}

}  // namespace

bool LinkCheckCollector::Add(int rank, const std::vector<LinkSample>& samples) {
  if (rank < 0 || rank >= world_ || !reported_.insert(rank).second) return false;
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

std::vector<v1::LinkState> LinkCheckCollector::TakeNewCorruptions() {
  std::vector<v1::LinkState> out;
  for (const auto& [key, link] : links_) {
    if (link.sample.wrong > 0 && corruptions_taken_.insert(key).second) {
      out.push_back(StateOf(link.sample));
    }
  }
  return out;
}

v1::LinkCheckSummary LinkCheckCollector::Summarize() const {
  if (final_.has_value()) return *final_;
  v1::LinkCheckSummary summary = Judge();
  if (complete()) final_ = summary;  // no report can change it any more
  return summary;
}

v1::LinkCheckSummary LinkCheckCollector::Judge() const {
  v1::LinkCheckSummary summary;
  summary.set_generation(generation_);
  summary.set_step(step_);
  summary.set_ranks_reported(static_cast<int>(reported_.size()));
  summary.set_ranks_expected(world_);
  summary.set_min_bytes_per_second(min_bytes_per_second_);
  // Links by kind (group kind, cross-node), each kind sorted by bandwidth.
  std::map<std::pair<std::string, bool>, std::vector<std::pair<double, const LinkSample*>>> kinds;
  for (const auto& [key, link] : links_) {
    const LinkSample& s = link.sample;
    kinds[{GroupKind(s.group), s.node != s.peer_node}].push_back({Bandwidth(s), &s});
  }
  std::vector<v1::LinkState> listed;
  for (auto& [kind, links] : kinds) {
    std::sort(links.begin(), links.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<double> bandwidths;
    for (const auto& [bandwidth, sample] : links) bandwidths.push_back(bandwidth);
    v1::LinkClass* c = summary.add_classes();
    c->set_kind(kind.first);
    c->set_cross_node(kind.second);
    c->set_links(static_cast<int>(links.size()));
    c->set_median_bytes_per_second(MedianWithout(bandwidths, bandwidths.size()));
    c->set_min_bytes_per_second(bandwidths.front());
    for (size_t i = 0; i < links.size(); ++i) {
      const double baseline = MedianWithout(bandwidths, i);
      const bool below_floor = bandwidths[i] < min_bytes_per_second_;
      const bool slow = (links.size() > 1 && bandwidths[i] < slow_ratio_ * baseline) || below_floor;
      if (!slow && links[i].second->wrong == 0) continue;
      v1::LinkState state = StateOf(*links[i].second);
      state.set_baseline_bytes_per_second(baseline);
      state.set_below_floor(below_floor);
      listed.push_back(std::move(state));
    }
  }
  // Corrupting links first, then the furthest below what they should do: their kind's median,
  // or the floor for a link slow only by it.
  const double floor = min_bytes_per_second_;
  auto shortfall = [floor](const v1::LinkState& l) {
    double ratio = std::numeric_limits<double>::infinity();
    if (l.baseline_bytes_per_second() > 0) {
      ratio = l.bytes_per_second() / l.baseline_bytes_per_second();
    }
    if (l.below_floor()) ratio = std::min(ratio, l.bytes_per_second() / floor);
    return ratio;
  };
  std::sort(listed.begin(), listed.end(), [&](const v1::LinkState& a, const v1::LinkState& b) {
    if ((a.wrong() > 0) != (b.wrong() > 0)) return a.wrong() > 0;
    return shortfall(a) < shortfall(b);
  });
  for (size_t i = 0; i < listed.size() && i < kMaxListedLinks; ++i) {
    *summary.add_slow() = std::move(listed[i]);
  }
  return summary;
}

}  // namespace ringmaster::coordinator
