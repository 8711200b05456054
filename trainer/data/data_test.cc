#include <fstream>
#include <set>

#include "common/testing/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/data/data_loader.h"
#include "trainer/data/token_source.h"

namespace ringmaster::trainer {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  return ringmaster::testing::TestTempDir() + "/" + name;
}

TEST(TokenFileTest, RoundTripsAndReportsItsVocabulary) {
  const std::string path = TempPath("tokens.bin");
  ASSERT_TRUE(WriteTokenFile(path, {5, 1, 50256, 7}).ok());
  auto source = OpenTokenFile(path);
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ((*source)->size(), 4);
  EXPECT_EQ((*source)->vocab_needed(), 50257);
  std::vector<int32_t> out(3);
  (*source)->Copy(1, 3, out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{1, 50256, 7}));
}

TEST(TokenFileTest, BadFilesAreClearErrorsNamingTheField) {
  auto missing = OpenTokenFile(TempPath("nope.bin"));
  EXPECT_THAT(missing.status().message(), HasSubstr("trainer.data.path: cannot open"));
  const std::string short_file = TempPath("short.bin");
  std::ofstream(short_file) << "abc";
  EXPECT_THAT(OpenTokenFile(short_file).status().message(), HasSubstr("less than the 1024-byte"));
  const std::string bad = TempPath("bad.bin");
  ASSERT_TRUE(WriteTokenFile(bad, {1, 2, 3}).ok());
  {
    std::fstream f(bad, std::ios::in | std::ios::out | std::ios::binary);
    int32_t wrong = 7;
    f.write(reinterpret_cast<char*>(&wrong), 4);
  }
  EXPECT_THAT(OpenTokenFile(bad).status().message(), HasSubstr("bad magic 7"));
  const std::string truncated = TempPath("truncated.bin");
  ASSERT_TRUE(WriteTokenFile(truncated, {1, 2, 3, 4}).ok());
  {
    std::ofstream f(truncated, std::ios::app | std::ios::binary);
    f << "x";
  }
  EXPECT_THAT(OpenTokenFile(truncated).status().message(), HasSubstr("header says 4 tokens"));
}

TEST(BuiltinCorpusTest, IsDeterministicAsciiText) {
  const std::string a = BuiltinCorpusText(5000);
  EXPECT_EQ(a, BuiltinCorpusText(5000));
  EXPECT_EQ(a.size(), 5000u);
  for (char c : a) EXPECT_LT(static_cast<unsigned char>(c), 128);
  EXPECT_THAT(a, HasSubstr(" is "));
  auto source = BuiltinCorpus(5000);
  EXPECT_EQ(source->size(), 5000);
  EXPECT_EQ(source->vocab_needed(), 128);
}

// Tokens that encode their own position, so a sample's identity can be read off its inputs.
std::shared_ptr<const TokenSource> Counting(int n) {
  const std::string path = TempPath("count" + std::to_string(n) + ".bin");
  std::vector<uint16_t> tokens(n);
  for (int i = 0; i < n; ++i) tokens[i] = static_cast<uint16_t>(i);
  EXPECT_TRUE(WriteTokenFile(path, tokens).ok());
  return std::move(*OpenTokenFile(path));
}

TEST(DataLoaderTest, TargetsAreInputsShiftedAndEachEpochVisitsEverySampleOnce) {
  auto source = Counting(4 * 25 + 1);  // 25 samples of T = 4
  auto loader = DataLoader::Create(source, {4, 5, 0, 1, 9});
  ASSERT_TRUE(loader.ok()) << loader.status();
  EXPECT_EQ((*loader)->samples_per_epoch(), 25);
  std::vector<std::vector<int>> epochs(2);
  for (int step = 0; step < 10; ++step) {
    std::vector<int32_t> in(20), tg(20);
    (*loader)->Fill(0, in.data(), tg.data());
    for (int b = 0; b < 5; ++b) {
      EXPECT_EQ(in[b * 4] % 4, 0);
      for (int t = 0; t < 4; ++t) EXPECT_EQ(tg[b * 4 + t], in[b * 4 + t] + 1);
      epochs[step / 5].push_back(in[b * 4] / 4);
    }
    (*loader)->Advance(1);
  }
  for (auto& e : epochs) {
    EXPECT_EQ(std::set<int>(e.begin(), e.end()).size(), 25u);
  }
  EXPECT_NE(epochs[0], epochs[1]);  // reshuffled
  EXPECT_EQ((*loader)->epoch(), 2);
}

TEST(DataLoaderTest, RanksSplitTheSameStreamAsOneRankWithMoreMicrobatches) {
  auto source = Counting(8 * 40 + 1);
  auto one = *DataLoader::Create(source, {8, 2, 0, 1, 3});
  auto r0 = *DataLoader::Create(source, {8, 2, 0, 2, 3});
  auto r1 = *DataLoader::Create(source, {8, 2, 1, 2, 3});
  for (int step = 0; step < 7; ++step) {
    std::vector<int32_t> a(16), b(16), c(16), d(16), x(16), y(16);
    one->Fill(0, a.data(), x.data());
    one->Fill(1, b.data(), y.data());
    r0->Fill(0, c.data(), x.data());
    r1->Fill(0, d.data(), y.data());
    EXPECT_EQ(a, c);
    EXPECT_EQ(b, d);
    one->Advance(2);
    r0->Advance(1);
    r1->Advance(1);
  }
}

TEST(DataLoaderTest, ResumingFromAPositionContinuesTheSameOrder) {
  auto source = Counting(4 * 30 + 1);
  auto straight = *DataLoader::Create(source, {4, 3, 0, 1, 11});
  std::vector<int32_t> in(12), tg(12), again(12);
  for (int step = 0; step < 13; ++step) straight->Advance(1);
  straight->Fill(0, in.data(), tg.data());
  auto resumed = *DataLoader::Create(source, {4, 3, 0, 1, 11});
  resumed->set_position(39);
  resumed->Fill(0, again.data(), tg.data());
  EXPECT_EQ(in, again);
}

// elastic_batch per_replica: DP 4 -> 2 -> 4 with one micro-batch of 2 per replica, so the
// global batch goes 8 -> 4 -> 8. Each run resumes from the samples the job consumed; together
// they read the one stream in order, every sample of the epoch once, none skipped or twice.
TEST(DataLoaderTest, AChangingGlobalBatchReadsTheStreamWithoutGapOrRepeat) {
  auto source = Counting(4 * 48 + 1);  // 48 samples of T = 4
  auto single = *DataLoader::Create(source, {4, 1, 0, 1, 5});
  std::vector<int> want;
  for (int i = 0; i < 48; ++i) {
    std::vector<int32_t> in(4), tg(4);
    single->Fill(0, in.data(), tg.data());
    want.push_back(in[0] / 4);
    single->Advance(1);
  }
  std::vector<int> got;
  int64_t position = 0;
  for (const auto& [dp, steps] : std::vector<std::pair<int, int>>{{4, 2}, {2, 5}, {4, 2}}) {
    std::vector<std::unique_ptr<DataLoader>> ranks;
    for (int d = 0; d < dp; ++d) {
      ranks.push_back(*DataLoader::Create(source, {4, 2, d, dp, 5}));
      ranks.back()->set_position(position);  // what the checkpoint stored
    }
    for (int step = 0; step < steps; ++step) {
      for (auto& rank : ranks) {
        std::vector<int32_t> in(8), tg(8);
        rank->Fill(0, in.data(), tg.data());
        got.push_back(in[0] / 4);
        got.push_back(in[4] / 4);
        rank->Advance(1);
      }
    }
    position = ranks[0]->position();
    EXPECT_EQ(position, ranks.back()->position());
  }
  EXPECT_EQ(position, 2 * 8 + 5 * 4 + 2 * 8);  // 52 samples: one epoch and 4 more
  ASSERT_EQ(got.size(), 52u);
  EXPECT_EQ(std::vector<int>(got.begin(), got.begin() + 48), want);
  EXPECT_EQ(std::set<int>(got.begin(), got.begin() + 48).size(), 48u);
}

TEST(DataLoaderTest, TooLittleDataIsAFieldError) {
  auto loader = DataLoader::Create(Counting(4), {4, 1, 0, 1, 1});
  EXPECT_THAT(loader.status().message(), HasSubstr("trainer.data: "));
  EXPECT_THAT(loader.status().message(), HasSubstr("fewer than seq_len + 1 (5) tokens"));
}

}  // namespace
}  // namespace ringmaster::trainer
