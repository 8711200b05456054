#include "agent/report_validation.h"

#include <cmath>
#include <limits>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/one_line.h"
#include "gtest/gtest.h"

namespace ringmaster::agent {
namespace {

// What the builtin trainer sends for a pipeline stage with data and tensor parallelism.
v1::ReportStepRequest GoodStep() {
  v1::ReportStepRequest r;
  r.set_step(7);
  r.set_loss(3.25);
  r.set_tokens(4096);
  r.set_step_seconds(0.5);
  r.set_compute_seconds(0.4);
  r.set_comm_seconds(0.1);
  r.set_stage_compute_seconds(0.3);
  r.set_bubble_fraction(0.2);
  r.set_mfu(0.41);
  r.set_state_bytes(1 << 20);
  for (const char* group : {"dp0", "tp1", "pp0", "emb0", "world"}) {
    v1::CollectiveStat* c = r.add_collectives();
    c->set_op("all_reduce");
    c->set_group(group);
    c->set_count(3);
    c->set_bytes(1 << 16);
    c->set_seconds(0.01);
    c->set_algbw_bytes_per_second(1e9);
    c->set_busbw_bytes_per_second(1.5e9);
    (*r.mutable_collective_entered())[group] = 12;
    (*r.mutable_collective_completed())[group] = 11;
  }
  r.mutable_collectives(2)->set_op("send");
  return r;
}

std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST(ValidateStepReportTest, TheBuiltinTrainersReportIsValid) {
  EXPECT_TRUE(ValidateStepReport(GoodStep()).ok()) << ValidateStepReport(GoodStep());
  v1::ReportStepRequest nan_loss = GoodStep();
  nan_loss.set_loss(std::nan(""));  // a diverged run is reported, not refused
  EXPECT_TRUE(ValidateStepReport(nan_loss).ok());
  v1::ReportStepRequest diverged = GoodStep();
  diverged.set_grad_norm(std::numeric_limits<double>::infinity());
  EXPECT_TRUE(ValidateStepReport(diverged).ok());
  diverged.set_grad_norm(std::nan(""));
  EXPECT_TRUE(ValidateStepReport(diverged).ok());
}

TEST(ValidateStepReportTest, FiguresOutOfRangeNameTheField) {
  v1::ReportStepRequest r = GoodStep();
  r.set_step(0);
  EXPECT_EQ(Message(ValidateStepReport(r)), "step: must be >= 1, got 0");
  r = GoodStep();
  r.set_step_seconds(-1);
  EXPECT_EQ(Message(ValidateStepReport(r)), "step_seconds: must be finite and >= 0, got -1");
  r = GoodStep();
  r.set_grad_norm(-0.5);
  EXPECT_EQ(Message(ValidateStepReport(r)), "grad_norm: must be >= 0, got -0.5");
  r = GoodStep();
  r.set_mfu(std::numeric_limits<double>::infinity());
  EXPECT_EQ(Message(ValidateStepReport(r)), "mfu: must be finite and >= 0, got inf");
  r = GoodStep();
  r.set_bubble_fraction(1.5);
  EXPECT_EQ(Message(ValidateStepReport(r)), "bubble_fraction: must be in [0, 1], got 1.5");
  r = GoodStep();
  r.mutable_collectives(1)->set_seconds(std::nan(""));
  EXPECT_EQ(Message(ValidateStepReport(r)),
            "collectives[1].seconds: must be finite and >= 0, got nan");
  EXPECT_EQ(ValidateStepReport(r).code(), absl::StatusCode::kInvalidArgument);
}

// A worker's phase report: the phases a worker enters, and a checkpoint's step and seconds in
// range. An unknown phase number reached the coordinator's hang reports before.
TEST(ValidatePhaseReportTest, OnlyTheWorkersOwnPhasesAndSaneCheckpointFigures) {
  v1::ReportPhaseRequest r;
  for (v1::WorkerPhase phase : {v1::WORKER_PHASE_INIT, v1::WORKER_PHASE_STEP,
                                v1::WORKER_PHASE_CHECKPOINT, v1::WORKER_PHASE_EVAL}) {
    r.set_phase(phase);
    EXPECT_TRUE(ValidatePhaseReport(r).ok()) << phase;
  }
  r.set_checkpoint_step(40);
  r.set_checkpoint_seconds(1.5);
  EXPECT_TRUE(ValidatePhaseReport(r).ok());
  for (int phase : {0, 1, 6, 42}) {
    r.set_phase(static_cast<v1::WorkerPhase>(phase));
    EXPECT_EQ(Message(ValidatePhaseReport(r)),
              absl::StrCat("phase: must be init, step, checkpoint or eval, got ", phase));
  }
  r.set_phase(v1::WORKER_PHASE_STEP);
  r.set_checkpoint_step(-1);
  EXPECT_EQ(Message(ValidatePhaseReport(r)), "checkpoint_step: must be >= 0, got -1");
  r.set_checkpoint_step(40);
  r.set_checkpoint_seconds(std::nan(""));
  EXPECT_EQ(Message(ValidatePhaseReport(r)),
            "checkpoint_seconds: must be finite and >= 0, got nan");
}

TEST(ValidateStepReportTest, LabelsMustBeKnownOpsAndBoundedGroupNames) {
  v1::ReportStepRequest r = GoodStep();
  r.mutable_collectives(0)->set_op("allreduce");
  EXPECT_EQ(Message(ValidateStepReport(r)),
            "collectives[0].op: must be one of all_reduce, reduce_scatter, all_gather, "
            "broadcast, send, recv, reduce, gather, scatter, all_to_all, barrier; got "
            "\"allreduce\"");
  r = GoodStep();
  r.mutable_collectives(3)->set_group("dp 0\n");
  EXPECT_EQ(Message(ValidateStepReport(r)),
            "collectives[3].group: must be 1 to 64 characters of [A-Za-z0-9_.-], got "
            "\"dp 0\\n\"");
  r = GoodStep();
  r.mutable_collectives(0)->set_group(std::string(65, 'g'));
  EXPECT_FALSE(ValidateStepReport(r).ok());
  r.mutable_collectives(0)->set_group(std::string(64, 'g'));
  EXPECT_TRUE(ValidateStepReport(r).ok());
  r = GoodStep();
  (*r.mutable_collective_entered())[""] = 1;
  EXPECT_EQ(Message(ValidateStepReport(r)),
            "collective_entered: must be 1 to 64 characters of [A-Za-z0-9_.-], got \"\"");
  r = GoodStep();
  (*r.mutable_collective_completed())["dp0"] = -1;
  EXPECT_EQ(Message(ValidateStepReport(r)), "collective_completed[dp0]: must be >= 0, got -1");
}

// What the Python watch reports of a torch.distributed program: its ops beyond the builtin
// trainer's, and its groups "world" and "pg<N>" (not link groups: a link report keeps refusing
// them, see ValidateLinksReportTest).
TEST(ValidateStepReportTest, TorchDistributedOpsAndGroupNames) {
  v1::ReportStepRequest r = GoodStep();
  r.clear_collectives();
  for (const char* op : {"reduce", "gather", "scatter", "all_to_all", "barrier", "all_reduce"}) {
    for (const char* group : {"world", "pg1", "pg12"}) {
      v1::CollectiveStat* stat = r.add_collectives();
      stat->set_op(op);
      stat->set_group(group);
      stat->set_count(2);
      stat->set_bytes(std::string(op) == "barrier" ? 0 : 4096);
      stat->set_seconds(0.01);
    }
  }
  (*r.mutable_collective_entered())["world"] = 41;
  (*r.mutable_collective_completed())["world"] = 41;
  (*r.mutable_collective_entered())["pg1"] = 3;
  (*r.mutable_collective_completed())["pg1"] = 2;
  EXPECT_TRUE(ValidateStepReport(r).ok()) << ValidateStepReport(r);
  v1::ReportCollectivesRequest c;
  (*c.mutable_collective_entered())["world"] = 42;
  (*c.mutable_collective_completed())["pg3"] = 1;
  EXPECT_TRUE(ValidateCollectivesReport(c).ok()) << ValidateCollectivesReport(c);
}

TEST(ValidateStepReportTest, HowManyGroupsAndCollectivesIsBounded) {
  v1::ReportStepRequest r = GoodStep();
  r.clear_collective_entered();
  for (int g = 0; g < kMaxReportedGroups; ++g) {
    (*r.mutable_collective_entered())[absl::StrCat("g", g)] = 1;
  }
  EXPECT_TRUE(ValidateStepReport(r).ok());
  (*r.mutable_collective_entered())["one-more"] = 1;
  EXPECT_EQ(Message(ValidateStepReport(r)), "collective_entered: at most 64 groups, got 65");

  r = GoodStep();
  while (r.collectives_size() <= kMaxReportedCollectives) *r.add_collectives() = r.collectives(0);
  EXPECT_EQ(Message(ValidateStepReport(r)), "collectives: at most 384 entries, got 385");
}

TEST(ValidateCollectivesReportTest, ChecksTheSequenceNumbers) {
  v1::ReportCollectivesRequest r;
  (*r.mutable_collective_entered())["dp0"] = 5;
  (*r.mutable_collective_completed())["dp0"] = 4;
  EXPECT_TRUE(ValidateCollectivesReport(r).ok());
  r.set_blocked(true);
  r.set_timeout_seconds(1800);
  EXPECT_TRUE(ValidateCollectivesReport(r).ok());
  r.set_timeout_seconds(-1);
  EXPECT_EQ(Message(ValidateCollectivesReport(r)),
            "timeout_seconds: must be finite and >= 0, got -1");
  r.set_timeout_seconds(std::numeric_limits<double>::infinity());
  EXPECT_EQ(Message(ValidateCollectivesReport(r)),
            "timeout_seconds: must be finite and >= 0, got inf");
  r.set_timeout_seconds(0);
  r.set_thread_cpu_seconds(12.5);
  EXPECT_TRUE(ValidateCollectivesReport(r).ok());
  r.set_thread_cpu_seconds(std::nan(""));
  EXPECT_EQ(Message(ValidateCollectivesReport(r)),
            "thread_cpu_seconds: must be finite and >= 0, got nan");
  r.set_thread_cpu_seconds(-0.5);
  EXPECT_EQ(Message(ValidateCollectivesReport(r)),
            "thread_cpu_seconds: must be finite and >= 0, got -0.5");
  r.set_thread_cpu_seconds(0);
  r.set_stack(std::string(100000, '\x1b'));  // never refused: the numbers matter more
  EXPECT_TRUE(ValidateCollectivesReport(r).ok());
  r.clear_stack();
  (*r.mutable_collective_entered())["a/b"] = 5;
  EXPECT_EQ(Message(ValidateCollectivesReport(r)),
            "collective_entered: must be 1 to 64 characters of [A-Za-z0-9_.-], got \"a/b\"");
}

TEST(ValidateLinksReportTest, EachLinkNamesItsFieldWhenOutOfRange) {
  v1::ReportLinksRequest r;
  r.set_seconds(0.2);
  v1::LinkStat* link = r.add_links();
  link->set_group("dp0");
  link->set_peer_rank(3);
  link->set_bytes(4 << 20);
  link->set_seconds(0.004);
  EXPECT_TRUE(ValidateLinksReport(r).ok()) << ValidateLinksReport(r);
  EXPECT_TRUE(ValidateLinksReport(v1::ReportLinksRequest()).ok());  // no links to check

  v1::ReportLinksRequest bad = r;
  bad.mutable_links(0)->set_group("dp 0");
  EXPECT_EQ(Message(ValidateLinksReport(bad)),
            "links[0].group: must be 1 to 64 characters of [A-Za-z0-9_.-], got \"dp 0\"");
  bad.mutable_links(0)->set_group("world");
  EXPECT_EQ(Message(ValidateLinksReport(bad)),
            "links[0].group: must name a tp, pp, dp or emb group followed by its number (e.g. "
            "dp0), got \"world\"");
  bad = r;
  bad.mutable_links(0)->set_peer_rank(-1);
  EXPECT_EQ(Message(ValidateLinksReport(bad)), "links[0].peer_rank: must be >= 0, got -1");
  bad = r;
  bad.mutable_links(0)->set_bytes(0);
  EXPECT_EQ(Message(ValidateLinksReport(bad)), "links[0].bytes: must be > 0, got 0");
  bad = r;
  bad.mutable_links(0)->set_seconds(0);
  EXPECT_EQ(Message(ValidateLinksReport(bad)), "links[0].seconds: must be finite and > 0, got 0");
  bad.mutable_links(0)->set_seconds(std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(Message(ValidateLinksReport(bad)), "links[0].seconds: must be finite and > 0, got nan");
  bad = r;
  bad.mutable_links(0)->set_wrong(-2);
  EXPECT_EQ(Message(ValidateLinksReport(bad)), "links[0].wrong: must be finite and >= 0, got -2");
  bad = r;
  bad.set_seconds(-1);
  EXPECT_EQ(Message(ValidateLinksReport(bad)), "seconds: must be finite and >= 0, got -1");
  bad = r;
  for (int i = 0; i < kMaxReportedLinks; ++i) *bad.add_links() = r.links(0);
  EXPECT_EQ(Message(ValidateLinksReport(bad)), "links: at most 128 entries, got 129");
  EXPECT_EQ(ValidateLinksReport(bad).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ReportedStackTest, EachFrameIsMadeFitForATerminalAndTheInnermostAreKept) {
  EXPECT_EQ(ReportedStack("train.py:12 in <module>\ntrain.py:40 in main\nqueue.py:180 in get"),
            "train.py:12 in <module>\ntrain.py:40 in main\nqueue.py:180 in get");
  EXPECT_EQ(ReportedStack(""), "");
  // Escape sequences dropped, tabs and line separators made spaces, other C0/C1 controls and
  // bytes that are not UTF-8 made "?", empty lines dropped.
  EXPECT_EQ(ReportedStack("a.py:1 in f\x1b[2J\n\n\tb.py:2 in\xe2\x80\xa8g\xc2\x9b\n\xff.py:3 in h"),
            "a.py:1 in f\nb.py:2 in g?\n?.py:3 in h");
  // A frame is at most kStackFrameBytes; the whole, at most kStackBytes of the
  // innermost (last) frames.
  const std::string long_frame = ReportedStack("/" + std::string(2000, '\xc3') + "/t.py:7 in f");
  EXPECT_LE(long_frame.size(), kStackFrameBytes);
  EXPECT_TRUE(absl::StartsWith(long_frame, "...?")) << long_frame;
  EXPECT_TRUE(absl::EndsWith(long_frame, "/t.py:7 in f")) << long_frame;
  std::string accents;
  for (int i = 0; i < 600; ++i) accents += "\xc3\xa9";  // é
  const std::string cut = ReportedStack(accents + ":7 in f");
  EXPECT_LE(cut.size(), kStackFrameBytes);
  EXPECT_TRUE(absl::StartsWith(cut, "...\xc3\xa9")) << cut;  // whole characters only
  EXPECT_TRUE(absl::EndsWith(cut, ":7 in f"));
  std::string deep;
  for (int i = 0; i < 1000; ++i) absl::StrAppend(&deep, "f.py:", i, " in g\n");
  const std::string kept = ReportedStack(deep);
  EXPECT_LE(kept.size(), kStackBytes);
  EXPECT_GT(kept.size(), kStackBytes - 20);
  EXPECT_TRUE(absl::EndsWith(kept, "f.py:999 in g")) << kept.substr(kept.size() - 40);
}

}  // namespace
}  // namespace ringmaster::agent
