// The CPU reference kernels against direct textbook computations (the CUDA kernels are in turn
// tested against these references; gradients are checked end to end in model/gpt_test.cc).
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "trainer/kernels/adamw.h"
#include "trainer/kernels/attention.h"
#include "trainer/kernels/cross_entropy.h"
#include "trainer/kernels/embedding.h"
#include "trainer/kernels/layernorm.h"
#include "trainer/kernels/matmul.h"
#include "trainer/kernels/vector_math.h"

namespace ringmaster::kernels {
namespace {

std::vector<float> Random(size_t n, int seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0, 1);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

TEST(AttentionCpuTest, MatchesNaiveCausalAttention) {
  const int B = 2, T = 7, C = 12, NH = 3, hs = C / NH;
  std::vector<float> qkv = Random(B * T * 3 * C, 1);
  std::vector<float> out(B * T * C), att(B * NH * T * T);
  AttentionForwardCpu(out.data(), att.data(), qkv.data(), B, T, C, NH);
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      for (int t = 0; t < T; ++t) {
        const float* q = &qkv[(b * T + t) * 3 * C + h * hs];
        std::vector<double> w(t + 1);
        double max = -1e30, sum = 0;
        for (int s = 0; s <= t; ++s) {
          const float* k = &qkv[(b * T + s) * 3 * C + C + h * hs];
          double dot = 0;
          for (int i = 0; i < hs; ++i) dot += double{q[i]} * k[i];
          w[s] = dot / std::sqrt(double{hs});
          max = std::max(max, w[s]);
        }
        for (double& x : w) sum += (x = std::exp(x - max));
        for (int i = 0; i < hs; ++i) {
          double y = 0;
          for (int s = 0; s <= t; ++s) y += w[s] / sum * qkv[(b * T + s) * 3 * C + 2 * C + h * hs + i];
          ASSERT_NEAR(out[(b * T + t) * C + h * hs + i], y, 1e-5) << b << h << t << i;
        }
        for (int s = t + 1; s < T; ++s) EXPECT_EQ(att[((b * NH + h) * T + t) * T + s], 0.0f);
      }
    }
  }
}

TEST(CrossEntropyCpuTest, LossAndGradientIgnoreVocabularyPadding) {
  const int N = 3, V = 5, Vp = 8;
  std::vector<float> logits = Random(N * Vp, 2);
  for (int i = 0; i < N; ++i) logits[i * Vp + 6] = 100.0f;  // padding must not matter
  std::vector<float> copy = logits, losses(N);
  const std::vector<int32_t> targets = {0, 4, 2};
  CrossEntropyCpu(logits.data(), losses.data(), targets.data(), N, V, Vp, 0.5f);
  for (int i = 0; i < N; ++i) {
    double sum = 0;
    for (int j = 0; j < V; ++j) sum += std::exp(double{copy[i * Vp + j]});
    EXPECT_NEAR(losses[i], std::log(sum) - copy[i * Vp + targets[i]], 1e-5);
    for (int j = 0; j < V; ++j) {
      const double p = std::exp(double{copy[i * Vp + j]}) / sum;
      EXPECT_NEAR(logits[i * Vp + j], 0.5 * (p - (j == targets[i])), 1e-6);
    }
    for (int j = V; j < Vp; ++j) EXPECT_EQ(logits[i * Vp + j], 0.0f);
  }
  // Forward only leaves the logits alone.
  std::vector<float> again = copy;
  CrossEntropyCpu(again.data(), losses.data(), targets.data(), N, V, Vp, 0.0f);
  EXPECT_EQ(again, copy);
}

TEST(LayerNormCpuTest, NormalisesRowsAndFusesTheResidualAdd) {
  const int N = 4, C = 16;
  std::vector<float> a = Random(N * C, 3), b = Random(N * C, 4), w(C, 1.0f), bias(C, 0.0f);
  std::vector<float> out(N * C), mean(N), rstd(N), residual(N * C);
  LayerNormForwardCpu(out.data(), mean.data(), rstd.data(), a.data(), b.data(), residual.data(),
                      w.data(), bias.data(), N, C);
  for (int i = 0; i < N; ++i) {
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) {
      EXPECT_EQ(residual[i * C + c], a[i * C + c] + b[i * C + c]);
      m += out[i * C + c];
      v += double{out[i * C + c]} * out[i * C + c];
    }
    EXPECT_NEAR(m / C, 0.0, 1e-5);
    EXPECT_NEAR(v / C, 1.0, 1e-3);
  }
}

TEST(MatmulCpuTest, ForwardBiasGeluAndBackwardAccumulates) {
  const int N = 3, IC = 5, OC = 4;
  std::vector<float> inp = Random(N * IC, 5), w = Random(OC * IC, 6), bias = Random(OC, 7);
  std::vector<float> out(N * OC), gelu(N * OC);
  MatmulForwardCpu(out.data(), gelu.data(), inp.data(), w.data(), bias.data(), N, IC, OC);
  for (int i = 0; i < N; ++i) {
    for (int o = 0; o < OC; ++o) {
      double y = bias[o];
      for (int k = 0; k < IC; ++k) y += double{inp[i * IC + k]} * w[o * IC + k];
      EXPECT_NEAR(out[i * OC + o], y, 1e-5);
      EXPECT_NEAR(gelu[i * OC + o],
                  0.5 * y * (1 + std::tanh(std::sqrt(2 / M_PI) * (y + 0.044715 * y * y * y))),
                  1e-5);
    }
  }
  std::vector<float> dout = Random(N * OC, 8), dinp(N * IC, 9.0f), dw(OC * IC, 1.0f), db(OC, 2.0f);
  MatmulBackwardCpu(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, IC,
                    OC);
  for (int o = 0; o < OC; ++o) {
    double sum = 2.0;
    for (int i = 0; i < N; ++i) sum += dout[i * OC + o];
    EXPECT_NEAR(db[o], sum, 1e-5);
    for (int k = 0; k < IC; ++k) {
      double g = 1.0;
      for (int i = 0; i < N; ++i) g += double{dout[i * OC + o]} * inp[i * IC + k];
      EXPECT_NEAR(dw[o * IC + k], g, 1e-5);
    }
  }
  for (int i = 0; i < N; ++i) {
    for (int k = 0; k < IC; ++k) {
      double g = 0;  // overwritten, not accumulated
      for (int o = 0; o < OC; ++o) g += double{dout[i * OC + o]} * w[o * IC + k];
      EXPECT_NEAR(dinp[i * IC + k], g, 1e-5);
    }
  }
}

TEST(EmbeddingCpuTest, BackwardScattersIntoRepeatedTokens) {
  const int B = 1, T = 3, C = 2;
  const std::vector<int32_t> tokens = {1, 1, 0};
  std::vector<float> dout = {1, 2, 3, 4, 5, 6}, dwte(4, 0.0f), dwpe(6, 0.0f);
  EmbeddingBackwardCpu(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
  EXPECT_EQ(dwte, (std::vector<float>{5, 6, 4, 6}));
  EXPECT_EQ(dwpe, dout);
}

TEST(AdamWCpuTest, FirstStepMovesByLearningRateTimesSign) {
  // At t = 1 the bias-corrected update is g / (|g| + eps) ~ sign(g), plus decay.
  std::vector<float> p = {1.0f, -2.0f}, g = {0.5f, -3.0f}, m(2, 0.0f), v(2, 0.0f);
  AdamWCpu(p.data(), g.data(), m.data(), v.data(), 2, 0.1f, 0.9f, 0.95f, 1e-8f, 0.0f, 1, 1.0f);
  EXPECT_NEAR(p[0], 0.9f, 1e-6);
  EXPECT_NEAR(p[1], -1.9f, 1e-6);
  std::vector<float> q = {1.0f}, gq = {0.0f}, mq = {0.0f}, vq = {0.0f};
  AdamWCpu(q.data(), gq.data(), mq.data(), vq.data(), 1, 0.1f, 0.9f, 0.95f, 1e-8f, 0.5f, 1, 1.0f);
  EXPECT_NEAR(q[0], 1.0f - 0.1f * 0.5f, 1e-7);
}

TEST(VectorMathTest, ExpAndTanhMatchLibmClosely) {
  double worst_exp = 0, worst_tanh = 0;
  for (float x = -87.0f; x <= 88.0f; x += 0.0137f) {
    const double want = std::exp(double{x});
    worst_exp = std::max(worst_exp, std::abs(ExpFast(x) - want) / want);
  }
  for (float x = -12.0f; x <= 12.0f; x += 0.000731f) {
    worst_tanh = std::max(worst_tanh, std::abs(TanhFast(x) - std::tanh(double{x})));
    // Odd, so that 1 - tanh^2 (GELU's backward) is as accurate for negative inputs as for
    // positive ones.
    ASSERT_EQ(TanhFast(-x), -TanhFast(x)) << x;
  }
  EXPECT_LT(worst_exp, 3e-7);
  EXPECT_LT(worst_tanh, 2e-7);
  EXPECT_EQ(TanhFast(50.0f), 1.0f);
  EXPECT_EQ(TanhFast(-50.0f), -1.0f);
  EXPECT_GT(ExpFast(-200.0f), 0.0f);  // clamped, never 0 or denormal garbage
}

}  // namespace
}  // namespace ringmaster::kernels
