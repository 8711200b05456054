#include "trainer/model/gpt_config.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace ringmaster::trainer {
namespace {

absl::Status InRange(const char* field, int64_t value, int64_t lo, int64_t hi) {
  if (value < lo || value > hi) {
    return FieldError(field, absl::StrCat("must be in [", lo, ", ", hi, "], got ", value));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GptConfig> GptConfig::Create(int layers, int d_model, int heads, int seq_len,
                                            int vocab) {
  RETURN_IF_ERROR(InRange("model.layers", layers, 1, 1024));
  RETURN_IF_ERROR(InRange("model.d_model", d_model, 1, 65536));
  RETURN_IF_ERROR(InRange("model.heads", heads, 1, 1024));
  RETURN_IF_ERROR(InRange("model.seq_len", seq_len, 1, 1048576));
  RETURN_IF_ERROR(InRange("model.vocab", vocab, 2, 10000000));
  if (d_model % heads != 0) {
    return FieldError("model.d_model",
                      absl::StrCat("must be divisible by model.heads (", heads, "), got ", d_model));
  }
  GptConfig c;
  c.layers = layers;
  c.d_model = d_model;
  c.heads = heads;
  c.seq_len = seq_len;
  c.vocab = vocab;
  c.padded_vocab = (vocab + 127) / 128 * 128;
  return c;
}

int64_t GptConfig::ParameterCount() const {
  const int64_t C = d_model;
  const int64_t per_layer = 2 * C + (3 * C * C + 3 * C) + (C * C + C) + 2 * C +
                            (4 * C * C + 4 * C) + (4 * C * C + C);
  return int64_t{padded_vocab} * C + int64_t{seq_len} * C + layers * per_layer + 2 * C;
}

double GptConfig::FlopsPerToken() const {
  return 6.0 * static_cast<double>(ParameterCount()) +
         6.0 * layers * static_cast<double>(d_model) * seq_len;
}

std::string GptConfig::ToString() const {
  return absl::StrCat("L=", layers, " C=", d_model, " NH=", heads, " T=", seq_len, " V=", vocab,
                      " (padded ", padded_vocab, "), ", ParameterCount(), " parameters");
}

ModelShard ModelShard::WholeModel(const GptConfig& config) {
  ModelShard s;
  s.num_layers = config.layers;
  return s;
}

absl::Status ModelShard::Validate(const GptConfig& config) const {
  if (tp_size < 1 || tp_rank < 0 || tp_rank >= tp_size) {
    return FieldError("parallelism.tensor",
                      absl::StrCat("rank ", tp_rank, " of ", tp_size, " is not a valid position"));
  }
  if (config.heads % tp_size != 0) {
    return FieldError("parallelism.tensor", absl::StrCat("must divide model.heads (", config.heads,
                                                         "), got ", tp_size));
  }
  if (first_layer < 0 || num_layers < 1 || first_layer + num_layers > config.layers) {
    return FieldError("parallelism.pipeline",
                      absl::StrCat("layers [", first_layer, ", ", first_layer + num_layers,
                                   ") are not inside the model's ", config.layers, " layers"));
  }
  return absl::OkStatus();
}

}  // namespace ringmaster::trainer
