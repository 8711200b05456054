#include "trainer/model/gpt.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "trainer/model/random.h"

namespace ringmaster::trainer {
namespace {

// Hands out consecutive slices of one buffer.
class Carver {
 public:
  explicit Carver(Tensor whole) : whole_(whole) {}
  Tensor Take(int64_t n) {
    Tensor t = whole_.Slice(used_, n);
    used_ += n;
    return t;
  }

 private:
  Tensor whole_;
  int64_t used_ = 0;
};

uint64_t NameStream(const std::string& name) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  return h;
}

// The values of `t` for `layout`'s shard, drawn as the full tensor from its own stream.
std::vector<float> InitialValues(const ParamTensor& t, const ParameterLayout& layout,
                                 uint64_t seed) {
  const int64_t full = int64_t{t.full_rows} * t.full_cols;
  std::vector<float> values(full, t.init_value);
  if (t.init_std > 0) {
    Rng rng(DeriveSeed(seed, NameStream(t.name)));
    for (float& v : values) v = rng.NextNormal() * t.init_std;
  }
  return layout.CutToShard(t, values);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Gpt>> Gpt::Create(Device* device, ParameterLayout layout,
                                                 const GptOptions& options) {
  const ModelShard& s = layout.shard();
  RETURN_IF_ERROR(s.Validate(layout.config()));
  if (options.batch < 1) {
    return FieldError("batch.micro_batch", absl::StrCat("must be >= 1, got ", options.batch));
  }
  if (options.seq_len < 1 || options.seq_len > layout.config().seq_len) {
    return FieldError("model.seq_len",
                      absl::StrCat("sequence length ", options.seq_len, " must be in [1, ",
                                   layout.config().seq_len, "]"));
  }
  if (options.slots < 1) {
    return absl::InvalidArgumentError(absl::StrCat("slots must be >= 1, got ", options.slots));
  }
  Communicator* tp = options.tensor_parallel;
  if (s.tp_size > 1 && (tp == nullptr || tp->size() != s.tp_size || tp->rank() != s.tp_rank)) {
    return FieldError("parallelism.tensor",
                      absl::StrCat("shard ", s.tp_rank, " of ", s.tp_size,
                                   " needs its tensor-parallel group of that size and rank"));
  }
  std::unique_ptr<Gpt> gpt(new Gpt(device, std::move(layout), options));
  RETURN_IF_ERROR(gpt->Allocate(options.buffer_size, options.own_parameters, options.own_gradients,
                                options.slots));
  return gpt;
}

absl::StatusOr<std::unique_ptr<Gpt>> Gpt::Create(Device* device, ParameterLayout layout, int B,
                                                 int T, int64_t buffer_size, bool own_gradients) {
  GptOptions options;
  options.batch = B;
  options.seq_len = T;
  options.buffer_size = buffer_size;
  options.own_gradients = own_gradients;
  return Create(device, std::move(layout), options);
}

Gpt::Gpt(Device* device, ParameterLayout layout, const GptOptions& options)
    : device_(device),
      layout_(std::move(layout)),
      B_(options.batch),
      T_(options.seq_len),
      tp_(options.tensor_parallel != nullptr && options.tensor_parallel->size() > 1
              ? options.tensor_parallel
              : nullptr) {}

absl::Status Gpt::Allocate(int64_t buffer_size, bool own_parameters, bool own_gradients,
                           int slots) {
  const DType dt = device_->compute_dtype();
  const ModelShard& shard = layout_.shard();
  const int64_t N = int64_t{B_} * T_;
  const int64_t C = layout_.config().d_model;
  const int64_t Cl = layout_.local_width();
  const int64_t H = layout_.local_hidden();
  const int64_t att =
      device_->AttentionStateSize(B_, T_, layout_.local_width(), layout_.local_heads());
  const int64_t Vp = layout_.config().padded_vocab;
  const int L = static_cast<int>(layout_.layers().size());

  const int64_t flat = std::max(buffer_size, layout_.size());
  if (own_parameters) {
    ASSIGN_OR_RETURN(params_, device_->Allocate(flat, dt));
  }
  if (own_gradients) {
    ASSIGN_OR_RETURN(grads_, device_->Allocate(flat, dt));
  }
  ASSIGN_OR_RETURN(tokens_, device_->Allocate(2 * N * slots, DType::kI32));

  const int64_t per_layer = N * (C + 3 * Cl + Cl + C + C + C + 2 * H + C + C) + att;
  const int64_t per_layer_stats = 4 * N;
  const int64_t head = shard.has_head ? N * C + N * Vp : 0;
  const int64_t head_stats = shard.has_head ? 3 * N : 0;
  const int64_t per_slot = N * C + head + L * per_layer;
  const int64_t per_slot_stats = head_stats + L * per_layer_stats;
  ASSIGN_OR_RETURN(activations_, device_->Allocate(per_slot * slots, dt));
  ASSIGN_OR_RETURN(stats_,
                   device_->Allocate(std::max<int64_t>(per_slot_stats * slots, 1), DType::kF32));
  Carver a(activations_.tensor());
  Carver s(stats_.tensor());
  Carver t(tokens_.tensor());
  slots_.resize(slots);
  for (Slot& slot : slots_) {
    slot.inputs = t.Take(N);
    slot.targets = t.Take(N);
    slot.encoded = a.Take(N * C);
    if (shard.has_head) {
      slot.lnf = a.Take(N * C);
      slot.logits = a.Take(N * Vp);
      slot.lnf_mean = s.Take(N);
      slot.lnf_rstd = s.Take(N);
      slot.losses = s.Take(N);
    }
    slot.acts.resize(L);
    for (LayerActivations& l : slot.acts) {
      l.ln1 = a.Take(N * C);
      l.qkv = a.Take(N * 3 * Cl);
      l.atty = a.Take(N * Cl);
      l.att = a.Take(att);
      l.attproj = a.Take(N * C);
      l.residual2 = a.Take(N * C);
      l.ln2 = a.Take(N * C);
      l.fch = a.Take(N * H);
      l.fch_gelu = a.Take(N * H);
      l.fcproj = a.Take(N * C);
      l.residual3 = a.Take(N * C);
      l.ln1_mean = s.Take(N);
      l.ln1_rstd = s.Take(N);
      l.ln2_mean = s.Take(N);
      l.ln2_rstd = s.Take(N);
    }
  }

  ASSIGN_OR_RETURN(scratch_, device_->Allocate(N * C * 2 + N * H + N * 3 * Cl + att + N * Cl, dt));
  Carver d(scratch_.tensor());
  dresidual_ = d.Take(N * C);
  dln_ = d.Take(N * C);
  dhidden_ = d.Take(N * H);
  dqkv_ = d.Take(N * 3 * Cl);
  datt_ = d.Take(att);
  datty_ = d.Take(N * Cl);
  host_losses_.resize(N);
  return absl::OkStatus();
}

int64_t Gpt::activation_bytes() const {
  return static_cast<int64_t>(activations_.tensor().bytes() + stats_.tensor().bytes() +
                              tokens_.tensor().bytes() + scratch_.tensor().bytes());
}

absl::Status Gpt::InitParameters(uint64_t seed) {
  for (const ParamTensor& t : layout_.tensors()) {
    std::vector<float> values = InitialValues(t, layout_, seed);
    if (source_ != nullptr) {
      RETURN_IF_ERROR(source_->WriteInitialParameters(t.offset, values.data(), t.size));
      continue;
    }
    Tensor dst = P(t.offset, t.size);
    if (dst.dtype == DType::kF32) {
      RETURN_IF_ERROR(device_->CopyToDevice(dst, values.data()));
    } else {
      ASSIGN_OR_RETURN(DeviceBuffer staging, device_->Allocate(t.size, DType::kF32));
      RETURN_IF_ERROR(device_->CopyToDevice(staging.tensor(), values.data()));
      device_->Convert(dst, staging.tensor());
    }
  }
  return device_->Synchronize();
}

absl::Status Gpt::TensorParallelSum(Tensor t) {
  if (tp_ == nullptr) return absl::OkStatus();
  // The Communicator reads device memory after the operations issued before it (Gloo: the CPU
  // device is synchronous; NCCL: the same stream).
  return tp_->AllReduce(t);
}

absl::Status Gpt::CheckTokens(const int32_t* tokens, const char* what) const {
  const int N = B_ * T_;
  const int V = layout_.config().vocab;
  if (tokens == nullptr) return absl::InvalidArgumentError(absl::StrCat("no ", what, " given"));
  for (int i = 0; i < N; ++i) {
    if (tokens[i] < 0 || tokens[i] >= V) {
      return absl::InvalidArgumentError(absl::StrCat("token ", tokens[i], " at position ", i,
                                                     " is outside the vocabulary [0, ", V, ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<double> Gpt::Forward(int slot_index, const int32_t* inputs, const int32_t* targets,
                                    float dloss_scale) {
  if (slot_index < 0 || slot_index >= slots()) {
    return absl::InvalidArgumentError(absl::StrCat("slot ", slot_index, " of ", slots()));
  }
  if (params_.tensor().empty() && source_ == nullptr) {
    return absl::FailedPreconditionError("Forward needs a parameter buffer or source");
  }
  const ModelShard& shard = layout_.shard();
  const int N = B_ * T_;
  const int C = layout_.config().d_model;
  const int Cl = layout_.local_width();
  const int H = layout_.local_hidden();
  const int NH = layout_.local_heads();
  const int V = layout_.config().vocab;
  const int Vp = layout_.config().padded_vocab;
  // Row-parallel layers add their (replicated) bias on one rank only, before the sum.
  const bool add_bias = shard.tp_rank == 0;
  Slot& s = slots_[slot_index];
  s.backward_ready = false;
  if (shard.has_embedding) {
    RETURN_IF_ERROR(CheckTokens(inputs, "inputs"));
    RETURN_IF_ERROR(device_->CopyToDevice(s.inputs, inputs));
  }
  if (shard.has_head) {
    RETURN_IF_ERROR(CheckTokens(targets, "targets"));
    RETURN_IF_ERROR(device_->CopyToDevice(s.targets, targets));
  }

  using Pass = ParameterSource::Pass;
  const auto& layers = layout_.layers();
  if (shard.has_embedding) {
    device_->EmbeddingForward(s.encoded, s.inputs, P(layout_.wte(), int64_t{Vp} * C),
                              P(layout_.wpe(), int64_t{layout_.config().seq_len} * C), B_, T_, C);
  }
  RETURN_IF_ERROR(Acquire(Pass::kForward, 0));
  for (size_t l = 0; l < layers.size(); ++l) {
    const LayerOffsets& o = layers[l];
    LayerActivations& a = s.acts[l];
    const Tensor residual = l == 0 ? s.encoded : s.acts[l - 1].residual3;
    if (l == 0) {
      device_->LayerNormForward(a.ln1, a.ln1_mean, a.ln1_rstd, s.encoded, P(o.ln1w, C),
                                P(o.ln1b, C), N, C);
    }
    device_->MatmulForward(a.qkv, Tensor{}, a.ln1, P(o.qkvw, int64_t{3} * Cl * C),
                           P(o.qkvb, 3 * Cl), N, C, 3 * Cl);
    device_->AttentionForward(a.atty, a.att, a.qkv, B_, T_, Cl, NH);
    device_->MatmulForward(a.attproj, Tensor{}, a.atty, P(o.attprojw, int64_t{C} * Cl),
                           add_bias ? P(o.attprojb, C) : Tensor{}, N, Cl, C);
    RETURN_IF_ERROR(TensorParallelSum(a.attproj));
    device_->ResidualLayerNormForward(a.residual2, a.ln2, a.ln2_mean, a.ln2_rstd, residual,
                                      a.attproj, P(o.ln2w, C), P(o.ln2b, C), N, C);
    device_->MatmulForward(a.fch, a.fch_gelu, a.ln2, P(o.fcw, int64_t{H} * C), P(o.fcb, H), N, C,
                           H);
    device_->MatmulForward(a.fcproj, Tensor{}, a.fch_gelu, P(o.fcprojw, int64_t{C} * H),
                           add_bias ? P(o.fcprojb, C) : Tensor{}, N, H, C);
    RETURN_IF_ERROR(TensorParallelSum(a.fcproj));
    if (l + 1 < layers.size()) {
      // The next layer's first LayerNorm is fused in: its parameters are needed now.
      RETURN_IF_ERROR(Acquire(Pass::kForward, static_cast<int>(l) + 1));
      LayerActivations& next = s.acts[l + 1];
      device_->ResidualLayerNormForward(a.residual3, next.ln1, next.ln1_mean, next.ln1_rstd,
                                        a.residual2, a.fcproj, P(layers[l + 1].ln1w, C),
                                        P(layers[l + 1].ln1b, C), N, C);
    } else if (shard.has_head) {
      device_->ResidualLayerNormForward(a.residual3, s.lnf, s.lnf_mean, s.lnf_rstd, a.residual2,
                                        a.fcproj, P(layout_.lnfw(), C), P(layout_.lnfb(), C), N, C);
    } else {
      // The stage's output: the residual stream the next stage continues.
      device_->Add(a.residual3, a.residual2, a.fcproj, int64_t{N} * C);
    }
    RETURN_IF_ERROR(Release(static_cast<int>(l)));
  }
  double loss = 0;
  if (shard.has_head) {
    // LM head tied to wte: logits = lnf wte^T.
    device_->MatmulForward(s.logits, Tensor{}, s.lnf, P(layout_.wte(), int64_t{Vp} * C), Tensor{},
                           N, C, Vp);
    // With a scale, the logits become d(scale * mean loss)/d(logits) for Backward.
    device_->CrossEntropy(s.logits, s.losses, s.targets, N, V, Vp, dloss_scale / N);
    RETURN_IF_ERROR(device_->CopyToHost(host_losses_.data(), s.losses));
    double sum = 0;
    for (float x : host_losses_) sum += x;
    loss = sum / N;
  } else {
    RETURN_IF_ERROR(device_->Synchronize());
  }
  s.backward_ready = dloss_scale != 0;
  return loss;
}

absl::Status Gpt::Backward(int slot_index, const GradientsFinal& on_final) {
  if (slot_index < 0 || slot_index >= slots()) {
    return absl::InvalidArgumentError(absl::StrCat("slot ", slot_index, " of ", slots()));
  }
  Slot& s = slots_[slot_index];
  if (!s.backward_ready) {
    return absl::FailedPreconditionError("Backward needs a Forward with a loss scale first");
  }
  if (sink_ == nullptr && grads_.tensor().empty()) {
    return absl::FailedPreconditionError("Backward needs a gradient buffer or sink");
  }
  s.backward_ready = false;
  const ModelShard& shard = layout_.shard();
  const int N = B_ * T_;
  const int C = layout_.config().d_model;
  const int Cl = layout_.local_width();
  const int H = layout_.local_hidden();
  const int NH = layout_.local_heads();
  const int Vp = layout_.config().padded_vocab;
  const auto& layers = layout_.layers();
  auto notify = [&](int64_t low) {
    if (on_final) on_final(low);
  };

  if (shard.has_head) {
    device_->MatmulBackward(dln_, G(layout_.wte(), int64_t{Vp} * C), Tensor{}, s.logits, s.lnf,
                            P(layout_.wte(), int64_t{Vp} * C), N, C, Vp);
    device_->Zero(dresidual_);
    device_->LayerNormBackward(dresidual_, G(layout_.lnfw(), C), G(layout_.lnfb(), C), dln_,
                               s.acts.back().residual3, P(layout_.lnfw(), C), s.lnf_mean,
                               s.lnf_rstd, N, C);
    notify(layout_.lnfw());
  }
  // Otherwise dresidual_ holds the gradient of the stage's output (output_gradient()).
  for (size_t i = layers.size(); i-- > 0;) {
    const LayerOffsets& o = layers[i];
    const LayerActivations& a = s.acts[i];
    const Tensor residual = i == 0 ? s.encoded : s.acts[i - 1].residual3;
    RETURN_IF_ERROR(Acquire(ParameterSource::Pass::kBackward, static_cast<int>(i)));
    if (sink_ != nullptr) RETURN_IF_ERROR(sink_->BeginLayer(static_cast<int>(i)));
    // dresidual is the gradient of residual3 = residual2 + fcproj.
    device_->MatmulBackward(dhidden_, G(o.fcprojw, int64_t{C} * H), G(o.fcprojb, C), dresidual_,
                            a.fch_gelu, P(o.fcprojw, int64_t{C} * H), N, H, C);
    device_->GeluBackward(dhidden_, a.fch, dhidden_, int64_t{N} * H);
    device_->MatmulBackward(dln_, G(o.fcw, int64_t{H} * C), G(o.fcb, H), dhidden_, a.ln2,
                            P(o.fcw, int64_t{H} * C), N, C, H);
    // Column-parallel fc: each rank's input gradient covers its hidden units only.
    RETURN_IF_ERROR(TensorParallelSum(dln_));
    device_->LayerNormBackward(dresidual_, G(o.ln2w, C), G(o.ln2b, C), dln_, a.residual2,
                               P(o.ln2w, C), a.ln2_mean, a.ln2_rstd, N, C);
    // dresidual is now the gradient of residual2 = residual + attproj.
    device_->MatmulBackward(datty_, G(o.attprojw, int64_t{C} * Cl), G(o.attprojb, C), dresidual_,
                            a.atty, P(o.attprojw, int64_t{C} * Cl), N, Cl, C);
    device_->AttentionBackward(dqkv_, datt_, datty_, a.atty, a.qkv, a.att, B_, T_, Cl, NH);
    device_->MatmulBackward(dln_, G(o.qkvw, int64_t{3} * Cl * C), G(o.qkvb, 3 * Cl), dqkv_, a.ln1,
                            P(o.qkvw, int64_t{3} * Cl * C), N, C, 3 * Cl);
    RETURN_IF_ERROR(TensorParallelSum(dln_));
    device_->LayerNormBackward(dresidual_, G(o.ln1w, C), G(o.ln1b, C), dln_, residual,
                               P(o.ln1w, C), a.ln1_mean, a.ln1_rstd, N, C);
    RETURN_IF_ERROR(Release(static_cast<int>(i)));
    notify(o.begin);
  }
  if (shard.has_embedding) {
    device_->EmbeddingBackward(G(layout_.wte(), int64_t{Vp} * C),
                               G(layout_.wpe(), int64_t{layout_.config().seq_len} * C), dresidual_,
                               s.inputs, B_, T_, C);
  }
  // Otherwise dresidual_ is the gradient of the stage's input (input_gradient()).
  notify(0);
  return device_->Synchronize();
}

}  // namespace ringmaster::trainer
