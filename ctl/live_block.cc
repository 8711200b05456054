#include "ctl/live_block.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/job_state.h"
#include "ctl/format.h"

namespace ringmaster::ctl {

bool LiveOutputWanted() {
  if (isatty(STDOUT_FILENO) == 0) return false;
  const char* term = std::getenv("TERM");
  return term != nullptr && *term != '\0' && std::string(term) != "dumb";
}

int TerminalWidth() {
  winsize size{};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  int columns = 0;
  const char* env = std::getenv("COLUMNS");
  if (env != nullptr && absl::SimpleAtoi(env, &columns) && columns > 0) return columns;
  return 80;
}

std::optional<absl::Duration> Eta(int64_t step, int64_t total, double step_seconds) {
  if (total <= 0 || step <= 0) return std::nullopt;
  if (step >= total) return absl::ZeroDuration();
  if (!(step_seconds > 0) || !std::isfinite(step_seconds)) return std::nullopt;
  return absl::Seconds(static_cast<double>(total - step) * step_seconds);
}

std::string FormatEta(std::optional<absl::Duration> eta) {
  if (!eta.has_value()) return "?";
  const int64_t s = absl::ToInt64Seconds(*eta + absl::Milliseconds(500));
  if (s < 60) return absl::StrCat(s, "s");
  if (s < 3600) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%dh%02dm", s / 3600, (s % 3600) / 60);
}

std::string ProgressBar(double fraction, int width) {
  width = std::max(width, 3);
  const int inner = width - 2;
  if (!(fraction > 0)) fraction = 0;  // NaN too
  fraction = std::min(fraction, 1.0);
  const int filled = static_cast<int>(std::floor(fraction * inner));
  return absl::StrCat("[", std::string(filled, '#'), std::string(inner - filled, '.'), "]");
}

std::string FitWidth(const std::string& line, int width) {
  if (width <= 0 || line.size() <= static_cast<size_t>(width)) return line;
  size_t end = static_cast<size_t>(width);
  // Not inside a UTF-8 sequence: back up over continuation bytes.
  while (end > 0 && (static_cast<unsigned char>(line[end]) & 0xC0) == 0x80) --end;
  return line.substr(0, end);
}

std::vector<std::string> RenderBlock(const LiveStatus& s, int width) {
  const v1::JobProgress& p = s.progress;
  std::string first = absl::StrCat(StateName(s.state), " gen ", s.generation);
  if (s.total_steps > 0) {
    const double fraction = static_cast<double>(p.step()) / static_cast<double>(s.total_steps);
    absl::StrAppend(&first, "  ", ProgressBar(fraction, 22), "  ",
                    absl::StrFormat("%3d%%", static_cast<int>(
                                                 std::floor(std::clamp(fraction, 0.0, 1.0) * 100))),
                    "  step ", p.step(), "/", s.total_steps, "  ETA ",
                    FormatEta(Eta(p.step(), s.total_steps, p.step_seconds())));
  } else {
    absl::StrAppend(&first, "  step ", p.step());
  }
  const bool stepped = p.step() > 0;
  const std::string second =
      absl::StrCat("loss ", stepped ? absl::StrFormat("%.4f", p.loss()) : "-", "  tokens/s ",
                   stepped ? absl::StrFormat("%.0f", p.tokens_per_second()) : "-", "  MFU ",
                   p.mfu() > 0 ? absl::StrFormat("%.1f%%", 100 * p.mfu()) : "-", "  step ",
                   stepped ? absl::StrFormat("%.3fs", p.step_seconds()) : "-", "  ckpt ",
                   p.checkpoint_step() > 0 ? absl::StrCat(p.checkpoint_step()) : "-", "  restarts ",
                   std::max<int64_t>(0, s.generation - 1));
  return {FitWidth(first, width), FitWidth(second, width)};
}

std::string EraseLines(int lines) {
  std::string out;
  for (int i = 0; i < lines; ++i) out += "\x1b[1A\x1b[2K";
  return out;
}

void LiveBlock::Print(const std::string& line) {
  std::string text = EraseLines(drawn_);
  absl::StrAppend(&text, line, "\n");
  drawn_ = 0;
  if (status_.has_value()) {
    for (const std::string& l : RenderBlock(*status_, width_)) absl::StrAppend(&text, l, "\n");
    drawn_ = 2;
  }
  *out_ << text;
  out_->flush();
}

void LiveBlock::Print(const std::string& line, const LiveStatus& status) {
  status_ = status;
  Print(line);
}

void LiveBlock::Update(const LiveStatus& status) {
  std::string text = EraseLines(drawn_);
  for (const std::string& l : RenderBlock(status, width_)) absl::StrAppend(&text, l, "\n");
  drawn_ = 2;
  status_ = status;
  *out_ << text;
  out_->flush();
}

namespace {

std::string Flags(const v1::RankLiveState& r) {
  std::vector<std::string> flags;
  if (r.straggler()) flags.push_back(absl::StrFormat("straggler(%.2fx)", r.compute_ratio()));
  if (r.hang_suspect()) flags.push_back("hung");
  if (r.finished()) flags.push_back("done");
  if (r.last_report_age_seconds() < 0) flags.push_back("silent");
  return flags.empty() ? "-" : absl::StrJoin(flags, ",");
}

// "-" for a figure not reported yet.
std::string Figure(double value, const char* format, double scale = 1) {
  return value > 0 ? absl::StrFormat(format, value * scale) : "-";
}

}  // namespace

std::string RenderTop(const v1::GetJobResponse& job,
                      const google::protobuf::RepeatedPtrField<v1::RankLiveState>& ranks,
                      int width) {
  const v1::JobStatus& j = job.job();
  LiveStatus status;
  status.job_id = j.job_id();
  status.state = j.state();
  status.generation = j.generation();
  status.total_steps = j.spec().trainer().steps();
  status.progress = j.progress();
  std::string out =
      FitWidth(absl::StrCat("job ", j.job_id(), "  ", RenderBlock(status, 0)[0]), width) + "\n";
  absl::StrAppend(&out, FitWidth(RenderBlock(status, 0)[1], width), "\n\n");
  std::vector<std::vector<std::string>> rows = {{"RANK", "NODE", "STEP", "STEP-P50", "STEP-P99",
                                                 "COMPUTE", "BUSBW", "MFU", "HEARD", "FLAGS",
                                                 "NOW"}};
  for (const v1::RankLiveState& r : ranks) {
    std::string node = "-";
    for (const v1::RankAssignment& a : j.assignments()) {
      if (a.rank() == r.rank()) node = a.node();
    }
    rows.push_back(
        {absl::StrCat(r.rank()), node, absl::StrCat(r.step()),
         Figure(r.step_seconds_p50(), "%.3fs"), Figure(r.step_seconds_p99(), "%.3fs"),
         Figure(r.compute_share(), "%.0f%%", 100),
         Figure(r.busbw_bytes_per_second(), "%.2fGB/s", 1e-9), Figure(r.mfu(), "%.1f%%", 100),
         r.last_report_age_seconds() < 0 ? "never"
                                         : absl::StrFormat("%.1fs", r.last_report_age_seconds()),
         Flags(r), r.activity().empty() ? "-" : r.activity()});
  }
  const bool own = job.ranks_size() > 0;
  if (ranks.empty()) {
    absl::StrAppend(&out, "no ranks running (", StateName(j.state()),
                    j.reason().empty() ? "" : ": " + j.reason(), ")\n");
    return out;
  }
  if (!own) absl::StrAppend(&out, "ranks as last seen while the job ran:\n");
  for (absl::string_view line : absl::StrSplit(Table(rows), '\n', absl::SkipEmpty())) {
    absl::StrAppend(&out, FitWidth(std::string(line), width), "\n");
  }
  return out;
}

}  // namespace ringmaster::ctl
