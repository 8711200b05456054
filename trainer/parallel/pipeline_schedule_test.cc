// The 1F1B schedule: every stage's actions for many (p, m), run together in a simulator whose
// transfers are rendezvous (a send completes only when the peer has posted the matching receive,
// as with Gloo's and NCCL's point-to-point): no deadlock, every transfer matches, every
// microbatch is forwarded then backwarded once per stage, the activations a stage holds never
// exceed p - s microbatches, and a slot is never reused while its microbatch is in flight.
#include "trainer/parallel/pipeline_schedule.h"

#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmaster::trainer {
namespace {

using K = PipelineActionKind;

// One directional transfer: activations of microbatch mb from stage s to s+1 (forward), or the
// gradient from s+1 to s (backward).
struct Transfer {
  int from, to, mb;
  bool forward;
  bool operator<(const Transfer& o) const {
    return std::tie(from, to, mb, forward) < std::tie(o.from, o.to, o.mb, o.forward);
  }
};

// What an action of stage s sends and receives.
void TransfersOf(const PipelineAction& a, int s, std::vector<Transfer>* sends,
                 std::vector<Transfer>* recvs) {
  switch (a.kind) {
    case K::kRecvForward:
      recvs->push_back({s - 1, s, a.microbatch, true});
      break;
    case K::kSendForward:
      sends->push_back({s, s + 1, a.microbatch, true});
      break;
    case K::kSendForwardRecvBackward:
      sends->push_back({s, s + 1, a.microbatch, true});
      recvs->push_back({s + 1, s, a.other, false});
      break;
    case K::kRecvBackward:
      recvs->push_back({s + 1, s, a.microbatch, false});
      break;
    case K::kSendBackward:
      sends->push_back({s, s - 1, a.microbatch, false});
      break;
    case K::kSendBackwardRecvForward:
      sends->push_back({s, s - 1, a.microbatch, false});
      recvs->push_back({s - 1, s, a.other, true});
      break;
    case K::kForward:
    case K::kBackward:
      break;
  }
}

struct SimResult {
  bool deadlock = false;
  std::string problem;
  std::vector<int> max_in_flight;
};

SimResult Simulate(int p, int m, const std::vector<std::vector<PipelineAction>>& programs) {
  SimResult result;
  std::vector<size_t> pc(p, 0);
  // Per stage: the transfers of its current action still outstanding.
  std::vector<std::set<Transfer>> pending_send(p), pending_recv(p);
  std::vector<bool> posted(p, false);
  // Per direction and stage pair, the order of transfers must be the microbatch order.
  std::map<std::pair<int, int>, std::vector<int>> delivered;
  std::vector<std::set<int>> in_flight(p), received(p);
  std::vector<int> forwarded(p, 0), backwarded(p, 0);
  result.max_in_flight.assign(p, 0);
  const auto fail = [&](const std::string& why) {
    if (result.problem.empty()) result.problem = why;
  };
  for (;;) {
    bool progress = false, done = true;
    for (int s = 0; s < p; ++s) {
      if (pc[s] == programs[s].size()) continue;
      done = false;
      const PipelineAction& a = programs[s][pc[s]];
      const int slots = PipelineSlots(s, p, m);
      if (!posted[s]) {
        std::vector<Transfer> sends, recvs;
        TransfersOf(a, s, &sends, &recvs);
        pending_send[s] = std::set<Transfer>(sends.begin(), sends.end());
        pending_recv[s] = std::set<Transfer>(recvs.begin(), recvs.end());
        posted[s] = true;
        // A microbatch's input is received into its slot: no microbatch in flight may hold it.
        for (const Transfer& t : recvs) {
          if (!t.forward) continue;
          for (int other : in_flight[s]) {
            if (other % slots == t.mb % slots) fail("slot reused while in flight");
          }
          received[s].insert(t.mb);
        }
        if (a.kind == K::kForward) {
          if (a.microbatch != forwarded[s]++) fail("forward out of order");
          if (s > 0 && !received[s].count(a.microbatch)) fail("forward before its input");
          in_flight[s].insert(a.microbatch);
          result.max_in_flight[s] =
              std::max<int>(result.max_in_flight[s], static_cast<int>(in_flight[s].size()));
        }
        if (a.kind == K::kBackward) {
          if (a.microbatch != backwarded[s]++) fail("backward out of order");
          if (!in_flight[s].erase(a.microbatch)) fail("backward before forward");
        }
      }
      // Deliver each outstanding send whose receiver has posted the matching receive.
      for (auto it = pending_send[s].begin(); it != pending_send[s].end();) {
        const Transfer& t = *it;
        if (pending_recv[t.to].count(t)) {
          pending_recv[t.to].erase(t);
          delivered[{t.from, t.to}].push_back(t.mb);
          it = pending_send[s].erase(it);
          progress = true;
        } else {
          ++it;
        }
      }
      if (pending_send[s].empty() && pending_recv[s].empty()) {
        ++pc[s];
        posted[s] = false;
        progress = true;
      }
    }
    if (done) break;
    if (!progress) {
      // Every stage waits: either a real deadlock, or a receive that no send will ever match.
      result.deadlock = true;
      return result;
    }
  }
  for (const auto& [pair, mbs] : delivered) {
    for (size_t i = 0; i < mbs.size(); ++i) {
      if (mbs[i] != static_cast<int>(i)) fail("transfers out of microbatch order");
    }
    if (static_cast<int>(mbs.size()) != m) fail("a microbatch was not transferred");
  }
  for (int s = 0; s < p; ++s) {
    if (forwarded[s] != m || backwarded[s] != m) fail("not every microbatch ran");
  }
  return result;
}

std::vector<std::vector<PipelineAction>> Programs(int p, int m) {
  std::vector<std::vector<PipelineAction>> programs;
  for (int s = 0; s < p; ++s) programs.push_back(OneForwardOneBackward(s, p, m));
  return programs;
}

SimResult Simulate(int p, int m) { return Simulate(p, m, Programs(p, m)); }

TEST(PipelineScheduleTest, EveryStageRunsTogetherWithoutDeadlockForManyShapes) {
  for (int p = 1; p <= 6; ++p) {
    for (int m = 1; m <= 12; ++m) {
      SimResult r = Simulate(p, m);
      ASSERT_FALSE(r.deadlock) << "p=" << p << " m=" << m;
      EXPECT_TRUE(r.problem.empty()) << r.problem << " p=" << p << " m=" << m;
      for (int s = 0; s < p; ++s) {
        // The 1F1B rule: stage s holds at most p - s microbatches (the first stage p).
        EXPECT_EQ(r.max_in_flight[s], std::min(p - s, m)) << "p=" << p << " m=" << m << " s=" << s;
        EXPECT_EQ(PipelineSlots(s, p, m), std::min(p - s, m));
      }
    }
  }
}

// The same schedule with each exchange split into a blocking send followed by a blocking
// receive deadlocks in the steady state (both neighbours send first): the simulator sees it, and
// it is why the schedule exchanges.
TEST(PipelineScheduleTest, SplittingTheExchangesDeadlocks) {
  std::vector<std::vector<PipelineAction>> naive;
  for (const auto& program : Programs(2, 4)) {
    naive.emplace_back();
    for (const PipelineAction& a : program) {
      if (a.kind == K::kSendForwardRecvBackward) {
        naive.back().push_back({K::kSendForward, a.microbatch});
        naive.back().push_back({K::kRecvBackward, a.other});
      } else if (a.kind == K::kSendBackwardRecvForward) {
        naive.back().push_back({K::kSendBackward, a.microbatch});
        naive.back().push_back({K::kRecvForward, a.other});
      } else {
        naive.back().push_back(a);
      }
    }
  }
  EXPECT_TRUE(Simulate(2, 4, naive).deadlock);
}

TEST(PipelineScheduleTest, TwoStagesFourMicrobatchesAsMegatronRunsThem) {
  std::vector<std::string> first, last;
  for (const PipelineAction& a : OneForwardOneBackward(0, 2, 4)) first.push_back(ToString(a));
  for (const PipelineAction& a : OneForwardOneBackward(1, 2, 4)) last.push_back(ToString(a));
  EXPECT_THAT(first, ::testing::ElementsAre("F0", "send F0", "F1", "send F1 / recv B0", "B0", "F2",
                                            "send F2 / recv B1", "B1", "F3", "send F3 / recv B2",
                                            "B2", "recv B3", "B3"));
  EXPECT_THAT(last, ::testing::ElementsAre("recv F0", "F0", "B0", "send B0 / recv F1", "F1", "B1",
                                           "send B1 / recv F2", "F2", "B2", "send B2 / recv F3",
                                           "F3", "B3", "send B3"));
  EXPECT_DOUBLE_EQ(BubbleFraction(2, 4), 0.2);
  EXPECT_DOUBLE_EQ(BubbleFraction(1, 4), 0.0);
}

}  // namespace
}  // namespace ringmaster::trainer
