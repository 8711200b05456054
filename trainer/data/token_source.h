// Where training tokens come from: a token file (llm.c's .bin layout) or the built-in corpus.
#ifndef RINGMASTER_TRAINER_DATA_TOKEN_SOURCE_H_
#define RINGMASTER_TRAINER_DATA_TOKEN_SOURCE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ringmaster::trainer {

// Immutable after creation; thread-safe.
class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual int64_t size() const = 0;
  // Largest token id + 1 (the vocabulary the data needs).
  virtual int32_t vocab_needed() const = 0;
  // out[i] = token at offset + i, for i < count (the range must be inside the source).
  virtual void Copy(int64_t offset, int64_t count, int32_t* out) const = 0;
  // Where the tokens came from, for logs.
  virtual std::string description() const = 0;
};

// A token file in llm.c's layout: a header of 256 little-endian int32 (magic 20240520, version 1,
// token count, the rest zero) followed by that many uint16 tokens. The file is memory-mapped.
// Errors name trainer.data.path and say what is wrong (missing, short, bad magic, size mismatch).
absl::StatusOr<std::unique_ptr<TokenSource>> OpenTokenFile(const std::string& path);

// Writes `tokens` as a token file (for tools and tests).
absl::Status WriteTokenFile(const std::string& path, const std::vector<uint16_t>& tokens);

// The built-in corpus: about `bytes` of generated English-like text (sentences from a small
// grammar, and arithmetic facts), byte-level tokens (ASCII, so the vocabulary must be >= 128).
// The text is the same on every machine: it depends on nothing but `bytes`.
std::unique_ptr<TokenSource> BuiltinCorpus(int64_t bytes = 1 << 20);

// The built-in corpus's text itself.
std::string BuiltinCorpusText(int64_t bytes);

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_DATA_TOKEN_SOURCE_H_
