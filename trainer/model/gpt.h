// A GPT-2-style decoder (token + position embeddings, pre-LayerNorm blocks of causal multi-head
// attention and a GELU MLP, final LayerNorm, LM head tied to the token embedding) written
// against the Device interface, so the same code runs on the CPU and CUDA devices.
//
// The model holds its working parameters and gradients in two flat buffers laid out by
// ParameterLayout, and the activations of one microbatch of B sequences of T tokens. It knows
// nothing of data loading, optimizers or communication: a caller runs Forward and Backward per
// microbatch and is told, during Backward, how far the gradients are final (for bucketed
// gradient reduction).
//
// Not thread-safe. Holds a borrowed Device* that must outlive it.
#ifndef RINGMASTER_TRAINER_MODEL_GPT_H_
#define RINGMASTER_TRAINER_MODEL_GPT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/model/device.h"
#include "trainer/model/parameter_layout.h"

namespace ringmaster::trainer {

// Where a backward pass writes gradients, when not into the model's own flat buffer (ZeRO-2
// keeps only a window of layers' gradients; see parallel/zero2_gradients.h).
class GradientSink {
 public:
  virtual ~GradientSink() = default;
  // Called before the backward pass of layer `layer` (index into layout().layers()); the
  // layer's gradients must then be writable and zero.
  virtual absl::Status BeginLayer(int layer) = 0;
  // Memory for the gradients of flat range [offset, offset + size), which lies inside one
  // tensor. Layers accumulate into it.
  virtual Tensor Gradients(int64_t offset, int64_t size) = 0;
};

class Gpt {
 public:
  // Called during Backward: every gradient at flat offset >= `low` is final for this pass.
  using GradientsFinal = std::function<void(int64_t low)>;

  // A model for `layout` processing B sequences of T tokens per microbatch (T <= seq_len).
  // The parameter and gradient buffers hold max(buffer_size, layout.size()) elements (data
  // parallelism pads them; the padding stays zero). Parameters start at zero; call
  // InitParameters or load them. The whole model only for now (layout.shard() must be
  // WholeModel()); tensor and pipeline shards are refused.
  // With `own_gradients` false the model holds no gradient buffer, and a GradientSink must be
  // set before Backward.
  static absl::StatusOr<std::unique_ptr<Gpt>> Create(Device* device, ParameterLayout layout,
                                                     int B, int T, int64_t buffer_size = 0,
                                                     bool own_gradients = true);

  const ParameterLayout& layout() const { return layout_; }
  int batch() const { return B_; }
  int seq_len() const { return T_; }
  Tensor params() const { return params_.tensor(); }
  Tensor grads() const { return grads_.tensor(); }

  // GPT-2 initialisation: matrices normal(0, 0.02) (residual projections 0.02/sqrt(2L)), biases
  // 0, LayerNorm gains 1. Each tensor is drawn from its own stream of `seed` as a full tensor
  // and then cut to this shard, so every layout starts from the same model.
  absl::Status InitParameters(uint64_t seed);

  // Forward pass over inputs and targets (host, B*T token ids each, < vocab). Returns the mean
  // cross-entropy over the B*T tokens. INVALID_ARGUMENT for a token out of range.
  // `dloss_scale` != 0 prepares a Backward of (dloss_scale * mean loss), fusing the loss
  // gradient into the forward pass as llm.c does; 0 evaluates only.
  absl::StatusOr<double> Forward(const int32_t* inputs, const int32_t* targets, float dloss_scale);

  // Backward pass of the last Forward (which must have had a loss scale): accumulates the
  // gradients into grads() (zero them with ZeroGradients between optimizer steps), calling
  // `on_final` as ranges of gradients become final (may be empty). FAILED_PRECONDITION without a
  // training Forward before it.
  absl::Status Backward(const GradientsFinal& on_final);

  // Zeroes the model's own gradient buffer (a sink manages its own).
  void ZeroGradients() {
    if (!grads_.tensor().empty()) device_->Zero(grads_.tensor());
  }
  // Routes gradients to `sink` (borrowed; nullptr: the model's own buffer).
  void SetGradientSink(GradientSink* sink) { sink_ = sink; }

 private:
  struct LayerActivations {
    Tensor ln1, ln1_mean, ln1_rstd, qkv, atty, att, attproj, residual2, ln2, ln2_mean, ln2_rstd,
        fch, fch_gelu, fcproj, residual3;
  };

  Gpt(Device* device, ParameterLayout layout, int B, int T);
  absl::Status Allocate(int64_t buffer_size, bool own_gradients);
  Tensor P(int64_t offset, int64_t size) const { return params_.Slice(offset, size); }
  Tensor G(int64_t offset, int64_t size) const {
    return sink_ != nullptr ? sink_->Gradients(offset, size) : grads_.Slice(offset, size);
  }

  Device* const device_;
  const ParameterLayout layout_;
  const int B_, T_;
  DeviceBuffer params_, grads_;
  DeviceBuffer activations_, stats_, scratch_, tokens_;
  bool backward_ready_ = false;
  GradientSink* sink_ = nullptr;
  Tensor inputs_, targets_, encoded_, lnf_, lnf_mean_, lnf_rstd_, logits_, losses_;
  std::vector<LayerActivations> acts_;
  // Backward scratch.
  Tensor dresidual_, dln_, dhidden_, dqkv_, datt_, datty_;
  std::vector<float> host_losses_;
};

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_MODEL_GPT_H_
