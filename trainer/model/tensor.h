// Tensors as the model and the parallel code see them: a typed view of memory that a Device
// owns (host memory for the CPU device, GPU memory for the CUDA device). The model never reads
// tensor contents itself; it only passes views to Device operations, so a device is free to pick
// where and how its data lives.
#ifndef RINGMASTER_TRAINER_MODEL_TENSOR_H_
#define RINGMASTER_TRAINER_MODEL_TENSOR_H_

#include <cstddef>
#include <cstdint>

namespace ringmaster::trainer {

enum class DType { kF32, kBF16, kI32 };

// Bytes per element of `dtype`.
inline size_t DTypeSize(DType dtype) { return dtype == DType::kBF16 ? 2 : 4; }
const char* DTypeName(DType dtype);

// A non-owning view of `size` elements of `dtype` at `data`. Cheap to copy. A default view is
// empty (data == nullptr, size == 0), which operations read as "absent" where documented.
struct Tensor {
  void* data = nullptr;
  int64_t size = 0;
  DType dtype = DType::kF32;

  bool empty() const { return data == nullptr; }
  size_t bytes() const { return static_cast<size_t>(size) * DTypeSize(dtype); }
  // Elements [offset, offset + count) of this view. The caller keeps the range in bounds.
  Tensor Slice(int64_t offset, int64_t count) const {
    return Tensor{static_cast<char*>(data) + offset * static_cast<int64_t>(DTypeSize(dtype)),
                  count, dtype};
  }
  // Typed access for code that knows the memory is host memory of that type (CPU device,
  // tests). Checked by the callers' dtype contracts, not here.
  float* f32() const { return static_cast<float*>(data); }
  int32_t* i32() const { return static_cast<int32_t*>(data); }
};

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_MODEL_TENSOR_H_
