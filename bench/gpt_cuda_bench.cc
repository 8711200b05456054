// The CUDA trainer path on one GPU: GPT-2 124M (L=12 C=768 NH=12, vocabulary 50257 padded to
// 50304, T=1024), bf16 by default, the trainer's own step (Gpt forward with the fused loss,
// backward, gradient norm, clipping, AdamW with fp32 master weights) on random tokens (uniform,
// or Zipf-distributed like natural text: --tokens).
//
// Reports, in one line: tokens/s (micro-batch B * T over the median step time after warm-up),
// MFU (llm.c's 6N + 6LCT FLOPs per token over the GPU's dense bf16 peak, 989 TFLOP/s for an
// H100 SXM, or with --dtype=f32 its fp32 peak, 67; gpu_peak.h), the step time, peak memory (the
// device's allocations, and what the CUDA driver reports in use), and the overhead of per-step
// metrics reporting: the same steps with and without building, serialising and printing the
// trainer's step report (the agent RPC itself is not included: no agent runs here).
//
//   bazel run -c opt //bench:gpt_cuda_bench -- --batch=16
//   bench/gpu_bench   (the GPU tests, this bench and the collective bench in one command)
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "common/flags.h"
#include "common/logging.h"
#include "common/status.h"
#include "proto/ringmaster/v1/worker.pb.h"
#include "trainer/cuda/cuda_device.h"
#include "trainer/cuda/cuda_status.h"
#include "trainer/cuda/gpu_peak.h"
#include "trainer/model/gpt.h"
#include "trainer/model/random.h"
#include "trainer/optim/adamw_optimizer.h"

ABSL_FLAG(int, device, 0, "CUDA device index.");
ABSL_FLAG(int, layers, 12, "Model layers (GPT-2 124M: 12).");
ABSL_FLAG(int, d_model, 768, "Model width (GPT-2 124M: 768).");
ABSL_FLAG(int, heads, 12, "Attention heads (GPT-2 124M: 12).");
ABSL_FLAG(int, seq_len, 1024, "Sequence length T.");
ABSL_FLAG(int, vocab, 50257, "Vocabulary (padded to a multiple of 128: 50304).");
ABSL_FLAG(int, batch, 16, "Micro-batch B (sequences per step).");
ABSL_FLAG(int, warmup, 5, "Untimed steps first.");
ABSL_FLAG(int, steps, 30, "Timed steps per measurement.");
ABSL_FLAG(std::string, dtype, "bf16", "Compute type: bf16 or f32.");
ABSL_FLAG(bool, fuse, true, "Use cuBLASLt's fused bias/GELU epilogues.");
ABSL_FLAG(std::string, attention, "fused",
          "Attention kernels: fused (the trainer's default; where they take the shape, bf16 and "
          "heads of 32 or 64 channels, else materialized) or materialized.");
ABSL_FLAG(double, peak_tflops, 0,
          "Peak dense TFLOP/s for MFU (0: from the GPU's name and --dtype, 989 for an H100 SXM "
          "in bf16).");
ABSL_FLAG(std::string, tokens, "uniform",
          "Token distribution: uniform, or zipf (token k with probability proportional to "
          "1/(k+1), as in natural text: a few tokens make up several percent of a batch each, "
          "which is what the embedding backward's per-token sums see on real data).");
ABSL_FLAG(std::string, report, "both",
          "Per-step metrics reporting: off, on, or both (measures the overhead).");

namespace ringmaster::trainer {
namespace {

using Clock = std::chrono::steady_clock;

struct Measurement {
  double median_seconds = 0;
  double last_loss = 0;
};

class Bench {
 public:
  absl::Status Setup();
  absl::StatusOr<Measurement> Run(bool report, int warmup, int steps);
  CudaDevice& device() { return *device_; }
  const GptConfig& config() const { return config_; }

 private:
  absl::Status Step(int64_t t, double* loss);
  void Report(int64_t step, double loss, double seconds);

  std::unique_ptr<CudaDevice> device_;  // first: outlives everything allocated on it
  GptConfig config_;
  std::unique_ptr<Gpt> gpt_;
  std::unique_ptr<AdamWOptimizer> optimizer_;
  // Draws one token (--tokens).
  int32_t Token();

  std::vector<int32_t> inputs_, targets_;
  // --tokens=zipf: the cumulative distribution over the vocabulary; empty for uniform.
  std::vector<double> zipf_cdf_;
  Rng rng_{DeriveSeed(2024, 1)};
  int64_t t_ = 0;
  std::string serialized_;
};

absl::Status Bench::Setup() {
  CudaDeviceOptions options;
  const std::string dtype = absl::GetFlag(FLAGS_dtype);
  if (dtype != "bf16" && dtype != "f32") return FieldError("--dtype", "must be bf16 or f32");
  const std::string tokens = absl::GetFlag(FLAGS_tokens);
  if (tokens != "uniform" && tokens != "zipf") {
    return FieldError("--tokens", "must be uniform or zipf");
  }
  options.compute_dtype = dtype == "bf16" ? DType::kBF16 : DType::kF32;
  options.fuse_bias = options.fuse_gelu = absl::GetFlag(FLAGS_fuse);
  const std::string attention = absl::GetFlag(FLAGS_attention);
  if (attention != "materialized" && attention != "fused") {
    return FieldError("--attention",
                      absl::StrCat("must be materialized or fused, got \"", attention, "\""));
  }
  options.fuse_attention = attention == "fused";
  ASSIGN_OR_RETURN(device_, MakeCudaDevice(absl::GetFlag(FLAGS_device), options));
  ASSIGN_OR_RETURN(config_,
                   GptConfig::Create(absl::GetFlag(FLAGS_layers), absl::GetFlag(FLAGS_d_model),
                                     absl::GetFlag(FLAGS_heads), absl::GetFlag(FLAGS_seq_len),
                                     absl::GetFlag(FLAGS_vocab)));
  const ParameterLayout layout(config_, ModelShard::WholeModel(config_));
  const int B = absl::GetFlag(FLAGS_batch);
  ASSIGN_OR_RETURN(gpt_, Gpt::Create(device_.get(), layout, B, config_.seq_len));
  RETURN_IF_ERROR(gpt_->InitParameters(1));
  ASSIGN_OR_RETURN(optimizer_,
                   AdamWOptimizer::Create(device_.get(), layout, {{0, layout.size()}},
                                          gpt_->params(), gpt_->grads(), {0.9, 0.95, 1e-8, 0.1}));
  inputs_.resize(static_cast<size_t>(B) * config_.seq_len);
  targets_.resize(inputs_.size());
  if (tokens == "zipf") {
    zipf_cdf_.resize(config_.vocab);
    double sum = 0;
    for (int k = 0; k < config_.vocab; ++k) zipf_cdf_[k] = sum += 1.0 / (k + 1);
    for (double& x : zipf_cdf_) x /= sum;
  }
  return device_->Synchronize();
}

int32_t Bench::Token() {
  if (zipf_cdf_.empty()) return static_cast<int32_t>(rng_.Below(config_.vocab));
  const double u = rng_.NextFloat();
  const auto it = std::upper_bound(zipf_cdf_.begin(), zipf_cdf_.end(), u);
  return static_cast<int32_t>(std::min<ptrdiff_t>(it - zipf_cdf_.begin(), config_.vocab - 1));
}

absl::Status Bench::Step(int64_t t, double* loss) {
  for (size_t i = 0; i < inputs_.size(); ++i) {
    inputs_[i] = Token();
    targets_[i] = Token();
  }
  gpt_->ZeroGradients();
  ASSIGN_OR_RETURN(*loss, gpt_->Forward(inputs_.data(), targets_.data(), 1.0f));
  RETURN_IF_ERROR(gpt_->Backward(nullptr));
  // As the trainer: the gradient norm read back, clipping at 1, the update.
  ASSIGN_OR_RETURN(double squares, device_->SumSquares({gpt_->grads()}));
  const double norm = std::sqrt(squares);
  const float scale = norm > 1.0 ? static_cast<float>(1.0 / norm) : 1.0f;
  optimizer_->Step(6e-4f, t, scale);
  return device_->Synchronize();
}

void Bench::Report(int64_t step, double loss, double seconds) {
  // What the trainer does per step besides the agent RPC: the report line and the request.
  const int64_t tokens = static_cast<int64_t>(inputs_.size());
  std::printf("step %lld loss %.6f tok/s %.0f step_ms %.2f\n", static_cast<long long>(step), loss,
              tokens / seconds, seconds * 1e3);
  v1::ReportStepRequest r;
  r.set_step(step);
  r.set_loss(loss);
  r.set_tokens(tokens);
  r.set_step_seconds(seconds);
  r.set_compute_seconds(seconds);
  r.set_mfu(config_.FlopsPerToken() * tokens / seconds / 989e12);
  r.set_state_bytes(device_->allocated_bytes());
  r.SerializeToString(&serialized_);
}

absl::StatusOr<Measurement> Bench::Run(bool report, int warmup, int steps) {
  Measurement m;
  std::vector<double> times;
  for (int i = 0; i < warmup + steps; ++i) {
    const auto start = Clock::now();
    double loss = 0;
    RETURN_IF_ERROR(Step(++t_, &loss));
    if (report) Report(t_, loss, std::chrono::duration<double>(Clock::now() - start).count());
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (i >= warmup) times.push_back(seconds);
    m.last_loss = loss;
  }
  std::sort(times.begin(), times.end());
  m.median_seconds = times[times.size() / 2];
  return m;
}

absl::Status Main() {
  Bench bench;
  RETURN_IF_ERROR(bench.Setup());
  const std::string report = absl::GetFlag(FLAGS_report);
  if (report != "on" && report != "off" && report != "both") {
    return FieldError("--report", "must be on, off or both");
  }
  const int warmup = absl::GetFlag(FLAGS_warmup), steps = std::max(1, absl::GetFlag(FLAGS_steps));
  std::fflush(stdout);
  // Without reporting first (its warm-up also warms the GPU and cuBLASLt's plans), then with.
  std::optional<Measurement> off, on;
  if (report != "on") {
    ASSIGN_OR_RETURN(off, bench.Run(false, warmup, steps));
  }
  if (report != "off") {
    ASSIGN_OR_RETURN(on, bench.Run(true, report == "both" ? 1 : warmup, steps));
  }
  const Measurement& main = off.has_value() ? *off : *on;

  cudaDeviceProp prop{};
  RETURN_IF_ERROR(CudaStatus(cudaGetDeviceProperties(&prop, bench.device().index()), "props"));
  GpuPeak peak = LookUpGpuPeak(prop.name, prop.major, prop.minor,
                               bench.device().compute_dtype() != DType::kF32);
  if (absl::GetFlag(FLAGS_peak_tflops) > 0) {
    peak.flops = absl::GetFlag(FLAGS_peak_tflops) * 1e12;
    peak.explanation = absl::StrFormat("%.0f TFLOP/s (--peak_tflops)", peak.flops / 1e12);
  }
  size_t free_bytes = 0, total_bytes = 0;
  RETURN_IF_ERROR(CudaStatus(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo"));
  const GptConfig& c = bench.config();
  const double tokens = static_cast<double>(absl::GetFlag(FLAGS_batch)) * c.seq_len;
  const double tok_s = tokens / main.median_seconds;
  const double mfu = peak.flops > 0 ? c.FlopsPerToken() * tok_s / peak.flops : 0;
  std::string overhead = "not measured (--report=both)";
  if (off.has_value() && on.has_value()) {
    const double delta = on->median_seconds - off->median_seconds;
    overhead =
        absl::StrFormat("%+.3f ms/step (%+.2f%%)", delta * 1e3, 100 * delta / off->median_seconds);
  }
  // Which fusions ran: a GEMM cuBLASLt has no algorithm for runs less fused (or through cuBLAS).
  std::printf("gemm plans: %s\n", bench.device().gemm_plans().c_str());
  std::printf(
      "gpt_cuda_bench: %s | %s %s B=%d T=%d tokens %s attention %s | %.0f tokens/s | MFU %.1f%% of "
      "%s | step "
      "%.2f ms "
      "(median of %d) | loss %.4f | peak memory %.2f GiB allocated, %.2f GiB in use on the "
      "device | metrics reporting on vs off: %s\n",
      bench.device().description().c_str(), c.ToString().c_str(),
      absl::GetFlag(FLAGS_dtype).c_str(), absl::GetFlag(FLAGS_batch), c.seq_len,
      absl::GetFlag(FLAGS_tokens).c_str(), bench.device().AttentionKind(c.d_model, c.heads), tok_s,
      100 * mfu, peak.explanation.c_str(), main.median_seconds * 1e3, steps, main.last_loss,
      bench.device().peak_allocated_bytes() / double{1 << 30},
      (total_bytes - free_bytes) / double{1 << 30}, overhead.c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace ringmaster::trainer

int main(int argc, char** argv) {
  absl::Status s = ringmaster::InitBinary(
      argc, argv, "gpt_cuda_bench: GPT-2 124M training steps on one GPU (tokens/s, MFU, memory)",
      nullptr);
  if (s.ok()) s = ringmaster::trainer::Main();
  if (!s.ok()) {
    RM_LOG(ERROR) << "gpt_cuda_bench failed: " << s;
    return ringmaster::ExitCodeFor(s);
  }
  return 0;
}
