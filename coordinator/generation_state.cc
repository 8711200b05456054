#include "coordinator/generation_state.h"

namespace ringmaster::coordinator {

GenerationState GenerationState::Launched(int world, double straggler_threshold) {
  GenerationState state = Recovered(world);
  StragglerOptions options;
  options.threshold = straggler_threshold;
  state.stragglers = std::make_unique<StragglerDetector>(options);
  return state;
}

GenerationState GenerationState::Recovered(int world) {
  GenerationState state;
  state.rank_step.assign(world, 0);
  state.rank_tokens_per_second.assign(world, 0);
  return state;
}

}  // namespace ringmaster::coordinator
