#include "trainer/parallel/buckets.h"

#include <algorithm>

namespace ringmaster::trainer {

int64_t PaddedSize(int64_t size, int dp_size) {
  const int64_t unit = int64_t{dp_size} * kBucketAlignment;
  return (size + unit - 1) / unit * unit;
}

std::vector<Bucket> PlanBuckets(int64_t size, int dp_size, int64_t bucket_elements) {
  const int64_t unit = int64_t{dp_size} * kBucketAlignment;
  const int64_t padded = PaddedSize(size, dp_size);
  const int64_t step =
      bucket_elements <= 0 ? padded : std::max(unit, (bucket_elements + unit - 1) / unit * unit);
  std::vector<Bucket> buckets;
  for (int64_t end = padded; end > 0;) {
    const int64_t begin = std::max<int64_t>(0, end - step);
    buckets.push_back({begin, end});
    end = begin;
  }
  return buckets;
}

FlatRange OwnedChunk(const Bucket& bucket, int dp_rank, int dp_size) {
  const int64_t chunk = bucket.size() / dp_size;
  return {bucket.begin + dp_rank * chunk, chunk};
}

std::vector<FlatRange> OwnedRanges(const std::vector<Bucket>& buckets, int dp_rank, int dp_size) {
  std::vector<FlatRange> ranges;
  for (const Bucket& b : buckets) ranges.push_back(OwnedChunk(b, dp_rank, dp_size));
  std::sort(ranges.begin(), ranges.end(),
            [](const FlatRange& a, const FlatRange& b) { return a.offset < b.offset; });
  return ranges;
}

}  // namespace ringmaster::trainer
