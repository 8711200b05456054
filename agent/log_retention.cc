#include "agent/log_retention.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <vector>

#include "common/logging.h"

namespace ringmaster::agent {
namespace {

namespace fs = std::filesystem;

struct Generation {
  fs::path dir;
  std::string job;
  std::string name;
  int64_t bytes = 0;
  fs::file_time_type newest;  // its most recently written file (or the directory itself)
};

// Size and newest write time of the regular files in `g.dir`.
void Measure(Generation* g) {
  std::error_code ec;
  g->newest = fs::last_write_time(g->dir, ec);
  for (fs::directory_iterator it(g->dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code file_ec;
    if (!it->is_regular_file(file_ec)) continue;
    const uintmax_t size = it->file_size(file_ec);
    if (file_ec) continue;  // removed meanwhile
    g->bytes += static_cast<int64_t>(size);
    const fs::file_time_type written = it->last_write_time(file_ec);
    if (!file_ec) g->newest = std::max(g->newest, written);
  }
}

std::vector<Generation> ListGenerations(const fs::path& logs_dir) {
  std::vector<Generation> out;
  std::error_code ec;
  for (fs::directory_iterator job(logs_dir, ec), end; !ec && job != end; job.increment(ec)) {
    std::error_code job_ec;
    if (!job->is_directory(job_ec)) continue;
    for (fs::directory_iterator gen(job->path(), job_ec); !job_ec && gen != end;
         gen.increment(job_ec)) {
      std::error_code gen_ec;
      if (!gen->is_directory(gen_ec)) continue;
      Generation& g = out.emplace_back();
      g.dir = gen->path();
      g.job = job->path().filename().string();
      g.name = gen->path().filename().string();
      Measure(&g);
    }
  }
  return out;
}

}  // namespace

LogPruneResult PruneLogs(const std::string& logs_dir, int64_t budget_bytes,
                         const std::set<std::pair<std::string, std::string>>& live) {
  LogPruneResult result;
  std::vector<Generation> generations = ListGenerations(logs_dir);
  for (const Generation& g : generations) result.bytes_kept += g.bytes;
  if (budget_bytes <= 0) return result;
  std::sort(generations.begin(), generations.end(),
            [](const Generation& a, const Generation& b) { return a.newest < b.newest; });
  for (const Generation& g : generations) {
    if (result.bytes_kept <= budget_bytes) break;
    if (live.count({g.job, g.name}) > 0) continue;
    std::error_code ec;
    fs::remove_all(g.dir, ec);
    if (ec) {
      RM_LOG(WARNING) << "cannot remove old worker logs " << g.dir.string() << ": " << ec.message();
      continue;
    }
    RM_LOG(INFO) << "removed the logs of job " << g.job << " generation " << g.name << " ("
                 << g.bytes << " bytes) to keep worker logs within " << budget_bytes << " bytes";
    ++result.generations_removed;
    result.bytes_removed += g.bytes;
    result.bytes_kept -= g.bytes;
    // The job's directory goes with its last generation (fails harmlessly while not empty),
    // unless a generation of the job is live: its directory may be about to be created.
    const auto job_live = live.lower_bound({g.job, ""});
    if (job_live == live.end() || job_live->first != g.job) fs::remove(g.dir.parent_path(), ec);
  }
  return result;
}

}  // namespace ringmaster::agent
