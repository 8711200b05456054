// YAML scalars as ringctl reads and writes them: which text is a number, and how a string is
// written so that any YAML reader reads it back as that string. Shared by the job file
// (ctl/job_yaml) and the proto printer of `-o yaml` (ctl/proto_yaml).
// Threading: pure functions. Ownership: none kept. Errors: none (nullopt for a non-number).
#ifndef RINGMASTER_CTL_YAML_SCALAR_H_
#define RINGMASTER_CTL_YAML_SCALAR_H_

#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "yaml-cpp/yaml.h"

namespace ringmaster::ctl {

// YAML's number forms: [+-] digits [. digits] [e [+-] digits] (integers included), .inf, -.inf,
// .nan (any case). nullopt when `text` is not a number; `*overflow` when a finite literal is too
// large for a double.
std::optional<double> ParseYamlNumber(absl::string_view text, bool* overflow);

// Writes `s` plain, or double-quoted when a reader would take it plain for something else (null,
// a boolean, a number, a document marker) or it holds a control character (which double quotes
// escape and a plain scalar would lose).
void EmitYamlString(YAML::Emitter& out, const std::string& s);

}  // namespace ringmaster::ctl

#endif  // RINGMASTER_CTL_YAML_SCALAR_H_
