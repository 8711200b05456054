#include "agent/python_watch_files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"

namespace ringmaster::agent {

// Defined in the source the genrule :python_watch_files_data generates.
extern const EmbeddedFile kPythonWatchFiles[];
extern const size_t kPythonWatchFilesCount;

namespace {

namespace fs = std::filesystem;

// FNV-1a, 64 bits: stable across builds and runs (unlike absl::Hash).
void Fnv(uint64_t* h, const char* data, size_t size) {
  for (size_t i = 0; i < size; ++i) {
    *h ^= static_cast<unsigned char>(data[i]);
    *h *= 1099511628211ULL;
  }
}

std::string Digest(const std::vector<EmbeddedFile>& files) {
  uint64_t h = 14695981039346656037ULL;
  for (const EmbeddedFile& f : files) {
    Fnv(&h, f.path, std::strlen(f.path) + 1);  // the NUL separates path from contents
    const std::string size = absl::StrCat(f.size, ":");
    Fnv(&h, size.data(), size.size());
    Fnv(&h, f.data, f.size);
  }
  return absl::StrFormat("%016x", h);
}

absl::Status Unavailable(const std::string& what, const std::string& path, std::error_code ec) {
  return absl::UnavailableError(absl::StrCat("cannot ", what, " ", path, ": ", ec.message()));
}

// Writes `files` under `dir` (which exists) with the modes WriteEmbeddedDir promises.
absl::Status WriteFiles(const fs::path& dir, const std::vector<EmbeddedFile>& files) {
  std::error_code ec;
  for (const EmbeddedFile& f : files) {
    const std::string relative = f.path;
    if (relative.empty() || relative.front() == '/' || absl::StrContains(relative, "..")) {
      return absl::InternalError(absl::StrCat("embedded file name \"", relative, "\" is unsafe"));
    }
    const fs::path path = dir / relative;
    fs::create_directories(path.parent_path(), ec);
    if (ec) return Unavailable("create", path.parent_path().string(), ec);
    fs::permissions(path.parent_path(), fs::perms(0755), ec);
    if (ec) return Unavailable("chmod", path.parent_path().string(), ec);
    {
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      out.write(f.data, static_cast<std::streamsize>(f.size));
      if (!out.flush()) {
        return Unavailable("write", path.string(), std::error_code(errno, std::generic_category()));
      }
    }
    fs::permissions(path, fs::perms(0444), ec);
    if (ec) return Unavailable("chmod", path.string(), ec);
  }
  return absl::OkStatus();
}

// Removes NAME-* entries of `parent` other than `keep`, best effort (logged).
void RemoveOthers(const fs::path& parent, const std::string& name, const fs::path& keep) {
  std::error_code ec;
  for (fs::directory_iterator it(parent, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path entry = it->path();
    const std::string file = entry.filename().string();
    // NAME-<16 hex digits>: another version's files. A NAME-tmp.* may be another writer's
    // directory in the making: left alone.
    if (entry == keep || !absl::StartsWith(file, name + "-") || file.size() != name.size() + 17 ||
        absl::StrContains(file, "-tmp.")) {
      continue;
    }
    std::error_code remove_ec;
    // Read-only files in a writable directory remove fine; a directory made read-only by hand
    // would not, and is left (logged).
    fs::remove_all(entry, remove_ec);
    if (remove_ec) {
      RM_LOG(WARNING) << "could not remove the stale " << entry << ": " << remove_ec.message();
    }
  }
}

}  // namespace

std::vector<EmbeddedFile> PythonWatchFiles() {
  return std::vector<EmbeddedFile>(kPythonWatchFiles, kPythonWatchFiles + kPythonWatchFilesCount);
}

absl::StatusOr<std::string> WriteEmbeddedDir(const std::string& parent, const std::string& name,
                                             const std::vector<EmbeddedFile>& files) {
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) return Unavailable("create", parent, ec);
  const fs::path final_dir = fs::path(parent) / absl::StrCat(name, "-", Digest(files));
  if (!fs::is_directory(final_dir, ec)) {
    std::string pattern = (fs::path(parent) / absl::StrCat(name, "-tmp.XXXXXX")).string();
    if (mkdtemp(pattern.data()) == nullptr) {
      return Unavailable("create a directory in", parent,
                         std::error_code(errno, std::generic_category()));
    }
    const fs::path temp(pattern);
    absl::Status written = WriteFiles(temp, files);
    if (written.ok()) {
      fs::permissions(temp, fs::perms(0755), ec);
      if (ec) written = Unavailable("chmod", temp.string(), ec);
    }
    if (written.ok() && rename(temp.c_str(), final_dir.c_str()) != 0) {
      const int err = errno;
      // Another agent renamed the same files into place first: theirs is as good.
      if ((err != EEXIST && err != ENOTEMPTY) || !fs::is_directory(final_dir, ec)) {
        written = Unavailable("rename into", final_dir.string(),
                              std::error_code(err, std::generic_category()));
      }
    }
    std::error_code cleanup;
    fs::remove_all(temp, cleanup);  // gone after a rename; a leftover is removed below anyway
    if (!written.ok()) return written;
  }
  RemoveOthers(parent, name, final_dir);
  return final_dir.string();
}

absl::StatusOr<std::string> WritePythonWatch(const std::string& parent) {
  return WriteEmbeddedDir(parent, "python-watch", PythonWatchFiles());
}

}  // namespace ringmaster::agent
