// The Python watch's files (python/watch, //python/watch:files: sitecustomize.py and the
// _ringmaster_watch package), compiled into the agent, and the directory the agent writes them
// into for its workers' PYTHONPATH (worker_env.h).
//
// Threading: functions over the filesystem, meant for one agent per parent directory (its work
// dir); two writers of the same files into one parent at once still both end with the same
// complete directory. Ownership: nothing kept. Errors: UNAVAILABLE naming
// the path and the system's reason when a file or directory cannot be written.
#ifndef RINGMASTER_AGENT_PYTHON_WATCH_FILES_H_
#define RINGMASTER_AGENT_PYTHON_WATCH_FILES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/embedded_files.h"

namespace ringmaster::agent {

// The files of //python/watch:files, paths relative to python/watch.
std::vector<EmbeddedFile> PythonWatchFiles();

// Writes `files` into PARENT/NAME-HASH, HASH a digest of their paths and contents, and returns
// that directory: a directory written complete under a temporary name and renamed into place
// (never seen half-written), with read-only files (0444) in world-readable directories (0755).
// A directory of that name already there is kept as it is (an earlier start wrote the same
// files). Other NAME-HASH directories in PARENT (other versions' files) are removed, best effort
// and logged; a NAME-tmp.* directory (a write in progress, or one interrupted by a crash) is left
// alone. `parent` is created if needed.
absl::StatusOr<std::string> WriteEmbeddedDir(const std::string& parent, const std::string& name,
                                             const std::vector<EmbeddedFile>& files);

// WriteEmbeddedDir(parent, "python-watch", PythonWatchFiles()).
absl::StatusOr<std::string> WritePythonWatch(const std::string& parent);

}  // namespace ringmaster::agent

#endif  // RINGMASTER_AGENT_PYTHON_WATCH_FILES_H_
