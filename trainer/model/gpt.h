// A GPT-2-style decoder (token + position embeddings, pre-LayerNorm blocks of causal multi-head
// attention and a GELU MLP, final LayerNorm, LM head tied to the token embedding) written
// against the Device interface, so the same code runs on the CPU and CUDA devices.
//
// One Gpt is the part of the model one rank holds (ModelShard): all of it, or a tensor-parallel
// slice of a pipeline stage's layers.
//  - Tensor parallelism (Megatron-style): each block's attention heads and MLP hidden units are
//    split over the TP group. qkv and fc are column-parallel (no communication), attproj and
//    fcproj row-parallel: their partial outputs are summed with one all-reduce per sub-block in
//    the forward pass, and the partial input gradients of qkv and fc with one all-reduce per
//    sub-block in the backward pass (Megatron's g and f). The embeddings, LayerNorms and the
//    row-parallel layers' biases are replicated (the bias is added by TP rank 0 only, before the
//    sum); the LM head is replicated: every TP rank computes the full logits and loss. Replicated
//    parameters get identical gradients on every TP rank, so no extra communication keeps them
//    equal. The group is a Communicator, so Gloo (CPU) and NCCL (GPU) plug in alike.
//  - Pipeline parallelism: a stage without the embeddings takes its input activations through
//    stage_input(); one without the head passes stage_output() on and takes the gradient of that
//    output through output_gradient() before Backward; input_gradient() is what it sends back.
//    Several microbatches can be in flight (`slots` sets of activations); the schedule lives in
//    parallel/pipeline_schedule.h.
//
// The model holds its working parameters and gradients in two flat buffers laid out by
// ParameterLayout, unless a ParameterSource (ZeRO-3) or GradientSink (ZeRO-2/3) provides them,
// and the activations of `slots` microbatches of B sequences of T tokens. It knows nothing of
// data loading or optimizers; a caller runs Forward and Backward per microbatch and is told,
// during Backward, how far the gradients are final (for bucketed gradient reduction).
//
// Not thread-safe: one thread calls everything, including the tensor-parallel collectives.
// Holds a borrowed Device* and Communicator* that must outlive it.
#ifndef RINGMASTER_TRAINER_MODEL_GPT_H_
#define RINGMASTER_TRAINER_MODEL_GPT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/comm/communicator.h"
#include "trainer/model/device.h"
#include "trainer/model/parameter_layout.h"

namespace ringmaster::trainer {

// Where a backward pass writes gradients, when not into the model's own flat buffer (ZeRO-2/3
// keep only a window of layers' gradients; see parallel/zero2_gradients.h).
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

// Where the model reads its parameters, when it does not hold them all (ZeRO-3 keeps a shard and
// gathers each layer just before use; see parallel/zero3_parameters.h).
class ParameterSource {
 public:
  // The direction a pass walks the layers: forward ascending, backward descending.
  enum class Pass { kForward, kBackward };
  virtual ~ParameterSource() = default;
  // Before a pass reads layer `layer` (index into layout().layers()): its parameters are then
  // readable through Parameters() until ReleaseLayer(layer). At most two layers are held at once
  // (a forward pass's fused LayerNorm reads the next layer's). Errors are the communicator's.
  virtual absl::Status AcquireLayer(Pass pass, int layer) = 0;
  // The pass is done with the layer; its memory may be reused.
  virtual absl::Status ReleaseLayer(int layer) = 0;
  // The parameters of flat range [offset, offset + size) inside one tensor, of an acquired layer
  // or outside the layers (embeddings, final norm: always readable).
  virtual Tensor Parameters(int64_t offset, int64_t size) = 0;
  // Initial values (host fp32) of one whole tensor at flat `offset`: the source keeps its part.
  // They become readable once the source's owner has gathered them.
  virtual absl::Status WriteInitialParameters(int64_t offset, const float* values,
                                              int64_t size) = 0;
};

struct GptOptions {
  int batch = 1;               // B, sequences per microbatch
  int seq_len = 1;             // T <= config.seq_len
  int64_t buffer_size = 0;     // flat buffers hold max(buffer_size, layout.size()) (DP pads them)
  bool own_parameters = true;  // false: a ParameterSource must be set before Forward
  bool own_gradients = true;   // false: a GradientSink must be set before Backward
  int slots = 1;               // microbatches whose activations can be held at once
  // The tensor-parallel group (size shard.tp_size, rank shard.tp_rank); needed when tp_size > 1.
  Communicator* tensor_parallel = nullptr;
};

class Gpt {
 public:
  // Called during Backward: every gradient at flat offset >= `low` is final for this pass.
  using GradientsFinal = std::function<void(int64_t low)>;

  // A model for `layout` (any ModelShard). Parameters start at zero; call InitParameters or load
  // them. INVALID_ARGUMENT naming the field for a bad shard, batch or sequence length, or a
  // tensor-parallel group that does not match the shard; RESOURCE_EXHAUSTED from the device.
  static absl::StatusOr<std::unique_ptr<Gpt>> Create(Device* device, ParameterLayout layout,
                                                     const GptOptions& options);
  // The whole-model shorthand: one slot, no tensor parallelism.
  static absl::StatusOr<std::unique_ptr<Gpt>> Create(Device* device, ParameterLayout layout,
                                                     int B, int T, int64_t buffer_size = 0,
                                                     bool own_gradients = true);

  const ParameterLayout& layout() const { return layout_; }
  int batch() const { return B_; }
  int seq_len() const { return T_; }
  int slots() const { return static_cast<int>(slots_.size()); }
  // The flat buffers; empty when not owned.
  Tensor params() const { return params_.tensor(); }
  Tensor grads() const { return grads_.tensor(); }
  // Bytes of activation memory (every slot, and the backward scratch).
  int64_t activation_bytes() const;

  // Pipeline stage boundaries, [B*T, C] each (see the header comment). stage_input(slot) is
  // written by the caller before Forward(slot) on a stage without the embeddings;
  // stage_output(slot) is valid after Forward(slot) on a stage without the head.
  // output_gradient() is written by the caller before Backward on a stage without the head;
  // input_gradient() is valid after Backward on a stage without the embeddings. The last two
  // are the same memory (the backward pass's running residual gradient).
  Tensor stage_input(int slot) const { return slots_[slot].encoded; }
  Tensor stage_output(int slot) const { return slots_[slot].acts.back().residual3; }
  Tensor output_gradient() const { return dresidual_; }
  Tensor input_gradient() const { return dresidual_; }

  // GPT-2 initialisation: matrices normal(0, 0.02) (residual projections 0.02/sqrt(2L)), biases
  // 0, LayerNorm gains 1. Each tensor is drawn from its own stream of `seed` as a full tensor
  // and then cut to this shard, so every layout starts from the same model.
  absl::Status InitParameters(uint64_t seed);

  // Forward pass of microbatch slot `slot` over inputs and targets (host, B*T token ids each,
  // < vocab; inputs are read only by a stage with the embeddings, targets only by one with the
  // head, and may be null otherwise). Returns the mean cross-entropy over the B*T tokens (0 on a
  // stage without the head). INVALID_ARGUMENT for a token out of range.
  // `dloss_scale` != 0 prepares a Backward of (dloss_scale * mean loss), fusing the loss
  // gradient into the forward pass as llm.c does; 0 evaluates only.
  absl::StatusOr<double> Forward(int slot, const int32_t* inputs, const int32_t* targets,
                                 float dloss_scale);
  absl::StatusOr<double> Forward(const int32_t* inputs, const int32_t* targets, float dloss_scale) {
    return Forward(0, inputs, targets, dloss_scale);
  }

  // Backward pass of slot `slot`'s last Forward (which must have had a loss scale): accumulates
  // the gradients into grads() or the sink (zero them with ZeroGradients between optimizer
  // steps), calling `on_final` as ranges of gradients become final (may be empty).
  // FAILED_PRECONDITION without a training Forward before it.
  absl::Status Backward(int slot, const GradientsFinal& on_final);
  absl::Status Backward(const GradientsFinal& on_final) { return Backward(0, on_final); }

  // Zeroes the model's own gradient buffer (a sink manages its own).
  void ZeroGradients() {
    if (!grads_.tensor().empty()) device_->Zero(grads_.tensor());
  }
  // Routes gradients to `sink` (borrowed; nullptr: the model's own buffer).
  void SetGradientSink(GradientSink* sink) { sink_ = sink; }
  // Reads parameters from `source` (borrowed; nullptr: the model's own buffer).
  void SetParameterSource(ParameterSource* source) { source_ = source; }

 private:
  struct LayerActivations {
    Tensor ln1, ln1_mean, ln1_rstd, qkv, atty, att, attproj, residual2, ln2, ln2_mean, ln2_rstd,
        fch, fch_gelu, fcproj, residual3;
  };
  // One microbatch in flight.
  struct Slot {
    Tensor inputs, targets;  // kI32 [N]
    Tensor encoded;          // [N, C]: the embeddings' output, or the stage's input
    Tensor lnf, lnf_mean, lnf_rstd, logits, losses;  // with the head only
    std::vector<LayerActivations> acts;
    bool backward_ready = false;
  };

  Gpt(Device* device, ParameterLayout layout, const GptOptions& options);
  absl::Status Allocate(int64_t buffer_size, bool own_parameters, bool own_gradients, int slots);
  Tensor P(int64_t offset, int64_t size) const {
    return source_ != nullptr ? source_->Parameters(offset, size) : params_.Slice(offset, size);
  }
  Tensor G(int64_t offset, int64_t size) const {
    return sink_ != nullptr ? sink_->Gradients(offset, size) : grads_.Slice(offset, size);
  }
  absl::Status Acquire(ParameterSource::Pass pass, int layer) {
    return source_ != nullptr ? source_->AcquireLayer(pass, layer) : absl::OkStatus();
  }
  absl::Status Release(int layer) {
    return source_ != nullptr ? source_->ReleaseLayer(layer) : absl::OkStatus();
  }
  // Sums a partial result over the tensor-parallel group (no-op without one).
  absl::Status TensorParallelSum(Tensor t);
  absl::Status CheckTokens(const int32_t* tokens, const char* what) const;

  Device* const device_;
  const ParameterLayout layout_;
  const int B_, T_;
  Communicator* const tp_;  // null or size 1: no tensor parallelism
  DeviceBuffer params_, grads_;
  DeviceBuffer activations_, stats_, scratch_, tokens_;
  GradientSink* sink_ = nullptr;
  ParameterSource* source_ = nullptr;
  std::vector<Slot> slots_;
  // Backward scratch, shared by the slots (one backward pass at a time).
  Tensor dresidual_, dln_, dhidden_, dqkv_, datt_, datty_;
  std::vector<float> host_losses_;
};

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_MODEL_GPT_H_
