// The model and data stream the parallel-layout tests train, on CPUs
// (parallel_trainer_test.cc) and on GPUs (trainer/cuda/cuda_parallel_trainer_test.cc): a small
// GPT every layout can split (4 layers and 4 heads for PP=4 and TP=2/4), and a learnable stream
// of sequences, so that the loss falls within a few steps.
#ifndef RINGMASTER_TRAINER_PARALLEL_LAYOUT_TEST_DATA_H_
#define RINGMASTER_TRAINER_PARALLEL_LAYOUT_TEST_DATA_H_

#include <cstdint>

#include "trainer/model/gpt_config.h"

namespace ringmaster::trainer::testing {

constexpr int kLayoutTestVocab = 64;
constexpr int kLayoutTestSeq = 16;

// L=4, C=32, NH=4, T=kLayoutTestSeq, V=kLayoutTestVocab.
GptConfig LayoutTestModel();

// Sample `g` of the job's one global stream: kLayoutTestSeq inputs and targets, each token a
// function of the previous one with occasional noise. The same for every `g` on every call.
void LayoutTestSample(int64_t g, int32_t* in, int32_t* tgt);

}  // namespace ringmaster::trainer::testing

#endif  // RINGMASTER_TRAINER_PARALLEL_LAYOUT_TEST_DATA_H_
