#include "trainer/parallel/data_parallel.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace ringmaster::trainer {
namespace {

// Sums a double over `comm` as two floats (the value and its rounding error), which keeps about
// 48 bits of it: enough that the summed norm matches a single rank's to ~1e-14.
absl::StatusOr<double> SumOver(Communicator* comm, double value) {
  if (comm == nullptr || comm->size() == 1) return value;
  float parts[2];
  parts[0] = static_cast<float>(value);
  parts[1] = static_cast<float>(value - static_cast<double>(parts[0]));
  RETURN_IF_ERROR(comm->AllReduce(Tensor{parts, 2, DType::kF32}));
  return static_cast<double>(parts[0]) + static_cast<double>(parts[1]);
}

}  // namespace

absl::StatusOr<std::unique_ptr<DataParallel>> DataParallel::Create(
    Device* device, Communicator* dp, const ParameterLayout& layout, Tensor params, Tensor grads,
    DataParallelOptions options, AdamWConfig adamw) {
  const int stage = options.zero_stage;
  if (stage < 0 || stage > 3) {
    return FieldError("trainer.zero_stage",
                      absl::StrCat("must be 0, 1, 2 or 3 on this trainer, got ", stage));
  }
  const int64_t padded = PaddedSize(layout.size(), dp->size());
  if ((stage < 3 && params.size != padded) || (stage < 2 && grads.size != padded)) {
    return absl::InvalidArgumentError(absl::StrCat("parameter buffers hold ", params.size,
                                                   " elements, want ", padded));
  }
  if (options.tied_embedding != nullptr &&
      (layout.wte() < 0 || options.tied_embedding->size() != 2)) {
    return absl::InvalidArgumentError(
        "a tied-embedding group needs a two-rank group and a shard holding wte");
  }
  std::unique_ptr<DataParallel> p(new DataParallel(device, dp, params, grads, options));
  if (options.tied_embedding != nullptr) {
    p->tied_ = {layout.wte(), int64_t{layout.config().padded_vocab} * layout.config().d_model};
  }
  const ModelShard& shard = layout.shard();
  for (const ParamTensor& t : layout.tensors()) {
    const bool replicated_copy = t.split == TensorSplit::kReplicated && shard.tp_rank != 0;
    const bool tied_copy = t.name == "wte" && !shard.has_embedding;
    p->counted_.push_back(!replicated_copy && !tied_copy);
  }
  if (dp->size() > 1) p->queue_ = std::make_unique<CommQueue>();
  const int64_t bucket_elements =
      options.bucket_bytes / static_cast<int64_t>(DTypeSize(device->compute_dtype()));
  p->bucket_elements_ = bucket_elements;
  p->buckets_ = PlanBuckets(layout.size(), dp->size(), bucket_elements);
  if (stage >= 2) {
    ASSIGN_OR_RETURN(p->zero2_, Zero2Gradients::Create(device, dp, p->queue_.get(), layout));
    Tensor weights = params;
    if (stage == 3) {
      ASSIGN_OR_RETURN(p->zero3_, Zero3Parameters::Create(device, dp, p->queue_.get(), layout));
      weights = p->zero3_->shard();
    }
    ASSIGN_OR_RETURN(p->optimizer_,
                     AdamWOptimizer::Create(device, layout, p->zero2_->owned(), weights,
                                            p->zero2_->shard(), adamw, /*compact_gradients=*/true,
                                            /*compact_parameters=*/stage == 3));
    return p;
  }
  std::vector<FlatRange> owned = {{0, padded}};
  if (stage > 0) owned = OwnedRanges(p->buckets_, dp->rank(), dp->size());
  ASSIGN_OR_RETURN(p->optimizer_,
                   AdamWOptimizer::Create(device, layout, std::move(owned), params, grads, adamw));
  return p;
}

void DataParallel::BeginStep() {
  tied_reduced_ = false;
  if (zero2_ != nullptr) zero2_->BeginStep();
}

void DataParallel::BeginMicrobatch(bool last) {
  last_microbatch_ = last;
  next_bucket_ = 0;
  if (zero2_ != nullptr) zero2_->BeginMicrobatch(last);
}

Tensor DataParallel::TiedGradients() {
  return zero2_ != nullptr ? zero2_->Gradients(tied_.offset, tied_.size)
                           : grads_.Slice(tied_.offset, tied_.size);
}

Tensor DataParallel::TiedParameters() {
  return zero3_ != nullptr ? zero3_->Outer(tied_.offset, tied_.size)
                           : params_.Slice(tied_.offset, tied_.size);
}

void DataParallel::Issue(const Bucket& bucket) {
  if (queue_ == nullptr) return;
  Tensor whole = grads_.Slice(bucket.begin, bucket.size());
  // The kernels that wrote the bucket are issued by now; on a GPU the reduction waits for them
  // only, not for the rest of the backward pass queued after them.
  if (options_.zero_stage == 0) {
    queue_->EnqueueCollective(device_, dp_, [this, whole] { return dp_->AllReduce(whole); });
    return;
  }
  const FlatRange own = OwnedChunk(bucket, dp_->rank(), dp_->size());
  Tensor chunk = grads_.Slice(own.offset, own.size);
  // In place: the owned chunk of the bucket receives the sum.
  queue_->EnqueueCollective(device_, dp_,
                            [this, whole, chunk] { return dp_->ReduceScatter(whole, chunk); });
}

void DataParallel::OnGradientsFinal(int64_t low) {
  if (options_.tied_embedding != nullptr && !tied_reduced_) {
    // The ranges holding wte wait for FinishReduction, which first sums wte's gradient over the
    // two pipeline ends. Summing here, inside the last backward pass, would deadlock: the last
    // stage would wait for the first before sending it the gradient that first stage needs.
    low = std::max(low, tied_.offset + tied_.size);
  }
  if (zero2_ != nullptr) {
    zero2_->OnGradientsFinal(low);
    return;
  }
  if (!last_microbatch_) return;
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
  absl::Status s;
  if (options_.tied_embedding != nullptr && !tied_reduced_) {
    tied_reduced_ = true;
    s = device_->Synchronize();
    if (s.ok()) s = options_.tied_embedding->AllReduce(TiedGradients());
  }
  if (s.ok()) {
    // Issue what waited for it (or, without a tied embedding, anything left).
    // (The sink continues where the last microbatch's backward pass left it.)
    last_microbatch_ = true;
    OnGradientsFinal(0);
    if (zero2_ != nullptr) s = zero2_->Finish();
  }
  last_microbatch_ = false;
  if (queue_ != nullptr) {
    absl::Status drained = queue_->Drain();
    if (s.ok()) s = drained;  // otherwise the queue's error, if any, is already in `s`
  }
  return s;
}

DataParallel::~DataParallel() { queue_.reset(); }

void DataParallel::Abandon() {
  if (queue_ != nullptr) queue_->Abandon();
}

absl::StatusOr<double> DataParallel::GradientNorm() {
  ASSIGN_OR_RETURN(double sum, optimizer_->OwnedGradientSquares(&counted_));
  // Plain DP: every rank holds the whole summed gradient; ZeRO: each its owned part.
  if (options_.zero_stage > 0) {
    ASSIGN_OR_RETURN(sum, SumOver(dp_, sum));
  }
  for (Communicator* group : options_.model_groups) {
    ASSIGN_OR_RETURN(sum, SumOver(group, sum));
  }
  return std::sqrt(sum);
}

absl::Status DataParallel::Step(float lr, int64_t t, float grad_scale) {
  optimizer_->Step(lr, t, grad_scale);
  if (options_.zero_stage == 0) {
    RETURN_IF_ERROR(device_->Synchronize());
    return SyncTiedParameters();
  }
  return GatherParameters();
}

absl::Status DataParallel::GatherParameters() {
  RETURN_IF_ERROR(device_->Synchronize());
  if (zero3_ != nullptr) {
    RETURN_IF_ERROR(zero3_->GatherOuter());
  } else if (zero2_ != nullptr) {
    RETURN_IF_ERROR(zero2_->GatherParameters(params_));
  } else if (options_.zero_stage == 1 && dp_->size() > 1) {
    for (const Bucket& b : buckets_) {
      const FlatRange own = OwnedChunk(b, dp_->rank(), dp_->size());
      RETURN_IF_ERROR(
          dp_->AllGather(params_.Slice(own.offset, own.size), params_.Slice(b.begin, b.size())));
    }
  }
  return SyncTiedParameters();
}

absl::Status DataParallel::SyncTiedParameters() {
  if (options_.tied_embedding == nullptr) return absl::OkStatus();
  RETURN_IF_ERROR(device_->Synchronize());
  RETURN_IF_ERROR(options_.tied_embedding->Broadcast(TiedParameters(), 0));
  // ZeRO-3's shard holds this stage's owned part of wte: keep it equal to the copy in use.
  if (zero3_ != nullptr) zero3_->ShardFromOuter();
  return device_->Synchronize();
}

int64_t DataParallel::state_bytes() const {
  int64_t weights = 0;
  if (zero3_ != nullptr) {
    weights = zero3_->bytes() + zero2_->bytes();
  } else {
    weights = static_cast<int64_t>(params_.bytes()) +
              (zero2_ != nullptr ? zero2_->bytes() : static_cast<int64_t>(grads_.bytes()));
  }
  const bool separate_master = device_->compute_dtype() != DType::kF32;
  return weights + optimizer_->state_size() * 4 * (separate_master ? 3 : 2);
}

}  // namespace ringmaster::trainer
