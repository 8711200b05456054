// The built-in corpus: text from a small fixed grammar, so that a job needs no download and a
// model has real structure to learn (agreement of articles, word order, arithmetic), while the
// bytes are identical everywhere.
#include <cctype>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "trainer/data/token_source.h"
#include "trainer/model/random.h"

namespace ringmaster::trainer {
namespace {

constexpr uint64_t kCorpusSeed = 0x52696e67;  // "Ring"

const std::vector<std::string>& Nouns() {
  static const auto* v = new std::vector<std::string>{
      "cat",    "dog",    "bird",   "horse",  "farmer", "teacher", "child",  "river",
      "garden", "ship",   "city",   "forest", "engine", "doctor",  "baker",  "window",
      "letter", "market", "song",   "storm",  "bridge", "lamp",    "king",   "queen",
      "robot",  "server", "cluster", "model", "student", "painter", "sailor", "mountain"};
  return *v;
}
const std::vector<std::string>& Adjectives() {
  static const auto* v = new std::vector<std::string>{
      "old",  "young", "quiet", "bright", "small", "large", "green", "tired",
      "busy", "happy", "cold",  "warm",   "slow",  "fast",  "proud", "gentle"};
  return *v;
}
const std::vector<std::string>& Verbs() {
  static const auto* v = new std::vector<std::string>{
      "sees",  "likes", "follows", "helps", "watches", "finds", "builds", "carries",
      "paints", "calls", "visits",  "feeds", "trains",  "moves", "hears",  "thanks"};
  return *v;
}
const std::vector<std::string>& Adverbs() {
  static const auto* v = new std::vector<std::string>{
      "today", "again", "slowly", "quickly", "at night", "in the morning", "every day", "twice"};
  return *v;
}

const std::string& Pick(const std::vector<std::string>& words, Rng* rng) {
  return words[rng->Below(words.size())];
}

// "the old cat", "a bird", "an engine".
std::string NounPhrase(Rng* rng) {
  std::string noun = Pick(Nouns(), rng);
  if (rng->Below(2) == 0) noun = Pick(Adjectives(), rng) + " " + noun;
  if (rng->Below(2) == 0) return "the " + noun;
  const bool vowel = std::string("aeiou").find(noun[0]) != std::string::npos;
  return (vowel ? "an " : "a ") + noun;
}

std::string Sentence(Rng* rng) {
  std::string s;
  switch (rng->Below(4)) {
    case 0:
    case 1:
      s = NounPhrase(rng) + " " + Pick(Verbs(), rng) + " " + NounPhrase(rng);
      if (rng->Below(3) == 0) s += " " + Pick(Adverbs(), rng);
      break;
    case 2:
      s = NounPhrase(rng) + " is " + Pick(Adjectives(), rng);
      break;
    default: {
      const uint64_t a = rng->Below(50), b = rng->Below(50);
      if (rng->Below(2) == 0) {
        s = absl::StrCat(a, " plus ", b, " is ", a + b);
      } else {
        s = absl::StrCat(a + b, " minus ", b, " is ", a);
      }
    }
  }
  s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
  return s + ".";
}

class TextSource final : public TokenSource {
 public:
  explicit TextSource(std::string text) : text_(std::move(text)) {}
  int64_t size() const override { return static_cast<int64_t>(text_.size()); }
  int32_t vocab_needed() const override { return 128; }
  void Copy(int64_t offset, int64_t count, int32_t* out) const override {
    for (int64_t i = 0; i < count; ++i) out[i] = static_cast<unsigned char>(text_[offset + i]);
  }
  std::string description() const override {
    return absl::StrCat("the built-in corpus (", text_.size(), " byte tokens)");
  }

 private:
  const std::string text_;
};

}  // namespace

std::string BuiltinCorpusText(int64_t bytes) {
  Rng rng(kCorpusSeed);
  std::string text;
  text.reserve(static_cast<size_t>(bytes) + 128);
  while (static_cast<int64_t>(text.size()) < bytes) {
    const uint64_t sentences = 2 + rng.Below(5);
    for (uint64_t i = 0; i < sentences; ++i) text += (i == 0 ? "" : " ") + Sentence(&rng);
    text += "\n";
  }
  text.resize(static_cast<size_t>(bytes));
  return text;
}

std::unique_ptr<TokenSource> BuiltinCorpus(int64_t bytes) {
  return std::make_unique<TextSource>(BuiltinCorpusText(bytes));
}

}  // namespace ringmaster::trainer
