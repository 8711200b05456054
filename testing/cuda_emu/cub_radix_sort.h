// cub::DeviceRadixSort::SortPairs for kernels run on the CPU (cuda_emu.h): the same contract
// (a size query with null temporary storage; a stable sort of the pairs by key, signed keys in
// numeric order), done by std::stable_sort, in stream order (fake_streams.h: deferred like a
// kernel). Only what the .cu files call.
#ifndef RINGMASTER_TESTING_CUDA_EMU_CUB_RADIX_SORT_H_
#define RINGMASTER_TESTING_CUDA_EMU_CUB_RADIX_SORT_H_

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <numeric>
#include <vector>

#include "testing/cuda_emu/fake_streams.h"

namespace cub {

struct DeviceRadixSort {
  template <typename Key, typename Value>
  static cudaError_t SortPairs(void* temp, size_t& temp_bytes, const Key* keys_in, Key* keys_out,
                               const Value* values_in, Value* values_out, int n, int begin_bit = 0,
                               int end_bit = sizeof(Key) * 8, cudaStream_t stream = nullptr) {
    if (begin_bit != 0 || end_bit != static_cast<int>(sizeof(Key) * 8)) {
      return cudaErrorInvalidValue;  // partial-bit sorts are not emulated
    }
    if (temp == nullptr) {
      temp_bytes = 256;  // some storage, as cub asks for
      return cudaSuccess;
    }
    return emu::Defer(
        stream,
        [=] {
          std::vector<int> order(n);
          std::iota(order.begin(), order.end(), 0);
          std::stable_sort(order.begin(), order.end(),
                           [&](int a, int b) { return keys_in[a] < keys_in[b]; });
          std::vector<Key> keys(n);
          std::vector<Value> values(n);
          for (int i = 0; i < n; ++i) {
            keys[i] = keys_in[order[i]];
            values[i] = values_in[order[i]];
          }
          std::copy(keys.begin(), keys.end(), keys_out);
          std::copy(values.begin(), values.end(), values_out);
          return cudaSuccess;
        },
        "cub::DeviceRadixSort::SortPairs");
  }
};

}  // namespace cub

#endif  // RINGMASTER_TESTING_CUDA_EMU_CUB_RADIX_SORT_H_
