// Where each parameter tensor of a model shard lives in one flat buffer (parameters, gradients,
// optimizer moments and checkpoints all share this layout).
//
// Order: [wte][wpe] [layer first .. layer last] [lnf.w][lnf.b], each layer's tensors contiguous
// (ln1.w ln1.b qkv.w qkv.b attproj.w attproj.b ln2.w ln2.b fc.w fc.b fcproj.w fcproj.b). The
// backward pass finishes gradients from the end of the buffer towards the start (final
// LayerNorm, last layer, ..., first layer, then the embeddings), so "every gradient at offset
// >= x is final" is one number that only decreases during a backward pass; gradient buckets are
// contiguous ranges issued as that number passes them.
#ifndef RINGMASTER_TRAINER_MODEL_PARAMETER_LAYOUT_H_
#define RINGMASTER_TRAINER_MODEL_PARAMETER_LAYOUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "trainer/model/gpt_config.h"

namespace ringmaster::trainer {

// How a shard's tensor is cut from the full tensor under tensor parallelism.
enum class TensorSplit {
  kReplicated,  // every TP rank holds the whole tensor
  kRows,        // rows (output units) split; with row_blocks > 1 each block is split (qkv)
  kCols,        // columns (input units) split
};

struct ParamTensor {
  std::string name;     // e.g. "h3.qkv.w" (global layer index), "wte", "lnf.b"
  int64_t offset = 0;   // in the flat buffer, elements
  int64_t size = 0;     // elements this shard holds
  int full_rows = 0;    // shape of the full (unsplit) tensor; vectors have full_cols == 1
  int full_cols = 1;
  TensorSplit split = TensorSplit::kReplicated;
  int row_blocks = 1;   // kRows: independent row blocks, each split across TP ranks (qkv: 3)
  bool decay = false;   // weight decay applies (matrices and embeddings; not biases or norms)
  float init_std = 0;   // > 0: normal(0, init_std); otherwise constant init_value
  float init_value = 0;
  int layer = -1;       // global layer index; -1 embeddings, config.layers for the final norm
};

// Offsets of one layer's tensors in the flat buffer.
struct LayerOffsets {
  int64_t ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
  int64_t begin, end;  // the layer's range
};

class ParameterLayout {
 public:
  ParameterLayout(const GptConfig& config, const ModelShard& shard);

  const GptConfig& config() const { return config_; }
  const ModelShard& shard() const { return shard_; }
  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  // Total elements.
  int64_t size() const { return size_; }
  // -1 when this shard does not hold the tensor.
  int64_t wte() const { return wte_; }
  int64_t wpe() const { return wpe_; }
  int64_t lnfw() const { return lnfw_; }
  int64_t lnfb() const { return lnfb_; }
  // Layers of this shard, by local index (0 = shard.first_layer).
  const std::vector<LayerOffsets>& layers() const { return layers_; }
  // Width of this rank's attention (C / tp) and MLP hidden layer (4C / tp), and its heads.
  int local_width() const { return config_.d_model / shard_.tp_size; }
  int local_hidden() const { return 4 * config_.d_model / shard_.tp_size; }
  int local_heads() const { return config_.heads / shard_.tp_size; }
  // This shard's part of tensor `t` (one of tensors()) given the full tensor's values
  // (full_rows x full_cols, row-major): the rows or columns its tensor-parallel rank holds.
  std::vector<float> CutToShard(const ParamTensor& t, const std::vector<float>& full) const;

 private:
  int64_t Add(ParamTensor t);

  GptConfig config_;
  ModelShard shard_;
  std::vector<ParamTensor> tensors_;
  std::vector<LayerOffsets> layers_;
  int64_t size_ = 0;
  int64_t wte_ = -1, wpe_ = -1, lnfw_ = -1, lnfb_ = -1;
};

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_MODEL_PARAMETER_LAYOUT_H_
