#include "trainer/parallel/pipeline_schedule.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace ringmaster::trainer {

std::string ToString(const PipelineAction& a) {
  const std::string f = absl::StrCat("F", a.microbatch);
  const std::string b = absl::StrCat("B", a.microbatch);
  switch (a.kind) {
    case PipelineActionKind::kRecvForward:
      return "recv " + f;
    case PipelineActionKind::kForward:
      return f;
    case PipelineActionKind::kSendForward:
      return "send " + f;
    case PipelineActionKind::kSendForwardRecvBackward:
      return absl::StrCat("send ", f, " / recv B", a.other);
    case PipelineActionKind::kRecvBackward:
      return "recv " + b;
    case PipelineActionKind::kBackward:
      return b;
    case PipelineActionKind::kSendBackward:
      return "send " + b;
    case PipelineActionKind::kSendBackwardRecvForward:
      return absl::StrCat("send ", b, " / recv F", a.other);
  }
  return "?";
}

int PipelineSlots(int stage, int stages, int microbatches) {
  return std::min(stages - stage, microbatches);
}

double BubbleFraction(int stages, int microbatches) {
  return static_cast<double>(stages - 1) / (microbatches + stages - 1);
}

std::vector<PipelineAction> OneForwardOneBackward(int stage, int stages, int microbatches) {
  using K = PipelineActionKind;
  const bool first = stage == 0;
  const bool last = stage == stages - 1;
  const int warmup = std::min(stages - stage - 1, microbatches);
  const int steady = microbatches - warmup;
  std::vector<PipelineAction> out;
  int fwd = 0, bwd = 0;
  for (int i = 0; i < warmup; ++i, ++fwd) {
    if (!first) out.push_back({K::kRecvForward, fwd});
    out.push_back({K::kForward, fwd});
    if (!last) out.push_back({K::kSendForward, fwd});
  }
  if (steady > 0 && !first) out.push_back({K::kRecvForward, fwd});
  for (int i = 0; i < steady; ++i, ++bwd) {
    out.push_back({K::kForward, fwd});
    if (!last) out.push_back({K::kSendForwardRecvBackward, fwd, bwd});
    ++fwd;
    out.push_back({K::kBackward, bwd});
    if (first) continue;
    if (i + 1 == steady) {
      out.push_back({K::kSendBackward, bwd});
    } else {
      out.push_back({K::kSendBackwardRecvForward, bwd, fwd});
    }
  }
  for (int i = 0; i < warmup; ++i, ++bwd) {
    if (!last) out.push_back({K::kRecvBackward, bwd});
    out.push_back({K::kBackward, bwd});
    if (!first) out.push_back({K::kSendBackward, bwd});
  }
  return out;
}

}  // namespace ringmaster::trainer
