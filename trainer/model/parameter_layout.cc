#include "trainer/model/parameter_layout.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace ringmaster::trainer {
namespace {

constexpr float kInitStd = 0.02f;

ParamTensor Vector(std::string name, int n, float value, int layer) {
  ParamTensor t;
  t.name = std::move(name);
  t.full_rows = n;
  t.init_value = value;
  t.layer = layer;
  return t;
}

ParamTensor Matrix(std::string name, int rows, int cols, float std, int layer) {
  ParamTensor t;
  t.name = std::move(name);
  t.full_rows = rows;
  t.full_cols = cols;
  t.decay = true;
  t.init_std = std;
  t.layer = layer;
  return t;
}

}  // namespace

ParameterLayout::ParameterLayout(const GptConfig& config, const ModelShard& shard)
    : config_(config), shard_(shard) {
  const int C = config.d_model;
  // GPT-2: residual projections get std 0.02 / sqrt(2 L).
  const float residual_std = kInitStd / std::sqrt(2.0f * config.layers);
  if (shard.has_embedding || shard.has_head) {
    wte_ = Add(Matrix("wte", config.padded_vocab, C, kInitStd, -1));
  }
  if (shard.has_embedding) wpe_ = Add(Matrix("wpe", config.seq_len, C, kInitStd, -1));
  for (int i = 0; i < shard.num_layers; ++i) {
    const int l = shard.first_layer + i;
    const std::string p = absl::StrCat("h", l, ".");
    LayerOffsets o;
    o.begin = size_;
    o.ln1w = Add(Vector(p + "ln1.w", C, 1, l));
    o.ln1b = Add(Vector(p + "ln1.b", C, 0, l));
    ParamTensor qkvw = Matrix(p + "qkv.w", 3 * C, C, kInitStd, l);
    qkvw.split = TensorSplit::kRows;
    qkvw.row_blocks = 3;
    o.qkvw = Add(qkvw);
    ParamTensor qkvb = Vector(p + "qkv.b", 3 * C, 0, l);
    qkvb.split = TensorSplit::kRows;
    qkvb.row_blocks = 3;
    o.qkvb = Add(qkvb);
    ParamTensor attprojw = Matrix(p + "attproj.w", C, C, residual_std, l);
    attprojw.split = TensorSplit::kCols;
    o.attprojw = Add(attprojw);
    o.attprojb = Add(Vector(p + "attproj.b", C, 0, l));
    o.ln2w = Add(Vector(p + "ln2.w", C, 1, l));
    o.ln2b = Add(Vector(p + "ln2.b", C, 0, l));
    ParamTensor fcw = Matrix(p + "fc.w", 4 * C, C, kInitStd, l);
    fcw.split = TensorSplit::kRows;
    o.fcw = Add(fcw);
    ParamTensor fcb = Vector(p + "fc.b", 4 * C, 0, l);
    fcb.split = TensorSplit::kRows;
    o.fcb = Add(fcb);
    ParamTensor fcprojw = Matrix(p + "fcproj.w", C, 4 * C, residual_std, l);
    fcprojw.split = TensorSplit::kCols;
    o.fcprojw = Add(fcprojw);
    o.fcprojb = Add(Vector(p + "fcproj.b", C, 0, l));
    o.end = size_;
    layers_.push_back(o);
  }
  if (shard.has_head) {
    lnfw_ = Add(Vector("lnf.w", C, 1, config.layers));
    lnfb_ = Add(Vector("lnf.b", C, 0, config.layers));
  }
}

int64_t ParameterLayout::Add(ParamTensor t) {
  const int64_t full = int64_t{t.full_rows} * t.full_cols;
  t.size = t.split == TensorSplit::kReplicated ? full : full / shard_.tp_size;
  t.offset = size_;
  size_ += t.size;
  tensors_.push_back(std::move(t));
  return tensors_.back().offset;
}

std::vector<float> ParameterLayout::CutToShard(const ParamTensor& t,
                                               const std::vector<float>& full) const {
  const int tp = shard_.tp_size;
  if (t.split == TensorSplit::kReplicated || tp == 1) return full;
  std::vector<float> slice;
  slice.reserve(t.size);
  if (t.split == TensorSplit::kRows) {
    const int block_rows = t.full_rows / t.row_blocks;
    const int rows = block_rows / tp;
    for (int b = 0; b < t.row_blocks; ++b) {
      const int64_t first = int64_t{b} * block_rows + int64_t{shard_.tp_rank} * rows;
      slice.insert(slice.end(), full.begin() + first * t.full_cols,
                   full.begin() + (first + rows) * t.full_cols);
    }
  } else {
    const int cols = t.full_cols / tp;
    for (int r = 0; r < t.full_rows; ++r) {
      const auto row = full.begin() + int64_t{r} * t.full_cols + int64_t{shard_.tp_rank} * cols;
      slice.insert(slice.end(), row, row + cols);
    }
  }
  return slice;
}

}  // namespace ringmaster::trainer
