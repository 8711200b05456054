#include "trainer/checkpoint/checkpoint_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "trainer/checkpoint/crc32c.h"

namespace ringmaster::trainer {
namespace {

constexpr char kMagic[8] = {'R', 'M', 'C', 'K', 'P', 'T', '0', '1'};
constexpr char kManifestHeader[] = "ringmaster-checkpoint 1";
constexpr char kOwnerHeader[] = "ringmaster-checkpoint-owner 1";

// DATA_LOSS for line `i` (from 0; past the end: an empty one) of a text file named `file`.
absl::Status MalformedLine(const char* file, const std::vector<std::string>& lines, size_t i) {
  return absl::DataLossError(absl::StrCat(file, " line ", i + 1, " is malformed: \"",
                                          i < lines.size() ? lines[i] : "", "\""));
}

// Writes to a file descriptor, tracking size and CRC-32C.
class ChecksummedWriter {
 public:
  explicit ChecksummedWriter(int fd) : fd_(fd) {}
  absl::Status Write(const void* data, size_t n) {
    crc_ = Crc32c(crc_, data, n);
    bytes_ += static_cast<int64_t>(n);
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        return ErrnoError(errno, "write");
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
    return absl::OkStatus();
  }
  template <typename T>
  absl::Status Put(T value) {
    return Write(&value, sizeof(value));
  }
  absl::Status Section(const std::string& name, const void* data, uint64_t bytes) {
    RETURN_IF_ERROR(Put<uint32_t>(static_cast<uint32_t>(name.size())));
    RETURN_IF_ERROR(Write(name.data(), name.size()));
    RETURN_IF_ERROR(Put<uint64_t>(bytes));
    return Write(data, bytes);
  }
  int64_t bytes() const { return bytes_; }
  uint32_t crc() const { return crc_; }

 private:
  const int fd_;
  int64_t bytes_ = 0;
  uint32_t crc_ = 0;
};

// Reads a file front to back, straight into the caller's memory, tracking the bytes read and
// their CRC-32C (computed a piece at a time, while each piece is still in the CPU's caches).
// Reading past the end is DATA_LOSS.
class ChecksummedReader {
 public:
  // The most one read takes.
  static constexpr size_t kPiece = size_t{4} << 20;

  ChecksummedReader(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  // Exactly n bytes.
  absl::Status Read(void* out, size_t n) {
    char* p = static_cast<char*>(out);
    while (n > 0) {
      ASSIGN_OR_RETURN(const size_t got, ReadSome(p, n));
      if (got == 0) return absl::DataLossError(absl::StrCat(path_, ": truncated"));
      p += got;
      n -= got;
    }
    return absl::OkStatus();
  }
  // Up to n bytes (at most one piece); 0 at the end of the file.
  absl::StatusOr<size_t> ReadSome(void* out, size_t n) {
    for (;;) {
      const ssize_t r = ::read(fd_, out, std::min(n, kPiece));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return ErrnoError(errno, absl::StrCat("read ", path_));
      crc_ = Crc32c(crc_, out, static_cast<size_t>(r));
      bytes_ += r;
      return static_cast<size_t>(r);
    }
  }
  template <typename T>
  absl::StatusOr<T> Get() {
    T value{};
    RETURN_IF_ERROR(Read(&value, sizeof(value)));
    return value;
  }
  absl::StatusOr<std::string> String(size_t max) {
    ASSIGN_OR_RETURN(uint32_t n, Get<uint32_t>());
    if (n > max) return absl::DataLossError(absl::StrCat(path_, ": bad string length ", n));
    std::string s(n, '\0');
    RETURN_IF_ERROR(Read(s.data(), n));
    return s;
  }
  int64_t bytes() const { return bytes_; }
  uint32_t crc() const { return crc_; }

 private:
  const int fd_;
  const std::string path_;
  int64_t bytes_ = 0;
  uint32_t crc_ = 0;
};

absl::StatusOr<UniqueFd> OpenForReading(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoError(errno, absl::StrCat("open ", path));
  return fd;
}

absl::StatusOr<int64_t> FileSize(const UniqueFd& fd, const std::string& path) {
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return ErrnoError(errno, absl::StrCat("stat ", path));
  return static_cast<int64_t>(st.st_size);
}

// The header and sections of a rank file, as ReadRankFile checks them; `file_bytes` bounds the
// section sizes.
absl::StatusOr<RankState> ParseRankFile(ChecksummedReader& r, const std::string& path,
                                        int64_t file_bytes, int expected_rank,
                                        const CheckpointLayout& layout, int64_t step) {
  char magic[8];
  RETURN_IF_ERROR(r.Read(magic, sizeof(magic)));
  if (std::memcmp(magic, kMagic, sizeof(magic)) != 0) {
    return absl::DataLossError(absl::StrCat(path, ": not a Ringmaster checkpoint file"));
  }
  RankState state;
  ASSIGN_OR_RETURN(state.step, r.Get<int64_t>());
  ASSIGN_OR_RETURN(int32_t rank, r.Get<int32_t>());
  ASSIGN_OR_RETURN(std::string layout_text, r.String(4096));
  if (state.step != step || rank != expected_rank || layout_text != layout.ToString()) {
    // Intact (ReadRankFile tells a damaged file by its CRC-32C) but not this run's: a restart
    // cannot fix that.
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": holds step ", state.step, " rank ", rank, " layout ", layout_text,
        ", this run expects step ", step, " rank ", expected_rank, " layout ", layout.ToString(),
        ": a resume may change only the data-parallel degree; use the checkpoint's other "
        "dimensions or another checkpoint.dir"));
  }
  for (;;) {
    ASSIGN_OR_RETURN(std::string name, r.String(64));
    ASSIGN_OR_RETURN(uint64_t bytes, r.Get<uint64_t>());
    if (bytes > static_cast<uint64_t>(file_bytes)) {
      return absl::DataLossError(absl::StrCat(path, ": section \"", name, "\" claims ", bytes,
                                              " bytes, more than the file's ", file_bytes));
    }
    if (name == "end") break;
    if (name == "meta") {
      int64_t meta[3];
      if (bytes != sizeof(meta)) return absl::DataLossError(absl::StrCat(path, ": bad meta"));
      RETURN_IF_ERROR(r.Read(meta, sizeof(meta)));
      state.data_position = meta[0];
      state.data_seed = static_cast<uint64_t>(meta[1]);
      continue;
    }
    if (name == "lr_scale") {
      double lr_scale[3];
      if (bytes != sizeof(lr_scale)) {
        return absl::DataLossError(absl::StrCat(path, ": bad lr_scale"));
      }
      RETURN_IF_ERROR(r.Read(lr_scale, sizeof(lr_scale)));
      state.lr_scale_start = static_cast<int64_t>(lr_scale[0]);
      state.lr_scale_from = lr_scale[1];
      state.lr_scale_to = lr_scale[2];
      continue;
    }
    std::vector<float>* target = name == "master" ? &state.master
                                 : name == "m"    ? &state.m
                                 : name == "v"    ? &state.v
                                                  : nullptr;
    if (target == nullptr) {
      return absl::DataLossError(absl::StrCat(path, ": unexpected section \"", name, "\""));
    }
    if (bytes % 4 != 0) {
      return absl::DataLossError(absl::StrCat(path, ": section \"", name, "\" has ", bytes,
                                              " bytes, not a whole number of floats"));
    }
    target->resize(bytes / 4);
    RETURN_IF_ERROR(r.Read(target->data(), bytes));
  }
  if (state.m.size() != state.master.size() || state.v.size() != state.master.size()) {
    return absl::DataLossError(absl::StrCat(path, ": optimizer sections differ in size"));
  }
  if (r.bytes() != file_bytes) {
    return absl::DataLossError(
        absl::StrCat(path, ": ", file_bytes - r.bytes(), " bytes after the end section"));
  }
  return state;
}

absl::Status FsyncDirectoryOf(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const int fd = open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, absl::StrCat("open ", dir));
  const int rc = fsync(fd);
  const int err = errno;
  close(fd);
  if (rc != 0) return ErrnoError(err, absl::StrCat("fsync ", dir));
  return absl::OkStatus();
}

// Opens `path`.tmp.PID for writing, runs `write`, fsyncs, renames to `path`, fsyncs the directory.
absl::Status WriteDurably(const std::string& path,
                          const std::function<absl::Status(int fd)>& write) {
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError(errno, absl::StrCat("create ", tmp));
  absl::Status s = write(fd);
  if (s.ok() && fsync(fd) != 0) s = ErrnoError(errno, absl::StrCat("fsync ", tmp));
  if (close(fd) != 0 && s.ok()) s = ErrnoError(errno, absl::StrCat("close ", tmp));
  if (s.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) {
    s = ErrnoError(errno, absl::StrCat("rename ", tmp));
  }
  if (!s.ok()) {
    unlink(tmp.c_str());  // best effort; the status already says what failed
    return s;
  }
  return FsyncDirectoryOf(path);
}

}  // namespace

std::string CheckpointLayout::ToString() const {
  std::string out = absl::StrCat("world=", world, " tp=", tp, " pp=", pp, " dp=", dp,
                                 " zero=", zero, " params=", params, " padded=", padded);
  if (bucket != 0) absl::StrAppend(&out, " bucket=", bucket);
  return out;
}

std::string StepDirName(int64_t step) { return absl::StrFormat("step-%08d", step); }
std::string RankFileName(int rank) { return absl::StrFormat("rank-%05d.bin", rank); }

absl::Status WriteFileDurably(const std::string& path, const std::string& contents) {
  return WriteDurably(path, [&](int fd) { return ChecksummedWriter(fd).Write(contents.data(),
                                                                             contents.size()); });
}

absl::StatusOr<ManifestFile> WriteRankFile(const std::string& path, int rank,
                                           const CheckpointLayout& layout, const RankState& state) {
  ManifestFile result;
  result.rank = rank;
  result.name = std::filesystem::path(path).filename().string();
  RETURN_IF_ERROR(WriteDurably(path, [&](int fd) -> absl::Status {
    ChecksummedWriter w(fd);
    RETURN_IF_ERROR(w.Write(kMagic, sizeof(kMagic)));
    RETURN_IF_ERROR(w.Put<int64_t>(state.step));
    RETURN_IF_ERROR(w.Put<int32_t>(rank));
    const std::string layout_text = layout.ToString();
    RETURN_IF_ERROR(w.Put<uint32_t>(static_cast<uint32_t>(layout_text.size())));
    RETURN_IF_ERROR(w.Write(layout_text.data(), layout_text.size()));
    const int64_t meta[3] = {state.data_position, static_cast<int64_t>(state.data_seed),
                             static_cast<int64_t>(state.master.size())};
    RETURN_IF_ERROR(w.Section("meta", meta, sizeof(meta)));
    if (state.lr_scale_from != 1 || state.lr_scale_to != 1) {
      const double lr_scale[3] = {static_cast<double>(state.lr_scale_start), state.lr_scale_from,
                                  state.lr_scale_to};
      RETURN_IF_ERROR(w.Section("lr_scale", lr_scale, sizeof(lr_scale)));
    }
    if (!state.master.empty()) {
      RETURN_IF_ERROR(w.Section("master", state.master.data(), state.master.size() * 4));
      RETURN_IF_ERROR(w.Section("m", state.m.data(), state.m.size() * 4));
      RETURN_IF_ERROR(w.Section("v", state.v.data(), state.v.size() * 4));
    }
    RETURN_IF_ERROR(w.Section("end", nullptr, 0));
    result.bytes = w.bytes();
    result.crc32c = w.crc();
    return absl::OkStatus();
  }));
  return result;
}

absl::StatusOr<ManifestFile> ChecksumFile(const std::string& path) {
  ASSIGN_OR_RETURN(const UniqueFd file, OpenForReading(path));
  ChecksummedReader r(file.get(), path);
  std::vector<char> piece(ChecksummedReader::kPiece);
  for (;;) {
    ASSIGN_OR_RETURN(const size_t got, r.ReadSome(piece.data(), piece.size()));
    if (got == 0) break;
  }
  ManifestFile f;
  f.name = std::filesystem::path(path).filename().string();
  f.bytes = r.bytes();
  f.crc32c = r.crc();
  return f;
}

absl::StatusOr<RankState> ReadRankFile(const std::string& path, const ManifestFile& expected,
                                       const CheckpointLayout& layout, int64_t step) {
  ASSIGN_OR_RETURN(const UniqueFd file, OpenForReading(path));
  ASSIGN_OR_RETURN(const int64_t size, FileSize(file, path));
  if (size != expected.bytes) {
    return absl::DataLossError(
        absl::StrCat(path, " has ", size, " bytes, the manifest says ", expected.bytes));
  }
  // One pass: the sections go straight into the state while their CRC-32C is summed.
  ChecksummedReader r(file.get(), path);
  absl::StatusOr<RankState> state = ParseRankFile(r, path, size, expected.rank, layout, step);
  uint32_t crc = r.crc();
  if (!state.ok()) {
    // A damaged file is reported as such (DATA_LOSS), whatever part of it the parse tripped on;
    // an intact one keeps the parse's own error.
    ASSIGN_OR_RETURN(ManifestFile actual, ChecksumFile(path));
    if (actual.crc32c == expected.crc32c) return state.status();
    crc = actual.crc32c;
  }
  if (crc != expected.crc32c) {
    return absl::DataLossError(absl::StrFormat("%s: CRC-32C %08x, the manifest says %08x", path,
                                               crc, expected.crc32c));
  }
  return state;
}

std::string FormatManifest(const Manifest& m) {
  std::string out = absl::StrCat(kManifestHeader, "\nstep ", m.step, "\nlayout ",
                                 m.layout.ToString(), "\n");
  for (const ManifestFile& f : m.files) {
    absl::StrAppend(&out, absl::StrFormat("file %d %s %d %08x\n", f.rank, f.name, f.bytes,
                                          f.crc32c));
  }
  return out;
}

absl::StatusOr<Manifest> ParseManifest(const std::string& text) {
  Manifest m;
  std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
  auto bad = [&](size_t i) { return MalformedLine("MANIFEST", lines, i); };
  if (lines.size() < 3 || lines[0] != kManifestHeader) return bad(0);
  if (lines[1].rfind("step ", 0) != 0 || !absl::SimpleAtoi(lines[1].substr(5), &m.step)) {
    return bad(1);
  }
  if (lines[2].rfind("layout ", 0) != 0) return bad(2);
  for (absl::string_view field : absl::StrSplit(lines[2].substr(7), ' ')) {
    std::pair<std::string, std::string> kv = absl::StrSplit(field, '=');
    int64_t v = 0;
    if (!absl::SimpleAtoi(kv.second, &v)) return bad(2);
    if (kv.first == "world") m.layout.world = static_cast<int>(v);
    else if (kv.first == "tp") m.layout.tp = static_cast<int>(v);
    else if (kv.first == "pp") m.layout.pp = static_cast<int>(v);
    else if (kv.first == "dp") m.layout.dp = static_cast<int>(v);
    else if (kv.first == "zero") m.layout.zero = static_cast<int>(v);
    else if (kv.first == "params") m.layout.params = v;
    else if (kv.first == "padded") m.layout.padded = v;
    else if (kv.first == "bucket") m.layout.bucket = v;
    else return bad(2);
  }
  for (size_t i = 3; i < lines.size(); ++i) {
    std::vector<std::string> f = absl::StrSplit(lines[i], ' ');
    ManifestFile file;
    if (f.size() != 5 || f[0] != "file" || !absl::SimpleAtoi(f[1], &file.rank) ||
        !absl::SimpleAtoi(f[3], &file.bytes) || !absl::SimpleHexAtoi(f[4], &file.crc32c) ||
        file.rank != static_cast<int>(m.files.size())) {
      return bad(i);
    }
    file.name = f[2];
    m.files.push_back(file);
  }
  if (static_cast<int>(m.files.size()) != m.layout.world) {
    return absl::DataLossError(absl::StrCat("MANIFEST lists ", m.files.size(), " files for ",
                                            m.layout.world, " ranks"));
  }
  return m;
}

std::string FormatOwner(const CheckpointOwner& owner) {
  return absl::StrCat(kOwnerHeader, "\njob ", owner.job, "\ngeneration ", owner.generation, "\n");
}

absl::StatusOr<CheckpointOwner> ParseOwner(const std::string& text) {
  CheckpointOwner owner;
  std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
  auto bad = [&](size_t i) { return MalformedLine("OWNER", lines, i); };
  if (lines.empty() || lines[0] != kOwnerHeader) return bad(0);
  if (lines.size() < 2 || lines[1].rfind("job ", 0) != 0 || lines[1].size() == 4) return bad(1);
  owner.job = lines[1].substr(4);
  if (lines.size() < 3 || lines[2].rfind("generation ", 0) != 0 ||
      !absl::SimpleAtoi(lines[2].substr(11), &owner.generation)) {
    return bad(2);
  }
  if (lines.size() > 3) return bad(3);
  return owner;
}

}  // namespace ringmaster::trainer
