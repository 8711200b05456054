#include "trainer/checkpoint/reshard.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"

namespace ringmaster::trainer {
namespace {

// What differs between the two layouts among the fields a resume must keep (and the world each
// side claims against its tp*pp*dp); empty when nothing does. With `shard`, the shard size too.
std::vector<std::string> Differences(const CheckpointLayout& saved, const CheckpointLayout& now,
                                     bool shard) {
  std::vector<std::string> out;
  auto field = [&](const char* name, int64_t a, int64_t b) {
    if (a != b) out.push_back(absl::StrCat(name, " (checkpoint ", a, ", this run ", b, ")"));
  };
  field("tp", saved.tp, now.tp);
  field("pp", saved.pp, now.pp);
  field("zero", saved.zero, now.zero);
  if (shard) field("params", saved.params, now.params);
  for (const CheckpointLayout* l : {&saved, &now}) {
    if (l->world != l->tp * l->pp * l->dp || l->dp < 1 || l->tp < 1 || l->pp < 1) {
      out.push_back(absl::StrCat(l == &saved ? "the checkpoint's" : "this run's", " world ",
                                 l->world, " (not tp*pp*dp)"));
    }
  }
  return out;
}

absl::Status Refuse(const std::vector<std::string>& differences) {
  return absl::FailedPreconditionError(absl::StrCat(
      "the checkpoint cannot be resharded to this run: ", absl::StrJoin(differences, ", "),
      " differ; a resume may change only the data-parallel degree (trainer parallelism.data), "
      "with the same model, tensor and pipeline parallelism and ZeRO stage"));
}

int64_t Total(const std::vector<StateRange>& ranges) {
  int64_t n = 0;
  for (const StateRange& r : ranges) n += r.size;
  return n;
}

}  // namespace

bool SameLayout(const CheckpointLayout& saved, const CheckpointLayout& now) {
  CheckpointLayout assumed = saved;
  if (assumed.bucket == 0) assumed.bucket = now.bucket;
  return assumed == now;
}

absl::Status CheckReshardable(const CheckpointLayout& saved, const CheckpointLayout& now) {
  std::vector<std::string> differences = Differences(saved, now, /*shard=*/true);
  if (!differences.empty()) return Refuse(differences);
  return absl::OkStatus();
}

absl::StatusOr<ReshardPlan> PlanReshard(const CheckpointLayout& saved, const CheckpointLayout& now,
                                        int rank, const StatePartition& partition) {
  std::vector<std::string> differences = Differences(saved, now, /*shard=*/false);
  if (!differences.empty()) return Refuse(differences);
  if (rank < 0 || rank >= now.world) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " of ", now.world));
  }
  // Rank numbering (parallel/parallel_groups.h): rank = (dp*PP + pp)*TP + tp.
  const int tp_rank = rank % now.tp;
  const int pp_rank = (rank / now.tp) % now.pp;
  const int dp_rank = rank / (now.tp * now.pp);
  // A ZeRO-1 checkpoint that did not record its buckets was written with this run's.
  const int64_t saved_bucket = saved.bucket != 0 ? saved.bucket : now.bucket;

  ReshardPlan plan;
  const std::vector<StateRange> mine = partition.Owned(dp_rank, now.dp, now.bucket);
  plan.state_size = Total(mine);
  int64_t needed = 0;  // real (non-padding) elements of this rank's state
  for (const StateRange& r : mine) {
    needed += std::max<int64_t>(0, std::min(r.offset + r.size, now.params) - r.offset);
  }
  int64_t covered = 0;
  // Plain DP: every old DP rank held the same state; DP rank 0 wrote it.
  const int old_dp_ranks = saved.zero == 0 ? 1 : saved.dp;
  ReshardSource first;
  for (int d = 0; d < old_dp_ranks; ++d) {
    ReshardSource source;
    source.rank = (d * now.pp + pp_rank) * now.tp + tp_rank;
    source.layout = saved;
    source.layout.params = now.params;  // this shard's, as its file's header has it
    source.layout.padded = partition.Padded(saved.dp);
    const std::vector<StateRange> theirs = partition.Owned(d, saved.dp, saved_bucket);
    source.state_size = Total(theirs);
    int64_t to = 0;
    for (const StateRange& a : mine) {
      int64_t from = 0;
      for (const StateRange& b : theirs) {
        const int64_t lo = std::max(a.offset, b.offset);
        const int64_t hi = std::min({a.offset + a.size, b.offset + b.size, now.params});
        if (lo < hi) {
          source.pieces.push_back({from + (lo - b.offset), to + (lo - a.offset), hi - lo});
          covered += hi - lo;
        }
        from += b.size;
      }
      to += a.size;
    }
    if (!source.pieces.empty()) {
      plan.sources.push_back(std::move(source));
    } else if (d == 0) {
      first = std::move(source);
    }
  }
  // A rank whose ranges are all padding still needs the step and data position: DP rank 0's
  // file of its position has them.
  if (plan.sources.empty()) plan.sources.push_back(std::move(first));
  if (covered != needed) {
    return absl::FailedPreconditionError(absl::StrCat(
        "resharding from dp=", saved.dp, " to dp=", now.dp, ": the checkpoint's ranges cover ",
        covered, " of the ", needed, " parameters rank ", rank, " needs (the partitions disagree)"));
  }
  return plan;
}

absl::StatusOr<RankState> AssembleState(
    const ReshardPlan& plan,
    const std::function<absl::StatusOr<RankState>(const ReshardSource&)>& read) {
  RankState out;
  const size_t n = static_cast<size_t>(plan.state_size);
  out.master.assign(n, 0.0f);
  out.m.assign(n, 0.0f);
  out.v.assign(n, 0.0f);
  bool first = true;
  for (const ReshardSource& source : plan.sources) {
    ASSIGN_OR_RETURN(const RankState old, read(source));
    if (static_cast<int64_t>(old.master.size()) != source.state_size ||
        old.m.size() != old.master.size() || old.v.size() != old.master.size()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", source.rank, "'s file holds ", old.master.size(), " state elements, its ",
          "partition at dp=", source.layout.dp, " says ", source.state_size));
    }
    if (first) {
      out.step = old.step;
      out.data_position = old.data_position;
      out.data_seed = old.data_seed;
      out.lr_scale_start = old.lr_scale_start;
      out.lr_scale_from = old.lr_scale_from;
      out.lr_scale_to = old.lr_scale_to;
      first = false;
    } else if (old.step != out.step || old.data_position != out.data_position ||
               old.data_seed != out.data_seed) {
      return absl::DataLossError(absl::StrCat(
          "rank ", source.rank, "'s file holds step ", old.step, " data position ",
          old.data_position, " seed ", old.data_seed, ", another of the same checkpoint step ",
          out.step, " data position ", out.data_position, " seed ", out.data_seed));
    }
    for (const ReshardPiece& p : source.pieces) {
      const size_t bytes = static_cast<size_t>(p.size) * sizeof(float);
      std::memcpy(out.master.data() + p.to, old.master.data() + p.from, bytes);
      std::memcpy(out.m.data() + p.to, old.m.data() + p.from, bytes);
      std::memcpy(out.v.data() + p.to, old.v.data() + p.from, bytes);
    }
  }
  return out;
}

}  // namespace ringmaster::trainer
