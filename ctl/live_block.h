// ringctl's live views on a terminal: the status block that `watch` and `submit --wait` keep at
// the bottom of the screen, and the per-rank table of `top`.
//
// The rendering functions are pure (no terminal, no clock: the caller passes widths and times),
// so tests compare them with golden strings. LiveBlock writes plain ANSI escapes to a stream:
// cursor up one line ("\x1b[1A") and erase the line ("\x1b[2K") to take the block away, nothing
// else (no colour, no curses). Lines are cut to the terminal's width, so none wraps and the block
// always spans the lines it counts.
//
// Threading: LiveBlock is not thread-safe (one per output stream, used by one thread); the
// functions are. Ownership: LiveBlock borrows its stream, which must outlive it. Errors: none.
#ifndef RINGMASTER_CTL_LIVE_BLOCK_H_
#define RINGMASTER_CTL_LIVE_BLOCK_H_

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "proto/ringmaster/v1/coordinator.pb.h"

namespace ringmaster::ctl {

// Whether ringctl draws live views: stdout is a terminal and $TERM is set and not "dumb" (a
// terminal that cannot move the cursor). NO_COLOR does not matter: the views use no colour.
bool LiveOutputWanted();
// The terminal's columns (TIOCGWINSZ on stdout), else $COLUMNS, else 80.
int TerminalWidth();

// What the status block shows.
struct LiveStatus {
  std::string job_id;
  v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
  int64_t generation = 0;
  // The steps the job trains for (trainer.steps); 0 when unknown (a command job without them):
  // no bar and no ETA then.
  int64_t total_steps = 0;
  // The latest progress snapshot; step 0 before the first step.
  v1::JobProgress progress;
};

// The time left at `step_seconds` per step for the steps from `step` to `total`; nullopt when it
// cannot be known (no total, no step time yet, or not started). 0 once step >= total.
std::optional<absl::Duration> Eta(int64_t step, int64_t total, double step_seconds);
// "45s", "12m05s", "3h07m" (rounded to the second); "?" for nullopt.
std::string FormatEta(std::optional<absl::Duration> eta);
// "[#####.....]" of `width` characters in all (at least 3), `fraction` (clamped to [0, 1]) of
// the inner cells filled, rounded down.
std::string ProgressBar(double fraction, int width);
// The block's lines (two), each cut to `width` columns:
//   RUNNING gen 1  [##########..........]  50%  step 50/100  ETA 12s
//   loss 3.4100  tokens/s 5120  MFU 41.0%  step 0.210s  ckpt 40  restarts 0
// Unknown figures read "-" (no MFU reported, no checkpoint yet); without a total, the first line
// reads "RUNNING gen 1  step 50".
std::vector<std::string> RenderBlock(const LiveStatus& status, int width);
// Escapes that take away a block of `lines` lines drawn just above the cursor (the cursor at the
// start of the line below it): for each line, cursor up and erase the line.
std::string EraseLines(int lines);
// `line` cut to `width` columns (bytes; ringctl's own text is ASCII; a UTF-8 sequence is not cut
// in the middle).
std::string FitWidth(const std::string& line, int width);

// The status block on a terminal: events are printed above it, the block is redrawn under them.
class LiveBlock {
 public:
  LiveBlock(std::ostream* out, int width) : out_(out), width_(width) {}
  // Prints `line` (an event) above the block and redraws the block, if drawn.
  void Print(const std::string& line);
  // Prints `line` above the block and redraws the block with `status`.
  void Print(const std::string& line, const LiveStatus& status);
  // Redraws the block with `status`.
  void Update(const LiveStatus& status);

 private:
  std::ostream* out_;
  int width_;
  int drawn_ = 0;  // lines of the block on screen, above the cursor
  std::optional<LiveStatus> status_;
};

// `ringctl top`'s screen for `job` at `now`: a header line (job, state, step of total, ETA,
// figures) and the per-rank table, columns
//   RANK NODE STEP STEP-P50 STEP-P99 COMPUTE BUSBW MFU HEARD FLAGS
// (step times in seconds, compute share and MFU in percent, busbw in GB/s, HEARD the last report's
// age; FLAGS: straggler, hung (a hang suspect), done, silent (no report in this generation); "-"
// for none). `ranks` is the live state to show: the job's own while it runs, or the last one seen
// (ringctl keeps it for the final screen, when the coordinator has none left): the table is then
// headed "ranks as last seen while the job ran:". Lines are cut to `width` (0: not cut).
std::string RenderTop(const v1::GetJobResponse& job,
                      const google::protobuf::RepeatedPtrField<v1::RankLiveState>& ranks,
                      int width);

}  // namespace ringmaster::ctl

#endif  // RINGMASTER_CTL_LIVE_BLOCK_H_
