#include "trainer/model/tensor.h"

namespace ringmaster::trainer {

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
    case DType::kI32:
      return "i32";
  }
  return "?";
}

}  // namespace ringmaster::trainer
