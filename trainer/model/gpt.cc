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

// The values of `t`'s slice for `shard`, drawn as the full tensor from its own stream.
std::vector<float> InitialValues(const ParamTensor& t, const ModelShard& shard, uint64_t seed) {
  const int64_t full = int64_t{t.full_rows} * t.full_cols;
  std::vector<float> values(full, t.init_value);
  if (t.init_std > 0) {
    Rng rng(DeriveSeed(seed, NameStream(t.name)));
    for (float& v : values) v = rng.NextNormal() * t.init_std;
  }
  if (t.split == TensorSplit::kReplicated || shard.tp_size == 1) return values;
  std::vector<float> slice;
  slice.reserve(t.size);
  const int tp = shard.tp_size;
  if (t.split == TensorSplit::kRows) {
    const int block_rows = t.full_rows / t.row_blocks;
    const int rows = block_rows / tp;
    for (int b = 0; b < t.row_blocks; ++b) {
      const int64_t first = int64_t{b} * block_rows + int64_t{shard.tp_rank} * rows;
      slice.insert(slice.end(), values.begin() + first * t.full_cols,
                   values.begin() + (first + rows) * t.full_cols);
    }
  } else {
    const int cols = t.full_cols / tp;
    for (int r = 0; r < t.full_rows; ++r) {
      const auto row = values.begin() + int64_t{r} * t.full_cols + int64_t{shard.tp_rank} * cols;
      slice.insert(slice.end(), row, row + cols);
    }
  }
  return slice;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Gpt>> Gpt::Create(Device* device, ParameterLayout layout, int B,
                                                  int T, int64_t buffer_size,
                                                  bool own_gradients) {
  const ModelShard& s = layout.shard();
  RETURN_IF_ERROR(s.Validate(layout.config()));
  if (s.tp_size != 1 || s.first_layer != 0 || s.num_layers != layout.config().layers ||
      !s.has_embedding || !s.has_head) {
    return absl::UnimplementedError("tensor and pipeline shards of the model are not built yet");
  }
  if (B < 1) return FieldError("batch.micro_batch", absl::StrCat("must be >= 1, got ", B));
  if (T < 1 || T > layout.config().seq_len) {
    return FieldError("model.seq_len", absl::StrCat("sequence length ", T, " must be in [1, ",
                                                    layout.config().seq_len, "]"));
  }
  std::unique_ptr<Gpt> gpt(new Gpt(device, std::move(layout), B, T));
  RETURN_IF_ERROR(gpt->Allocate(buffer_size, own_gradients));
  return gpt;
}

Gpt::Gpt(Device* device, ParameterLayout layout, int B, int T)
    : device_(device), layout_(std::move(layout)), B_(B), T_(T) {}

absl::Status Gpt::Allocate(int64_t buffer_size, bool own_gradients) {
  const DType dt = device_->compute_dtype();
  const int64_t N = int64_t{B_} * T_;
  const int64_t C = layout_.config().d_model;
  const int64_t Cl = layout_.local_width();
  const int64_t H = layout_.local_hidden();
  const int64_t att = int64_t{B_} * layout_.local_heads() * T_ * T_;
  const int64_t Vp = layout_.config().padded_vocab;
  const int L = static_cast<int>(layout_.layers().size());

  const int64_t flat = std::max(buffer_size, layout_.size());
  ASSIGN_OR_RETURN(params_, device_->Allocate(flat, dt));
  if (own_gradients) {
    ASSIGN_OR_RETURN(grads_, device_->Allocate(flat, dt));
  }
  ASSIGN_OR_RETURN(tokens_, device_->Allocate(2 * N, DType::kI32));
  inputs_ = tokens_.Slice(0, N);
  targets_ = tokens_.Slice(N, N);

  const int64_t per_layer = N * (C + 3 * Cl + Cl + C + C + C + 2 * H + C + C) + att;
  const int64_t per_layer_stats = 4 * N;
  const int64_t total = N * C * 2 + N * Vp + L * per_layer;
  const int64_t stats = 2 * N + N + L * per_layer_stats;
  ASSIGN_OR_RETURN(activations_, device_->Allocate(total, dt));
  ASSIGN_OR_RETURN(DeviceBuffer stats_buffer, device_->Allocate(stats, DType::kF32));
  Carver a(activations_.tensor());
  Carver s(stats_buffer.tensor());
  encoded_ = a.Take(N * C);
  lnf_ = a.Take(N * C);
  logits_ = a.Take(N * Vp);
  lnf_mean_ = s.Take(N);
  lnf_rstd_ = s.Take(N);
  losses_ = s.Take(N);
  acts_.resize(L);
  for (LayerActivations& l : acts_) {
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
  stats_ = std::move(stats_buffer);  // The views above point into it; moving keeps the memory.

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

absl::Status Gpt::InitParameters(uint64_t seed) {
  for (const ParamTensor& t : layout_.tensors()) {
    std::vector<float> values = InitialValues(t, layout_.shard(), seed);
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

absl::StatusOr<double> Gpt::Forward(const int32_t* inputs, const int32_t* targets,
                                    float dloss_scale) {
  const int N = B_ * T_;
  const int C = layout_.config().d_model;
  const int Cl = layout_.local_width();
  const int H = layout_.local_hidden();
  const int NH = layout_.local_heads();
  const int V = layout_.config().vocab;
  const int Vp = layout_.config().padded_vocab;
  for (int i = 0; i < N; ++i) {
    if (inputs[i] < 0 || inputs[i] >= V || targets[i] < 0 || targets[i] >= V) {
      return absl::InvalidArgumentError(
          absl::StrCat("token ", inputs[i] < 0 || inputs[i] >= V ? inputs[i] : targets[i],
                       " at position ", i, " is outside the vocabulary [0, ", V, ")"));
    }
  }
  RETURN_IF_ERROR(device_->CopyToDevice(inputs_, inputs));
  RETURN_IF_ERROR(device_->CopyToDevice(targets_, targets));

  const auto& layers = layout_.layers();
  device_->EmbeddingForward(encoded_, inputs_, P(layout_.wte(), int64_t{Vp} * C),
                            P(layout_.wpe(), int64_t{layout_.config().seq_len} * C), B_, T_, C);
  for (size_t l = 0; l < layers.size(); ++l) {
    const LayerOffsets& o = layers[l];
    LayerActivations& a = acts_[l];
    const Tensor residual = l == 0 ? encoded_ : acts_[l - 1].residual3;
    if (l == 0) {
      device_->LayerNormForward(a.ln1, a.ln1_mean, a.ln1_rstd, encoded_, P(o.ln1w, C),
                                P(o.ln1b, C), N, C);
    }
    device_->MatmulForward(a.qkv, Tensor{}, a.ln1, P(o.qkvw, int64_t{3} * Cl * C),
                           P(o.qkvb, 3 * Cl), N, C, 3 * Cl);
    device_->AttentionForward(a.atty, a.att, a.qkv, B_, T_, Cl, NH);
    device_->MatmulForward(a.attproj, Tensor{}, a.atty, P(o.attprojw, int64_t{C} * Cl),
                           P(o.attprojb, C), N, Cl, C);
    device_->ResidualLayerNormForward(a.residual2, a.ln2, a.ln2_mean, a.ln2_rstd, residual,
                                      a.attproj, P(o.ln2w, C), P(o.ln2b, C), N, C);
    device_->MatmulForward(a.fch, a.fch_gelu, a.ln2, P(o.fcw, int64_t{H} * C), P(o.fcb, H), N, C,
                           H);
    device_->MatmulForward(a.fcproj, Tensor{}, a.fch_gelu, P(o.fcprojw, int64_t{C} * H),
                           P(o.fcprojb, C), N, H, C);
    if (l + 1 < layers.size()) {
      LayerActivations& next = acts_[l + 1];
      device_->ResidualLayerNormForward(a.residual3, next.ln1, next.ln1_mean, next.ln1_rstd,
                                        a.residual2, a.fcproj, P(layers[l + 1].ln1w, C),
                                        P(layers[l + 1].ln1b, C), N, C);
    } else {
      device_->ResidualLayerNormForward(a.residual3, lnf_, lnf_mean_, lnf_rstd_, a.residual2,
                                        a.fcproj, P(layout_.lnfw(), C), P(layout_.lnfb(), C), N,
                                        C);
    }
  }
  // LM head tied to wte: logits = lnf wte^T.
  device_->MatmulForward(logits_, Tensor{}, lnf_, P(layout_.wte(), int64_t{Vp} * C), Tensor{}, N,
                         C, Vp);
  // With a scale, the logits become d(scale * mean loss)/d(logits) for Backward.
  device_->CrossEntropy(logits_, losses_, targets_, N, V, Vp, dloss_scale / N);
  RETURN_IF_ERROR(device_->CopyToHost(host_losses_.data(), losses_));
  double sum = 0;
  for (float x : host_losses_) sum += x;
  backward_ready_ = dloss_scale != 0;
  return sum / N;
}

absl::Status Gpt::Backward(const GradientsFinal& on_final) {
  if (!backward_ready_) {
    return absl::FailedPreconditionError("Backward needs a Forward with a loss scale first");
  }
  if (sink_ == nullptr && grads_.tensor().empty()) {
    return absl::FailedPreconditionError("Backward needs a gradient buffer or sink");
  }
  backward_ready_ = false;
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

  device_->MatmulBackward(dln_, G(layout_.wte(), int64_t{Vp} * C), Tensor{}, logits_, lnf_,
                          P(layout_.wte(), int64_t{Vp} * C), N, C, Vp);
  device_->Zero(dresidual_);
  device_->LayerNormBackward(dresidual_, G(layout_.lnfw(), C), G(layout_.lnfb(), C), dln_,
                             acts_.back().residual3, P(layout_.lnfw(), C), lnf_mean_, lnf_rstd_,
                             N, C);
  notify(layout_.lnfw());
  for (size_t i = layers.size(); i-- > 0;) {
    const LayerOffsets& o = layers[i];
    const LayerActivations& a = acts_[i];
    const Tensor residual = i == 0 ? encoded_ : acts_[i - 1].residual3;
    if (sink_ != nullptr) RETURN_IF_ERROR(sink_->BeginLayer(static_cast<int>(i)));
    // dresidual is the gradient of residual3 = residual2 + fcproj.
    device_->MatmulBackward(dhidden_, G(o.fcprojw, int64_t{C} * H), G(o.fcprojb, C), dresidual_,
                            a.fch_gelu, P(o.fcprojw, int64_t{C} * H), N, H, C);
    device_->GeluBackward(dhidden_, a.fch, dhidden_, int64_t{N} * H);
    device_->MatmulBackward(dln_, G(o.fcw, int64_t{H} * C), G(o.fcb, H), dhidden_, a.ln2,
                            P(o.fcw, int64_t{H} * C), N, C, H);
    device_->LayerNormBackward(dresidual_, G(o.ln2w, C), G(o.ln2b, C), dln_, a.residual2,
                               P(o.ln2w, C), a.ln2_mean, a.ln2_rstd, N, C);
    // dresidual is now the gradient of residual2 = residual + attproj.
    device_->MatmulBackward(datty_, G(o.attprojw, int64_t{C} * Cl), G(o.attprojb, C), dresidual_,
                            a.atty, P(o.attprojw, int64_t{C} * Cl), N, Cl, C);
    device_->AttentionBackward(dqkv_, datt_, datty_, a.qkv, a.att, B_, T_, Cl, NH);
    device_->MatmulBackward(dln_, G(o.qkvw, int64_t{3} * Cl * C), G(o.qkvb, 3 * Cl), dqkv_, a.ln1,
                            P(o.qkvw, int64_t{3} * Cl * C), N, C, 3 * Cl);
    device_->LayerNormBackward(dresidual_, G(o.ln1w, C), G(o.ln1b, C), dln_, residual,
                               P(o.ln1w, C), a.ln1_mean, a.ln1_rstd, N, C);
    notify(o.begin);
  }
  device_->EmbeddingBackward(G(layout_.wte(), int64_t{Vp} * C),
                             G(layout_.wpe(), int64_t{layout_.config().seq_len} * C), dresidual_,
                             inputs_, B_, T_, C);
  notify(0);
  return device_->Synchronize();
}

}  // namespace ringmaster::trainer
