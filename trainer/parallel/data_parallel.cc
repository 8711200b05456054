#include "trainer/parallel/data_parallel.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace ringmaster::trainer {

absl::StatusOr<std::unique_ptr<DataParallel>> DataParallel::Create(
    Device* device, Communicator* dp, const ParameterLayout& layout, Tensor params, Tensor grads,
    DataParallelOptions options, AdamWConfig adamw) {
  if (options.zero_stage < 0 || options.zero_stage > 2) {
    return FieldError("trainer.zero_stage",
                      absl::StrCat("must be 0, 1 or 2 on this trainer, got ", options.zero_stage));
  }
  const int64_t padded = PaddedSize(layout.size(), dp->size());
  if (params.size != padded || (options.zero_stage < 2 && grads.size != padded)) {
    return absl::InvalidArgumentError(absl::StrCat("parameter buffers hold ", params.size,
                                                   " elements, want ", padded));
  }
  std::unique_ptr<DataParallel> p(new DataParallel(device, dp, params, grads, options));
  if (dp->size() > 1) p->queue_ = std::make_unique<CommQueue>();
  const int64_t bucket_elements =
      options.bucket_bytes / static_cast<int64_t>(DTypeSize(params.dtype));
  p->buckets_ = PlanBuckets(layout.size(), dp->size(), bucket_elements);
  if (options.zero_stage == 2) {
    ASSIGN_OR_RETURN(p->zero2_, Zero2Gradients::Create(device, dp, p->queue_.get(), layout));
    ASSIGN_OR_RETURN(p->optimizer_,
                     AdamWOptimizer::Create(device, layout, p->zero2_->owned(), params,
                                            p->zero2_->shard(), adamw, /*compact_gradients=*/true));
    return p;
  }
  std::vector<FlatRange> owned = {{0, padded}};
  if (options.zero_stage > 0) owned = OwnedRanges(p->buckets_, dp->rank(), dp->size());
  ASSIGN_OR_RETURN(p->optimizer_,
                   AdamWOptimizer::Create(device, layout, std::move(owned), params, grads, adamw));
  return p;
}

void DataParallel::BeginStep() {
  if (zero2_ != nullptr) zero2_->BeginStep();
}

void DataParallel::BeginMicrobatch(bool last) {
  if (zero2_ != nullptr) {
    zero2_->BeginMicrobatch(last);
    return;
  }
  reducing_ = last;
  next_bucket_ = 0;
}

void DataParallel::Issue(const Bucket& bucket) {
  if (queue_ == nullptr) return;
  Tensor whole = grads_.Slice(bucket.begin, bucket.size());
  if (options_.zero_stage == 0) {
    queue_->Enqueue([this, whole] { return dp_->AllReduce(whole); });
    return;
  }
  const FlatRange own = OwnedChunk(bucket, dp_->rank(), dp_->size());
  Tensor chunk = grads_.Slice(own.offset, own.size);
  // In place: the owned chunk of the bucket receives the sum.
  queue_->Enqueue([this, whole, chunk] { return dp_->ReduceScatter(whole, chunk); });
}

void DataParallel::OnGradientsFinal(int64_t low) {
  if (zero2_ != nullptr) {
    zero2_->OnGradientsFinal(low);
    return;
  }
  if (!reducing_) return;
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].begin >= low) {
    Issue(buckets_[next_bucket_++]);
  }
}

void DataParallel::SumAsync(float* value) {
  if (queue_ == nullptr) return;
  Communicator* dp = dp_;
  queue_->Enqueue([dp, value] { return dp->AllReduce(Tensor{value, 1, DType::kF32}); });
}

absl::Status DataParallel::FinishReduction() {
  if (zero2_ != nullptr) {
    absl::Status s = zero2_->Finish();
    if (queue_ != nullptr) queue_->Drain().IgnoreError();  // its error, if any, is in `s`
    return s;
  }
  reducing_ = true;
  OnGradientsFinal(0);
  reducing_ = false;
  if (queue_ == nullptr) return absl::OkStatus();
  return queue_->Drain();
}

absl::StatusOr<double> DataParallel::GradientNorm() {
  if (options_.zero_stage == 0) {
    ASSIGN_OR_RETURN(double sum, device_->SumSquares(grads_));
    return std::sqrt(sum);
  }
  ASSIGN_OR_RETURN(double owned, optimizer_->OwnedGradientSquares());
  float sum = static_cast<float>(owned);
  if (dp_->size() > 1) RETURN_IF_ERROR(dp_->AllReduce(Tensor{&sum, 1, DType::kF32}));
  return std::sqrt(static_cast<double>(sum));
}

absl::Status DataParallel::Step(float lr, int64_t t, float grad_scale) {
  optimizer_->Step(lr, t, grad_scale);
  if (options_.zero_stage == 0) return device_->Synchronize();
  return GatherParameters();
}

absl::Status DataParallel::GatherParameters() {
  if (zero2_ != nullptr) return zero2_->GatherParameters(params_);
  RETURN_IF_ERROR(device_->Synchronize());
  if (dp_->size() == 1) return absl::OkStatus();
  for (const Bucket& b : buckets_) {
    const FlatRange own = OwnedChunk(b, dp_->rank(), dp_->size());
    RETURN_IF_ERROR(
        dp_->AllGather(params_.Slice(own.offset, own.size), params_.Slice(b.begin, b.size())));
  }
  return absl::OkStatus();
}

int64_t DataParallel::state_bytes() const {
  const int64_t weights =
      params_.bytes() + (zero2_ != nullptr ? zero2_->bytes() : grads_.bytes());
  const bool separate_master = params_.dtype != DType::kF32;
  return weights + optimizer_->state_size() * 4 * (separate_master ? 3 : 2);
}

}  // namespace ringmaster::trainer
