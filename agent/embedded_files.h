// Files compiled into a binary by the genrule of agent/embed_files.cc: a table of (path, bytes).
// Plain constant data; thread-safe. Ownership: the pointers point into static storage of the
// binary, valid for its lifetime; never freed. Errors: none (the table is built at compile time;
// a file the genrule cannot read fails the build).
#ifndef RINGMASTER_AGENT_EMBEDDED_FILES_H_
#define RINGMASTER_AGENT_EMBEDDED_FILES_H_

#include <cstddef>

namespace ringmaster::agent {

struct EmbeddedFile {
  const char* path;  // relative, '/'-separated ("_ringmaster_watch/__init__.py")
  const char* data;  // `size` bytes (may hold NULs)
  size_t size;
};

}  // namespace ringmaster::agent

#endif  // RINGMASTER_AGENT_EMBEDDED_FILES_H_
