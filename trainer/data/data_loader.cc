#include "trainer/data/data_loader.h"

#include <numeric>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "trainer/model/random.h"

namespace ringmaster::trainer {

absl::StatusOr<std::unique_ptr<DataLoader>> DataLoader::Create(
    std::shared_ptr<const TokenSource> source, DataLoaderOptions options) {
  if (options.seq_len < 1 || options.micro_batch < 1 || options.dp_size < 1 ||
      options.dp_rank < 0 || options.dp_rank >= options.dp_size) {
    return absl::InvalidArgumentError("data loader: bad batch shape or data-parallel position");
  }
  const int64_t samples = (source->size() - 1) / options.seq_len;
  if (samples < 1) {
    return FieldError("trainer.data",
                      absl::StrCat(source->description(), " holds fewer than seq_len + 1 (",
                                   options.seq_len + 1, ") tokens"));
  }
  if (samples > int64_t{UINT32_MAX}) {
    return FieldError("trainer.data", absl::StrCat(source->description(), " has more than 2^32 ",
                                                   "samples; use a longer seq_len"));
  }
  return std::unique_ptr<DataLoader>(new DataLoader(std::move(source), options, samples));
}

int64_t DataLoader::SampleAt(int64_t g) {
  const int64_t epoch = g / samples_;
  auto it = permutations_.find(epoch);
  if (it == permutations_.end()) {
    if (permutations_.size() >= 2) permutations_.erase(permutations_.begin());
    std::vector<uint32_t> perm(static_cast<size_t>(samples_));
    std::iota(perm.begin(), perm.end(), 0u);
    Rng rng(DeriveSeed(options_.seed, static_cast<uint64_t>(epoch)));
    for (int64_t i = samples_ - 1; i > 0; --i) {
      std::swap(perm[i], perm[rng.Below(static_cast<uint64_t>(i + 1))]);
    }
    it = permutations_.emplace(epoch, std::move(perm)).first;
  }
  return it->second[static_cast<size_t>(g % samples_)];
}

void DataLoader::Fill(int micro, int32_t* inputs, int32_t* targets) {
  const int T = options_.seq_len;
  const int B = options_.micro_batch;
  window_.resize(static_cast<size_t>(T) + 1);
  const int64_t first = position_ + int64_t{micro} * B * options_.dp_size +
                        int64_t{options_.dp_rank} * B;
  for (int b = 0; b < B; ++b) {
    const int64_t sample = SampleAt(first + b);
    source_->Copy(sample * T, T + 1, window_.data());
    std::copy(window_.begin(), window_.begin() + T, inputs + int64_t{b} * T);
    std::copy(window_.begin() + 1, window_.end(), targets + int64_t{b} * T);
  }
}

}  // namespace ringmaster::trainer
