#include "trainer/parallel/layout_test_data.h"

#include "trainer/model/random.h"

namespace ringmaster::trainer::testing {

GptConfig LayoutTestModel() {
  return *GptConfig::Create(4, 32, 4, kLayoutTestSeq, kLayoutTestVocab);
}

void LayoutTestSample(int64_t g, int32_t* in, int32_t* tgt) {
  Rng rng(DeriveSeed(99, static_cast<uint64_t>(g)));
  int32_t tok = static_cast<int32_t>(rng.Below(kLayoutTestVocab));
  for (int t = 0; t <= kLayoutTestSeq; ++t) {
    if (t < kLayoutTestSeq) in[t] = tok;
    if (t > 0) tgt[t - 1] = tok;
    tok = rng.Below(8) == 0 ? static_cast<int32_t>(rng.Below(kLayoutTestVocab))
                            : (tok * 5 + 3) % kLayoutTestVocab;
  }
}

}  // namespace ringmaster::trainer::testing
