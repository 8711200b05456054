// Checkpoint write and resume speed: --ranks ranks (threads of this process, joined by Gloo over
// loopback) save one checkpoint of a model of --params parameters, ZeRO-sharded (each rank's
// file holds its shard's fp32 master weights and Adam moments: 12 bytes a parameter), then
// resume from it as a restarted job does. Prints the seconds and GB/s of each; the resume is
// what the coordinator's recovery reports as "restore" (without the device upload). The files
// are read back from the page cache, as on a node that wrote them moments before.
//
//   bazel run -c opt //bench:checkpoint_bench -- --params=124475904 --ranks=1
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/flags.h"
#include "common/status.h"
#include "common/testing/subprocess.h"
#include "trainer/checkpoint/checkpointer.h"
#include "trainer/comm/testing.h"

ABSL_FLAG(int64_t, params, 124475904, "Model parameters (GPT-2 124M: 124475904).");
ABSL_FLAG(int, ranks, 1, "Ranks, each writing and reading its own shard.");
ABSL_FLAG(std::string, dir, "", "Checkpoint directory (default: a fresh one under /tmp).");
ABSL_FLAG(int, repeats, 3, "Resumes timed; the median is reported.");

namespace ringmaster::bench {
namespace {

using trainer::Checkpointer;
using trainer::CheckpointLayout;
using trainer::RankState;

double Seconds(absl::Time start) { return absl::ToDoubleSeconds(absl::Now() - start); }

int Run() {
  const int64_t params = absl::GetFlag(FLAGS_params);
  const int ranks = absl::GetFlag(FLAGS_ranks);
  std::string dir = absl::GetFlag(FLAGS_dir);
  if (dir.empty()) dir = ringmaster::testing::TestTempDir() + "/checkpoint_bench";
  std::filesystem::remove_all(dir);
  CheckpointLayout layout;
  layout.world = ranks;
  layout.dp = ranks;
  layout.zero = ranks > 1 ? 1 : 0;
  layout.params = params;
  layout.padded = (params + ranks - 1) / ranks * ranks;
  const int64_t shard = layout.padded / ranks;
  const double bytes = 12.0 * layout.padded;

  trainer::InMemoryStore store;
  std::vector<double> save(ranks), resume;
  std::vector<absl::Status> status =
      trainer::testing::RunRanks(ranks, [&](int rank) -> absl::Status {
        ASSIGN_OR_RETURN(std::unique_ptr<trainer::Communicator> ctl,
                         trainer::testing::ConnectLoopback("ctl", rank, ranks, &store));
        Checkpointer c({dir, 1, 2}, layout, ctl.get());
        RankState state;
        state.step = 1;
        state.master.assign(shard, 0.5f + rank);
        state.m.assign(shard, 1e-3f);
        state.v.assign(shard, 1e-6f);
        absl::Time start = absl::Now();
        RETURN_IF_ERROR(c.Save(std::move(state)));
        RETURN_IF_ERROR(c.Flush());
        RETURN_IF_ERROR(ctl->Barrier());
        save[rank] = Seconds(start);
        for (int i = 0; i < absl::GetFlag(FLAGS_repeats); ++i) {
          RETURN_IF_ERROR(ctl->Barrier());
          start = absl::Now();
          ASSIGN_OR_RETURN(std::optional<RankState> loaded, c.Resume(rank));
          RETURN_IF_ERROR(ctl->Barrier());
          if (!loaded.has_value() || loaded->master.size() != static_cast<size_t>(shard)) {
            return absl::InternalError("resumed a different shard size");
          }
          if (rank == 0) resume.push_back(Seconds(start));
        }
        return absl::OkStatus();
      });
  for (const absl::Status& s : status) {
    if (!s.ok()) {
      std::cerr << "checkpoint_bench: " << s << "\n";
      return 1;
    }
  }
  std::sort(resume.begin(), resume.end());
  const double save_s = *std::max_element(save.begin(), save.end());
  const double resume_s = resume[resume.size() / 2];
  std::cout << absl::StrFormat(
      "checkpoint_bench: %lld parameters, %d ranks, %.2f GB | save %.2f s (%.2f GB/s) | resume "
      "%.2f s (%.2f GB/s, median of %d)\n",
      static_cast<long long>(params), ranks, bytes / 1e9, save_s, bytes / save_s / 1e9, resume_s,
      bytes / resume_s / 1e9, static_cast<int>(resume.size()));
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace ringmaster::bench

int main(int argc, char** argv) {
  absl::Status s = ringmaster::InitBinary(argc, argv, "checkpoint_bench", nullptr);
  if (!s.ok()) {
    std::cerr << "checkpoint_bench: " << s << "\n";
    return 1;
  }
  return ringmaster::bench::Run();
}
