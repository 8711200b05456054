// How gradients are grouped for data-parallel reduction: contiguous buckets of the flat buffer,
// planned from its end (where the backward pass finishes first) towards its start, each about
// `bucket_elements` long and a multiple of dp_size * kBucketAlignment elements, so that every
// data-parallel rank owns an equal, aligned chunk of every bucket under ZeRO.
#ifndef RINGMASTER_TRAINER_PARALLEL_BUCKETS_H_
#define RINGMASTER_TRAINER_PARALLEL_BUCKETS_H_

#include <cstdint>
#include <vector>

#include "trainer/optim/adamw_optimizer.h"

namespace ringmaster::trainer {

// Chunks are multiples of 16 elements (64 bytes of fp32).
constexpr int64_t kBucketAlignment = 16;

struct Bucket {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};

// `size` rounded up to a multiple of dp_size * kBucketAlignment: the length the parameter and
// gradient buffers need.
int64_t PaddedSize(int64_t size, int dp_size);

// Buckets covering [0, PaddedSize(size, dp_size)), in the order the backward pass finishes
// them (the last range first). bucket_elements <= 0 means one bucket.
std::vector<Bucket> PlanBuckets(int64_t size, int dp_size, int64_t bucket_elements);

// The chunk of `bucket` that data-parallel rank `dp_rank` owns under ZeRO.
FlatRange OwnedChunk(const Bucket& bucket, int dp_rank, int dp_size);

// Every chunk rank `dp_rank` owns, ascending.
std::vector<FlatRange> OwnedRanges(const std::vector<Bucket>& buckets, int dp_rank, int dp_size);

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_PARALLEL_BUCKETS_H_
