// The shape of a GPT-2-style decoder, and which part of it one rank holds.
#ifndef RINGMASTER_TRAINER_MODEL_GPT_CONFIG_H_
#define RINGMASTER_TRAINER_MODEL_GPT_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace ringmaster::trainer {

struct GptConfig {
  int layers = 0;        // L
  int d_model = 0;       // C
  int heads = 0;         // NH
  int seq_len = 0;       // T (maximum context; positions embedded)
  int vocab = 0;         // V, real tokens
  int padded_vocab = 0;  // Vp: V rounded up to a multiple of 128 (GPT-2: 50257 -> 50304)

  // Validates and pads. INVALID_ARGUMENT naming the model.* field otherwise: every size >= 1,
  // d_model divisible by heads, and the same upper bounds as the coordinator's validation.
  static absl::StatusOr<GptConfig> Create(int layers, int d_model, int heads, int seq_len,
                                          int vocab);

  // Parameters of the whole model (padded vocabulary; the LM head is tied to wte, counted once).
  int64_t ParameterCount() const;
  // Training FLOPs per token, llm.c's formula: 6 N + 6 L C T.
  double FlopsPerToken() const;
  std::string ToString() const;
};

// The part of the model one rank holds: a tensor-parallel slice (Megatron-style: attention heads
// and the MLP's hidden units split across tp_size ranks; embeddings, LayerNorms and the output
// projections' biases replicated) of a contiguous range of layers (a pipeline stage). The first
// stage holds the embeddings; the last the final LayerNorm and the LM head, tied to wte (so the
// last stage holds wte too when it is not also the first).
struct ModelShard {
  int tp_rank = 0;
  int tp_size = 1;
  int first_layer = 0;
  int num_layers = 0;  // 0 means "all layers" in WholeModel().
  bool has_embedding = true;
  bool has_head = true;

  // The whole model on one rank.
  static ModelShard WholeModel(const GptConfig& config);
  // Checks the shard against the config: tp_size divides heads; the layer range fits.
  absl::Status Validate(const GptConfig& config) const;
};

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_MODEL_GPT_CONFIG_H_
