#include "trainer/model/tensor.h"

#include <utility>

#include "common/enum_name.h"

namespace ringmaster::trainer {

const char* DTypeName(DType dtype) {
  static constexpr std::pair<DType, const char*> kNames[] = {
      {DType::kF32, "f32"}, {DType::kBF16, "bf16"}, {DType::kI32, "i32"}};
  return EnumName(kNames, dtype, "?");
}

}  // namespace ringmaster::trainer
