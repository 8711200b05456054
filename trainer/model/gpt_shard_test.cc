// Model shards against the whole model: a pipeline split (stages run one after the other in one
// thread, activations and gradients copied across the boundary), several microbatches in flight,
// and a tensor-parallel split (two ranks as threads over loopback Gloo). Each shard's loss and
// gradients must equal the whole model's within float rounding (the split model adds the same
// terms in another order: tensor-parallel partial sums, the tied embedding's two halves).
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "trainer/comm/testing.h"
#include "trainer/model/cpu_device.h"
#include "trainer/model/gpt.h"
#include "trainer/model/pipeline_partition.h"
#include "trainer/model/random.h"

namespace ringmaster::trainer {
namespace {

constexpr int kB = 2, kT = 6;

// Gradients by tensor name, as full tensors' shard values.
using Grads = std::map<std::string, std::vector<float>>;

GptConfig Config() { return *GptConfig::Create(4, 16, 4, kT, 50); }

void Tokens(int micro, std::vector<int32_t>* in, std::vector<int32_t>* tgt) {
  Rng rng(DeriveSeed(17, micro));
  in->resize(kB * kT);
  tgt->resize(kB * kT);
  for (int i = 0; i < kB * kT; ++i) {
    (*in)[i] = static_cast<int32_t>(rng.Below(50));
    (*tgt)[i] = static_cast<int32_t>(rng.Below(50));
  }
}

Grads ByName(const Gpt& gpt) {
  Grads out;
  for (const ParamTensor& t : gpt.layout().tensors()) {
    out[t.name].assign(gpt.grads().f32() + t.offset, gpt.grads().f32() + t.offset + t.size);
  }
  return out;
}

// Loss and gradients of the whole model over microbatches 0..micros-1 (loss scale 1/micros).
std::pair<double, Grads> Whole(int micros) {
  auto device = MakeCpuDevice(1);
  GptConfig c = Config();
  auto gpt = *Gpt::Create(device.get(), ParameterLayout(c, ModelShard::WholeModel(c)), kB, kT);
  EXPECT_TRUE(gpt->InitParameters(3).ok());
  std::vector<int32_t> in, tgt;
  double loss = 0;
  for (int m = 0; m < micros; ++m) {
    Tokens(m, &in, &tgt);
    loss += *gpt->Forward(in.data(), tgt.data(), 1.0f / micros);
    EXPECT_TRUE(gpt->Backward(nullptr).ok());
  }
  return {loss / micros, ByName(*gpt)};
}

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want,
                const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, double{std::abs(got[i] - want[i])});
    scale = std::max(scale, double{std::abs(want[i])});
  }
  // Float rounding of reordered sums: far below 1e-4 of the tensor's largest gradient; a
  // missing or doubled term would be of the order of the gradient itself.
  EXPECT_LE(worst, 1e-4 * scale + 1e-7) << what;
}

// Two pipeline stages with two microbatches in flight (forward 0, forward 1, backward 0,
// backward 1), as the first stage of a 1F1B schedule holds them.
TEST(GptShardTest, PipelineStagesReproduceTheWholeModel) {
  const auto [whole_loss, whole] = Whole(2);
  auto device = MakeCpuDevice(1);
  GptConfig c = Config();
  std::vector<std::unique_ptr<Gpt>> stages;
  for (int s = 0; s < 2; ++s) {
    ModelShard shard = *MakeModelShard(c, 0, 1, s, 2);
    GptOptions o;
    o.batch = kB;
    o.seq_len = kT;
    o.slots = 2;
    stages.push_back(*Gpt::Create(device.get(), ParameterLayout(c, shard), o));
    ASSERT_TRUE(stages.back()->InitParameters(3).ok());
  }
  Gpt& first = *stages[0];
  Gpt& last = *stages[1];
  EXPECT_EQ(first.layout().layers().size(), 2u);
  EXPECT_LT(first.layout().lnfw(), 0);
  EXPECT_LT(last.layout().wpe(), 0);
  EXPECT_EQ(last.layout().wte(), 0);  // the tied head's copy
  auto copy = [&](Tensor dst, Tensor src) {
    std::copy(src.f32(), src.f32() + src.size, dst.f32());
  };
  std::vector<int32_t> in[2], tgt[2];
  double loss = 0;
  for (int m = 0; m < 2; ++m) {
    Tokens(m, &in[m], &tgt[m]);
    ASSERT_TRUE(first.Forward(m, in[m].data(), nullptr, 0.5f).ok());
  }
  for (int m = 0; m < 2; ++m) {
    copy(last.stage_input(0), first.stage_output(m));
    auto l = last.Forward(0, nullptr, tgt[m].data(), 0.5f);
    ASSERT_TRUE(l.ok()) << l.status();
    loss += *l / 2;
    std::vector<int64_t> finals;
    ASSERT_TRUE(last.Backward(0, [&](int64_t low) { finals.push_back(low); }).ok());
    EXPECT_EQ(finals.back(), 0);
    copy(first.output_gradient(), last.input_gradient());
    ASSERT_TRUE(first.Backward(m, nullptr).ok());
  }
  EXPECT_NEAR(loss, whole_loss, 1e-6 * whole_loss);
  Grads a = ByName(first), b = ByName(last);
  for (const auto& [name, want] : whole) {
    if (name == "wte") {
      std::vector<float> sum = a[name];
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += b[name][i];
      ExpectNear(sum, want, "wte (embedding + head)");
      continue;
    }
    ExpectNear(a.count(name) ? a[name] : b[name], want, name);
  }
}

TEST(GptShardTest, TensorParallelRanksReproduceTheirSlicesOfTheWholeModel) {
  const auto [whole_loss, whole] = Whole(2);
  InMemoryStore store;
  std::vector<double> losses(2);
  std::vector<Grads> grads(2);
  std::vector<std::vector<float>> params(2);
  std::vector<absl::Status> results = testing::RunRanks(2, [&](int rank) -> absl::Status {
    auto comm = testing::ConnectLoopback("tp", rank, 2, &store);
    if (!comm.ok()) return comm.status();
    auto device = MakeCpuDevice(1);
    GptConfig c = Config();
    GptOptions o;
    o.batch = kB;
    o.seq_len = kT;
    o.tensor_parallel = comm->get();
    auto gpt = Gpt::Create(device.get(), ParameterLayout(c, *MakeModelShard(c, rank, 2, 0, 1)), o);
    if (!gpt.ok()) return gpt.status();
    if (auto s = (*gpt)->InitParameters(3); !s.ok()) return s;
    std::vector<int32_t> in, tgt;
    for (int m = 0; m < 2; ++m) {
      Tokens(m, &in, &tgt);
      auto l = (*gpt)->Forward(in.data(), tgt.data(), 0.5f);
      if (!l.ok()) return l.status();
      losses[rank] += *l / 2;
      if (auto s = (*gpt)->Backward(nullptr); !s.ok()) return s;
    }
    grads[rank] = ByName(**gpt);
    Tensor p = (*gpt)->params();
    params[rank].assign(p.f32(), p.f32() + p.size);
    return absl::OkStatus();
  });
  for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(losses[0], losses[1]);  // the replicated head computes the same loss
  EXPECT_NEAR(losses[0], whole_loss, 1e-6 * whole_loss);
  GptConfig c = Config();
  for (int rank = 0; rank < 2; ++rank) {
    ParameterLayout layout(c, *MakeModelShard(c, rank, 2, 0, 1));
    for (const ParamTensor& t : layout.tensors()) {
      ExpectNear(grads[rank][t.name], layout.CutToShard(t, whole.at(t.name)),
                 t.name + " on TP rank " + std::to_string(rank));
      if (t.split == TensorSplit::kReplicated) {
        // Replicated tensors get bit-identical gradients on both ranks: nothing else keeps
        // them equal.
        EXPECT_EQ(grads[0][t.name], grads[1][t.name]) << t.name;
      }
    }
  }
}

}  // namespace
}  // namespace ringmaster::trainer
