// AdamW over the part of the flat parameter buffer this rank owns: everything under plain data
// parallelism, one chunk of every gradient bucket under ZeRO (parallel/data_parallel.h).
//
// The optimizer state (fp32 master weights, first and second moments) is stored compactly in
// the order of the owned ranges. On a device whose compute dtype is fp32 the master weights are
// the parameters themselves (no copy); otherwise the optimizer keeps fp32 masters and writes the
// updated weights back to the parameters in the compute dtype. Parameters and gradients are laid
// out like the flat buffer, or compactly (only the owned ranges, in order: ZeRO-2's gradients,
// ZeRO-3's parameters and gradients). Weight decay applies to the
// tensors ParameterLayout marks (matrices and embeddings), never to biases or LayerNorm gains.
//
// Not thread-safe. Borrows the device and the parameter and gradient buffers.
#ifndef RINGMASTER_TRAINER_OPTIM_ADAMW_OPTIMIZER_H_
#define RINGMASTER_TRAINER_OPTIM_ADAMW_OPTIMIZER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/model/device.h"
#include "trainer/model/parameter_layout.h"

namespace ringmaster::trainer {

// A range [offset, offset + size) of the flat buffer.
struct FlatRange {
  int64_t offset = 0;
  int64_t size = 0;
};

struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double epsilon = 1e-8;
  double weight_decay = 0;
};

class AdamWOptimizer {
 public:
  // `owned`: ascending, disjoint flat ranges (the flat buffer may extend past layout.size() with
  // padding that no tensor covers and that is never updated). `params` and `grads` are laid out
  // like the flat buffer, or, with `compact_parameters` / `compact_gradients`, hold only the
  // owned ranges in order (state_size() elements).
  static absl::StatusOr<std::unique_ptr<AdamWOptimizer>> Create(
      Device* device, const ParameterLayout& layout, std::vector<FlatRange> owned, Tensor params,
      Tensor grads, AdamWConfig config, bool compact_gradients = false,
      bool compact_parameters = false);

  const std::vector<FlatRange>& owned() const { return owned_; }
  // Elements of state per kind (the total size of the owned ranges).
  int64_t state_size() const { return state_size_; }
  // Sum of squares of the owned gradients; with `counted`, only of the tensors (indices into
  // layout.tensors()) it marks true.
  absl::StatusOr<double> OwnedGradientSquares(const std::vector<bool>* counted = nullptr);
  // Sets the fp32 masters to the working parameters (nothing to do where they are the same
  // memory, on fp32 devices). Create() fills them from the parameters as they are then; call
  // this after the parameters were written another way (initialisation). Enqueued on the device.
  void ResetMastersFromParameters();
  // One AdamW step at learning rate `lr`, step number t (1-based), gradients scaled by
  // `grad_scale` (clipping) on the owned ranges.
  void Step(float lr, int64_t t, float grad_scale);

  // Checkpoint access, host float arrays of state_size() elements, in owned-range order.
  absl::Status SaveState(float* master, float* m, float* v);
  // Restores the state and writes the owned parameters from the masters.
  absl::Status LoadState(const float* master, const float* m, const float* v);

 private:
  struct Segment {
    int64_t flat = 0;   // offset in params/grads
    int64_t state = 0;  // offset in the state buffers
    int64_t size = 0;
    bool decay = false;
    int tensor = 0;  // index into layout.tensors()
  };
  AdamWOptimizer(Device* device, std::vector<FlatRange> owned, Tensor params, Tensor grads,
                 AdamWConfig config)
      : device_(device), owned_(std::move(owned)), params_(params), grads_(grads),
        config_(config) {}
  Tensor Master(int64_t flat, int64_t state, int64_t size) const;
  Tensor Working(int64_t flat, int64_t state, int64_t size) const {
    return compact_parameters_ ? params_.Slice(state, size) : params_.Slice(flat, size);
  }
  Tensor Grad(int64_t flat, int64_t state, int64_t size) const {
    return compact_gradients_ ? grads_.Slice(state, size) : grads_.Slice(flat, size);
  }

  Device* const device_;
  const std::vector<FlatRange> owned_;
  const Tensor params_, grads_;
  const AdamWConfig config_;
  std::vector<Segment> segments_;
  int64_t state_size_ = 0;
  bool alias_master_ = true;
  bool compact_gradients_ = false;
  bool compact_parameters_ = false;
  DeviceBuffer master_, m_, v_;
};

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_OPTIM_ADAMW_OPTIMIZER_H_
