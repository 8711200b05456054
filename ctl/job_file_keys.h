// The keys of a job file, one table row each: the dotted YAML key, its kind, the v1::JobSpec field
// it sets and a one-line doc. The table alone drives ParseJobYaml (which keys a mapping accepts
// and how each value is read), JobSpecToYaml (what is written, in which order), the "did you
// mean" suggestions for unknown keys and the key list at the top of ctl/job_yaml.h (which
// job_file_keys_test compares with JobFileKeyOutline()). Adding a key is adding a row.
//
// Threading: the table is immutable; every function here is pure and safe to call from any
// thread. Ownership: rows and field descriptors are static (they live as long as the program);
// Holder/MutableHolder return pointers into the message they are given. Errors: none are
// returned. A row naming a field that v1::JobSpec lacks, or of the wrong type for its kind, is a
// programmer error: the table is resolved on first use and CHECK-fails (job_file_keys_test
// resolves every row).
#ifndef RINGMASTER_CTL_JOB_FILE_KEYS_H_
#define RINGMASTER_CTL_JOB_FILE_KEYS_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "proto/ringmaster/v1/job.pb.h"

namespace ringmaster::ctl {

// How a key's value is written in YAML and stored in its field.
enum class KeyKind {
  kMapping,        // a mapping of the keys below it; a message field
  kString,         // a string field (proto3 strings are UTF-8)
  kInt32,          // an integer in int32's range
  kInt64,          // an integer in int64's range
  kUint64,         // an integer in [0, 2^64)
  kNumber,         // a double: YAML's number forms, .inf, -.inf, .nan
  kSecondsOrAuto,  // a double of seconds, or "auto" (any case) for 0
  kNegatedBool,    // true or false, stored negated (link_check: false sets link_check_disabled,
                   // python_watch: false sets python_watch_disabled)
  kEnum,           // one of `names` (any case); an enum field, 0 (unspecified) unnamed
  kArgv,           // a list of strings; the repeated string field of a message (command.argv)
  kStringMap,      // a mapping of names to strings; a map<string, string> field
};

// A YAML name of an enum value.
struct EnumName {
  absl::string_view name;
  int number;
};

struct JobFileKey {
  absl::string_view key;  // Dotted YAML path: "trainer.optimizer.lr".
  KeyKind kind;
  absl::string_view field;  // Dotted path of the v1::JobSpec field: "trainer.optimizer.lr".
  absl::string_view doc;    // One line, for the key list.
  absl::Span<const EnumName> names = {};  // kEnum: the names, in the order messages list them.

  // The mapping this key belongs to ("" at the top level), and its own name.
  absl::string_view parent() const;
  absl::string_view name() const;
};

// Every key, each mapping before the keys in it, in the order JobSpecToYaml writes them.
absl::Span<const JobFileKey> JobFileKeys();

// The row of `key` (a dotted path); nullptr when the job file has no such key.
const JobFileKey* FindJobFileKey(absl::string_view key);

// The keys directly in mapping `parent` ("" for the top level), in table order.
std::vector<const JobFileKey*> ChildKeys(absl::string_view parent);

// Whether a mapping key is written as a block (it holds a mapping) or inline ({a: 1, b: 2}).
bool WrittenAsBlock(const JobFileKey& mapping);

// The problem text for `name`, found in mapping `parent` where no key has that name: the same name
// elsewhere ("unknown key here, did you mean trainer.steps?"), else the closest key of `parent`
// ("unknown key, did you mean \"nodes\"?"), else a near miss elsewhere, else the list of `parent`'s
// keys ("unknown key (expected one of: name, nodes, ...)").
std::string UnknownKeyMessage(absl::string_view name, absl::string_view parent);

// "fp32 or bf16": the value names of a kEnum key.
std::string EnumNameList(const JobFileKey& key);

// The other keys that share this key's oneof, this one included, in table order: "builtin or
// command". Empty when the key's field is in no oneof.
std::string OneofKeyNames(const JobFileKey& key);

// The key list shown at the top of ctl/job_yaml.h: one line per key, indented two spaces per
// level, "  name (string): <doc>", lines joined by '\n' (no trailing newline).
std::string JobFileKeyOutline();

// --- Field access (protobuf reflection) ---
// A key's "parent message" is the message of its parent key (v1::JobSpec at the top level).

// The field a key sets (the last field of its path).
const google::protobuf::FieldDescriptor* KeyField(const JobFileKey& key);

// The fields from the parent message down to the key's field: one for most keys, two for
// trainer.command (command, then argv).
absl::Span<const google::protobuf::FieldDescriptor* const> RelativeFieldPath(const JobFileKey& key);

// The message holding KeyField(key), reached from `parent`: `parent` itself, or the messages of
// the path in between, created as needed (creating trainer.command selects that oneof case).
google::protobuf::Message* MutableHolder(const JobFileKey& key, google::protobuf::Message* parent);

// As MutableHolder, creating nothing: nullptr when a message in between is not present.
const google::protobuf::Message* Holder(const JobFileKey& key,
                                        const google::protobuf::Message& parent);

// Whether the key has a value in `parent` that JobSpecToYaml writes: a field with presence when
// set (0 included; a oneof case when selected), a field without presence when not zero (-0.0 is
// not zero to proto3), a mapping or argv when its message is present, an env map when not empty.
bool KeyIsSet(const JobFileKey& key, const google::protobuf::Message& parent);

// The fields of v1::JobSpec, as dotted paths, that the job file deliberately leaves out (none
// today): job_file_keys_test requires every field reachable from JobSpec to be a key's field, on
// a key's field path, or here.
absl::Span<const absl::string_view> FieldsNotInJobFile();

}  // namespace ringmaster::ctl

#endif  // RINGMASTER_CTL_JOB_FILE_KEYS_H_
