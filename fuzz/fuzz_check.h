// What the fuzz targets (//fuzz) share: FUZZ_CHECK, an invariant whose failure is a finding.
//
// A failed check prints the condition and a note to stderr and aborts, which libFuzzer reports
// as a crash with the input saved (crash-<sha1>), like a sanitizer report. Only for the fuzz
// targets: production code returns a Status instead.
#ifndef RINGMASTER_FUZZ_FUZZ_CHECK_H_
#define RINGMASTER_FUZZ_FUZZ_CHECK_H_

#include <cstdio>
#include <cstdlib>
#include <string>

#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/message_lite.h"
#include "google/protobuf/stubs/logging.h"

#define FUZZ_CHECK(condition, note)                                                                \
  do {                                                                                             \
    if (!(condition)) {                                                                            \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK failed: %s\n  %s\n", __FILE__, __LINE__, #condition, \
                   std::string(note).c_str());                                                     \
      std::abort();                                                                                \
    }                                                                                              \
  } while (false)

namespace ringmaster::fuzz {

// Protobuf's error log (a string field that is not UTF-8, seen while parsing) is off: a refused
// input is an expected outcome here, and the log would bury a finding's report.
inline const bool kProtobufLogOff = (google::protobuf::SetLogHandler(nullptr), true);

// `message` in protobuf's deterministic wire form (map entries sorted), so that two equal
// messages give equal bytes; unlike MessageDifferencer this also holds for NaN fields.
inline std::string DeterministicBytes(const google::protobuf::MessageLite& message) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    message.SerializeToCodedStream(&coded);
  }
  return out;
}

}  // namespace ringmaster::fuzz

#endif  // RINGMASTER_FUZZ_FUZZ_CHECK_H_
