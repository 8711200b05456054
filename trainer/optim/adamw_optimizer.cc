#include "trainer/optim/adamw_optimizer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace ringmaster::trainer {

absl::StatusOr<std::unique_ptr<AdamWOptimizer>> AdamWOptimizer::Create(
    Device* device, const ParameterLayout& layout, std::vector<FlatRange> owned, Tensor params,
    Tensor grads, AdamWConfig config, bool compact_gradients, bool compact_parameters) {
  std::unique_ptr<AdamWOptimizer> opt(
      new AdamWOptimizer(device, std::move(owned), params, grads, config));
  opt->compact_gradients_ = compact_gradients;
  opt->compact_parameters_ = compact_parameters;
  int64_t state = 0;
  int64_t previous_end = 0;
  for (const FlatRange& r : opt->owned_) {
    if (r.offset < previous_end || (!compact_parameters && r.offset + r.size > params.size)) {
      return absl::InvalidArgumentError(absl::StrCat("owned range [", r.offset, ", ",
                                                     r.offset + r.size, ") out of order or bounds"));
    }
    previous_end = r.offset + r.size;
    // Split the range at tensor boundaries so each segment has one weight-decay setting.
    const std::vector<ParamTensor>& tensors = layout.tensors();
    for (size_t i = 0; i < tensors.size(); ++i) {
      const ParamTensor& t = tensors[i];
      const int64_t lo = std::max(r.offset, t.offset);
      const int64_t hi = std::min(r.offset + r.size, t.offset + t.size);
      if (lo < hi) {
        opt->segments_.push_back(
            {lo, state + (lo - r.offset), hi - lo, t.decay, static_cast<int>(i)});
      }
    }
    state += r.size;
  }
  opt->state_size_ = state;
  if (compact_gradients && grads.size < state) {
    return absl::InvalidArgumentError(absl::StrCat("compact gradients hold ", grads.size,
                                                   " elements, want ", state));
  }
  if (compact_parameters && params.size < state) {
    return absl::InvalidArgumentError(
        absl::StrCat("compact parameters hold ", params.size, " elements, want ", state));
  }
  opt->alias_master_ = params.dtype == DType::kF32;
  if (!opt->alias_master_) {
    ASSIGN_OR_RETURN(opt->master_, device->Allocate(state, DType::kF32));
    opt->ResetMastersFromParameters();
  }
  ASSIGN_OR_RETURN(opt->m_, device->Allocate(state, DType::kF32));
  ASSIGN_OR_RETURN(opt->v_, device->Allocate(state, DType::kF32));
  return opt;
}

void AdamWOptimizer::ResetMastersFromParameters() {
  if (alias_master_) return;
  for (const Segment& s : segments_) {
    device_->Convert(master_.Slice(s.state, s.size), Working(s.flat, s.state, s.size));
  }
}

Tensor AdamWOptimizer::Master(int64_t flat, int64_t state, int64_t size) const {
  return alias_master_ ? Working(flat, state, size) : master_.Slice(state, size);
}

absl::StatusOr<double> AdamWOptimizer::OwnedGradientSquares(const std::vector<bool>* counted) {
  std::vector<Tensor> grads;
  grads.reserve(segments_.size());
  for (const Segment& s : segments_) {
    if (counted != nullptr && !(*counted)[s.tensor]) continue;
    grads.push_back(Grad(s.flat, s.state, s.size));
  }
  return device_->SumSquares(grads);
}

void AdamWOptimizer::Step(float lr, int64_t t, float grad_scale) {
  AdamWStep step;
  step.lr = lr;
  step.beta1 = static_cast<float>(config_.beta1);
  step.beta2 = static_cast<float>(config_.beta2);
  step.epsilon = static_cast<float>(config_.epsilon);
  step.t = t;
  step.grad_scale = grad_scale;
  for (const Segment& s : segments_) {
    step.weight_decay = s.decay ? static_cast<float>(config_.weight_decay) : 0.0f;
    device_->AdamW(step, Master(s.flat, s.state, s.size), Working(s.flat, s.state, s.size),
                   Grad(s.flat, s.state, s.size), m_.Slice(s.state, s.size),
                   v_.Slice(s.state, s.size));
  }
}

absl::Status AdamWOptimizer::SaveState(float* master, float* m, float* v) {
  std::fill(master, master + state_size_, 0.0f);
  for (const Segment& s : segments_) {
    Tensor src = Master(s.flat, s.state, s.size);
    if (src.dtype != DType::kF32) return absl::InternalError("master weights must be fp32");
    RETURN_IF_ERROR(device_->CopyToHost(master + s.state, src));
  }
  RETURN_IF_ERROR(device_->CopyToHost(m, m_.tensor()));
  return device_->CopyToHost(v, v_.tensor());
}

absl::Status AdamWOptimizer::LoadState(const float* master, const float* m, const float* v) {
  for (const Segment& s : segments_) {
    Tensor dst = Master(s.flat, s.state, s.size);
    RETURN_IF_ERROR(device_->CopyToDevice(dst, master + s.state));
    if (!alias_master_) device_->Convert(Working(s.flat, s.state, s.size), dst);
  }
  RETURN_IF_ERROR(device_->CopyToDevice(m_.tensor(), m));
  RETURN_IF_ERROR(device_->CopyToDevice(v_.tensor(), v));
  return device_->Synchronize();
}

}  // namespace ringmaster::trainer
