// The 1F1B pipeline schedule (PipeDream-Flush, as Megatron-LM runs it) for one stage: the
// sequence of computations and transfers this stage performs in one optimizer step of m
// microbatches over p stages.
//
// Stage s first runs W = min(p - s - 1, m) forward passes (warm-up), then alternates one forward
// and one backward pass (steady state), then runs the W remaining backward passes (cool-down).
// So at most W + 1 = p - s microbatches are in flight on stage s (forwarded, not yet backwarded):
// p on the first stage, 1 on the last, and the activation memory a stage needs is that many
// microbatches' (Gpt's `slots`). Microbatch i uses slot i % (W + 1).
//
// Transfers between neighbours are matched in order per direction. Where a stage sends forward
// and must receive a gradient from the same neighbour in the same moment, the schedule uses one
// exchange (both posted together) instead of two blocking calls, which would deadlock against a
// neighbour doing the mirror image: pipeline_schedule_test.cc simulates every stage of many
// (p, m) with rendezvous (unbuffered) transfers and checks there is no deadlock.
//
// Idle time ("bubble"): with equal stages, each stage waits (p - 1) forward+backward slots of the
// m + p - 1 a step takes: (p - 1) / (m + p - 1).
#ifndef RINGMASTER_TRAINER_PARALLEL_PIPELINE_SCHEDULE_H_
#define RINGMASTER_TRAINER_PARALLEL_PIPELINE_SCHEDULE_H_

#include <string>
#include <vector>

namespace ringmaster::trainer {

enum class PipelineActionKind {
  kRecvForward,              // receive microbatch's input activations from the previous stage
  kForward,                  // forward pass of microbatch
  kSendForward,              // send microbatch's output activations to the next stage
  kSendForwardRecvBackward,  // with the next stage: send microbatch's output, receive the
                             // gradient of `other`'s output
  kRecvBackward,             // receive the gradient of microbatch's output from the next stage
  kBackward,                 // backward pass of microbatch
  kSendBackward,             // send microbatch's input gradient to the previous stage
  kSendBackwardRecvForward,  // with the previous stage: send microbatch's input gradient,
                             // receive `other`'s input activations
};

struct PipelineAction {
  PipelineActionKind kind;
  int microbatch = 0;
  int other = -1;  // the exchanges' second microbatch
};

// "F3", "B0", "send F3", "recv B0", "send F3 / recv B0", ... (for logs and tests).
std::string ToString(const PipelineAction& action);

// The actions of stage `stage` of `stages` for `microbatches` microbatches (all >= 1).
std::vector<PipelineAction> OneForwardOneBackward(int stage, int stages, int microbatches);

// Microbatches stage `stage` holds at most (= the activation slots it needs).
int PipelineSlots(int stage, int stages, int microbatches);

// (p - 1) / (m + p - 1).
double BubbleFraction(int stages, int microbatches);

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_PARALLEL_PIPELINE_SCHEDULE_H_
