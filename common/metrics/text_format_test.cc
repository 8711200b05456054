#include "common/metrics/text_format.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace ringmaster::metrics {
namespace {

TEST(TextFormatTest, EscapesLabelValues) {
  EXPECT_EQ(EscapeLabelValue("plain"), "plain");
  EXPECT_EQ(EscapeLabelValue("a\\b"), "a\\\\b");
  EXPECT_EQ(EscapeLabelValue("say \"hi\""), "say \\\"hi\\\"");
  EXPECT_EQ(EscapeLabelValue("two\nlines"), "two\\nlines");
  EXPECT_EQ(EscapeLabelValue("ünïcödé"), "ünïcödé");
}

TEST(TextFormatTest, EscapesHelpButNotQuotes) {
  EXPECT_EQ(EscapeHelp("a \"quoted\" \\ help\nline"), "a \"quoted\" \\\\ help\\nline");
}

TEST(TextFormatTest, FormatsValues) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(42), "42");
  EXPECT_EQ(FormatValue(-1.5), "-1.5");
  EXPECT_EQ(FormatValue(0.1), "0.1");
  EXPECT_EQ(FormatValue(1e21), "1e+21");
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
  // Shortest round trip: parsing the text gives back the same double.
  double v = 0.1 + 0.2;
  EXPECT_EQ(std::stod(FormatValue(v)), v);
}

TEST(TextFormatTest, RendersCounterWithEscapedLabels) {
  Registry registry;
  auto& family =
      registry.AddCounter("test_requests_total", "Requests \\ served\nso far.", {"path", "code"});
  family.WithLabels({"/a\"b", "200"})->Increment(3);
  family.WithLabels({"/", "500"})->Increment();
  EXPECT_EQ(registry.RenderText(),
            "# HELP test_requests_total Requests \\\\ served\\nso far.\n"
            "# TYPE test_requests_total counter\n"
            "test_requests_total{path=\"/\",code=\"500\"} 1\n"
            "test_requests_total{path=\"/a\\\"b\",code=\"200\"} 3\n");
}

TEST(TextFormatTest, RendersHistogramBucketsSumAndCount) {
  Registry registry;
  auto& family = registry.AddHistogram("test_step_seconds", "Step time.", {"rank"}, {0.25, 1, 2.5});
  auto h = family.WithLabels({"0"});
  h->Observe(0.1);
  h->Observe(0.25);
  h->Observe(2);
  h->Observe(10);
  EXPECT_EQ(registry.RenderText(),
            "# HELP test_step_seconds Step time.\n"
            "# TYPE test_step_seconds histogram\n"
            "test_step_seconds_bucket{rank=\"0\",le=\"0.25\"} 2\n"
            "test_step_seconds_bucket{rank=\"0\",le=\"1\"} 2\n"
            "test_step_seconds_bucket{rank=\"0\",le=\"2.5\"} 3\n"
            "test_step_seconds_bucket{rank=\"0\",le=\"+Inf\"} 4\n"
            "test_step_seconds_sum{rank=\"0\"} 12.35\n"
            "test_step_seconds_count{rank=\"0\"} 4\n");
}

TEST(TextFormatTest, FamiliesAreSortedAndUnlabelledFamiliesHaveNoBraces) {
  Registry registry;
  registry.AddGauge("zeta", "Z.").WithLabels({})->Set(1);
  registry.AddGauge("alpha", "A.").WithLabels({})->Set(-2);
  registry.AddCounter("mid_total", "Declared, never used: HELP and TYPE only.");
  EXPECT_EQ(registry.RenderText(),
            "# HELP alpha A.\n# TYPE alpha gauge\nalpha -2\n"
            "# HELP mid_total Declared, never used: HELP and TYPE only.\n"
            "# TYPE mid_total counter\n"
            "# HELP zeta Z.\n# TYPE zeta gauge\nzeta 1\n");
}

}  // namespace
}  // namespace ringmaster::metrics
