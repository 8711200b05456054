#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "trainer/data/token_source.h"

namespace ringmaster::trainer {
namespace {

constexpr int32_t kMagic = 20240520;
constexpr int32_t kVersion = 1;
constexpr int64_t kHeaderBytes = 256 * sizeof(int32_t);
constexpr char kField[] = "trainer.data.path";

class MappedTokenFile final : public TokenSource {
 public:
  MappedTokenFile(std::string path, void* map, size_t map_bytes, int64_t tokens, int32_t vocab)
      : path_(std::move(path)), map_(map), map_bytes_(map_bytes), size_(tokens), vocab_(vocab) {}
  ~MappedTokenFile() override { munmap(map_, map_bytes_); }

  int64_t size() const override { return size_; }
  int32_t vocab_needed() const override { return vocab_; }
  void Copy(int64_t offset, int64_t count, int32_t* out) const override {
    const uint16_t* tokens = reinterpret_cast<const uint16_t*>(
        static_cast<const char*>(map_) + kHeaderBytes);
    for (int64_t i = 0; i < count; ++i) out[i] = tokens[offset + i];
  }
  std::string description() const override {
    return absl::StrCat(path_, " (", size_, " tokens)");
  }

 private:
  const std::string path_;
  void* const map_;
  const size_t map_bytes_;
  const int64_t size_;
  const int32_t vocab_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TokenSource>> OpenTokenFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return FieldError(kField, absl::StrCat("cannot open ", path, ": ", strerror(errno)));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return FieldError(kField, absl::StrCat("cannot stat ", path, ": ", strerror(err)));
  }
  const int64_t bytes = st.st_size;
  if (bytes < kHeaderBytes) {
    close(fd);
    return FieldError(kField, absl::StrCat(path, " has ", bytes, " bytes, less than the ",
                                           kHeaderBytes, "-byte header of a token file"));
  }
  void* map = mmap(nullptr, static_cast<size_t>(bytes), PROT_READ, MAP_SHARED, fd, 0);
  const int map_errno = errno;
  close(fd);
  if (map == MAP_FAILED) {
    return FieldError(kField, absl::StrCat("cannot map ", path, ": ", strerror(map_errno)));
  }
  int32_t header[256];
  std::memcpy(header, map, sizeof(header));
  auto fail = [&](const std::string& why) {
    munmap(map, static_cast<size_t>(bytes));
    return FieldError(kField, absl::StrCat(path, ": ", why));
  };
  if (header[0] != kMagic) {
    return fail(absl::StrCat("bad magic ", header[0], ", want ", kMagic,
                             " (llm.c token file layout)"));
  }
  if (header[1] != kVersion) return fail(absl::StrCat("version ", header[1], ", want 1"));
  const int64_t tokens = header[2];
  if (tokens < 2 || kHeaderBytes + tokens * 2 != bytes) {
    return fail(absl::StrCat("header says ", tokens, " tokens but the file holds ",
                             (bytes - kHeaderBytes) / 2));
  }
  const uint16_t* data = reinterpret_cast<const uint16_t*>(static_cast<char*>(map) + kHeaderBytes);
  const int32_t vocab = *std::max_element(data, data + tokens) + 1;
  return std::unique_ptr<TokenSource>(
      new MappedTokenFile(path, map, static_cast<size_t>(bytes), tokens, vocab));
}

absl::Status WriteTokenFile(const std::string& path, const std::vector<uint16_t>& tokens) {
  int32_t header[256] = {};
  header[0] = kMagic;
  header[1] = kVersion;
  header[2] = static_cast<int32_t>(tokens.size());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(header), sizeof(header));
  out.write(reinterpret_cast<const char*>(tokens.data()),
            static_cast<std::streamsize>(tokens.size() * sizeof(uint16_t)));
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace ringmaster::trainer
