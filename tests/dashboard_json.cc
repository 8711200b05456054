#include "tests/dashboard_json.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/testing/json_struct.h"
#include "google/protobuf/util/json_util.h"

namespace ringmaster::testing {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

std::string String(const Struct& s, const std::string& name) {
  const Value* v = Field(s, name);
  return v != nullptr && v->kind_case() == Value::kStringValue ? v->string_value() : "";
}

double Number(const Struct& s, const std::string& name, double fallback = -1) {
  const Value* v = Field(s, name);
  return v != nullptr && v->kind_case() == Value::kNumberValue ? v->number_value() : fallback;
}

const Struct* Object(const Struct& s, const std::string& name) {
  const Value* v = Field(s, name);
  return v != nullptr && v->kind_case() == Value::kStructValue ? &v->struct_value() : nullptr;
}

std::vector<const Struct*> Objects(const Struct& s, const std::string& name) {
  std::vector<const Struct*> out;
  const Value* v = Field(s, name);
  if (v == nullptr || v->kind_case() != Value::kListValue) return out;
  for (const Value& item : v->list_value().values()) {
    if (item.kind_case() == Value::kStructValue) out.push_back(&item.struct_value());
  }
  return out;
}

// Panels in display order, including those nested in collapsed rows.
std::vector<const Struct*> AllPanels(const Struct& dashboard) {
  std::vector<const Struct*> out;
  for (const Struct* p : Objects(dashboard, "panels")) {
    out.push_back(p);
    for (const Struct* nested : Objects(*p, "panels")) out.push_back(nested);
  }
  return out;
}

// Grafana's variable syntaxes: $name, ${name}, ${name:format}, [[name]].
const std::regex& VariableRef() {
  static const std::regex re(
      R"(\$\{([A-Za-z0-9_]+)(?::[^}]*)?\}|\$([A-Za-z0-9_]+)|\[\[([A-Za-z0-9_]+)\]\])");
  return re;
}

std::string RefName(const std::smatch& m) {
  for (int i = 1; i <= 3; ++i) {
    if (m[i].matched) return m[i].str();
  }
  return "";
}

const std::set<std::string>& Builtins() {
  static const std::set<std::string> names = {"__rate_interval", "__interval", "__range",
                                              "__interval_ms", "__range_s"};
  return names;
}

}  // namespace

std::string Dashboard::title() const { return String(json, "title"); }

std::vector<PanelQuery> Dashboard::Queries() const {
  std::vector<PanelQuery> out;
  for (const Struct* panel : AllPanels(json)) {
    for (const Struct* target : Objects(*panel, "targets")) {
      out.push_back(
          {file, String(*panel, "title"), String(*target, "refId"), String(*target, "expr")});
    }
  }
  return out;
}

std::vector<std::string> Dashboard::VariableNames() const {
  std::vector<std::string> out;
  const Struct* templating = Object(json, "templating");
  if (templating == nullptr) return out;
  for (const Struct* v : Objects(*templating, "list")) out.push_back(String(*v, "name"));
  return out;
}

absl::StatusOr<std::vector<QueryVariable>> Dashboard::QueryVariables() const {
  std::vector<QueryVariable> out;
  const Struct* templating = Object(json, "templating");
  if (templating == nullptr) return out;
  static const std::regex label_values(R"(^label_values\((.+),\s*([A-Za-z_][A-Za-z0-9_]*)\)$)");
  for (const Struct* v : Objects(*templating, "list")) {
    if (String(*v, "type") != "query") continue;
    const Struct* query = Object(*v, "query");
    const std::string text = query != nullptr ? String(*query, "query") : String(*v, "query");
    std::smatch m;
    if (!std::regex_match(text, m, label_values)) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": variable ", String(*v, "name"),
                       ": expected label_values(SELECTOR, LABEL), got \"", text, "\""));
    }
    out.push_back({String(*v, "name"), m[1].str(), m[2].str()});
  }
  return out;
}

absl::StatusOr<Dashboard> ParseDashboard(const std::string& file, const std::string& text) {
  Dashboard d;
  d.file = file;
  auto parsed = google::protobuf::util::JsonStringToMessage(text, &d.json);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": not JSON: ", parsed.ToString()));
  }
  return d;
}

absl::StatusOr<std::vector<Dashboard>> LoadDashboards(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() == ".json") files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  std::vector<Dashboard> out;
  for (const std::string& path : files) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    auto d = ParseDashboard(std::filesystem::path(path).filename().string(), text.str());
    if (!d.ok()) return d.status();
    out.push_back(std::move(*d));
  }
  return out;
}

absl::StatusOr<std::string> Substitute(const std::string& expr,
                                       const std::map<std::string, std::string>& values) {
  std::string out;
  auto begin = std::sregex_iterator(expr.begin(), expr.end(), VariableRef());
  size_t last = 0;
  for (auto it = begin; it != std::sregex_iterator(); ++it) {
    const std::string name = RefName(*it);
    auto value = values.find(name);
    if (value == values.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("no value for variable $", name, " in \"", expr, "\""));
    }
    out.append(expr, last, it->position() - last);
    out += value->second;
    last = it->position() + it->length();
  }
  out.append(expr, last, std::string::npos);
  return out;
}

std::vector<std::string> LintDashboard(const Dashboard& d) {
  std::vector<std::string> problems;
  auto problem = [&](const std::string& what) { problems.push_back(d.file + ": " + what); };
  const Struct& j = d.json;
  if (d.title().empty()) problem("no title");
  const std::string uid = String(j, "uid");
  if (uid.empty() || uid.size() > 40)
    problem("uid must be 1 to 40 characters, got \"" + uid + "\"");
  // Grafana 10 and 11 write schemaVersion 36 to 39 and migrate older dashboards on load.
  const double schema = Number(j, "schemaVersion");
  if (schema < 36) problem(absl::StrCat("schemaVersion ", schema, " is older than Grafana 9.0's"));
  const Value* id = Field(j, "id");
  if (id != nullptr && id->kind_case() != Value::kNullValue) {
    problem("\"id\" must be null in a provisioned dashboard (Grafana assigns it)");
  }

  const std::vector<std::string> names = d.VariableNames();
  const std::set<std::string> defined(names.begin(), names.end());
  if (names.size() != defined.size()) problem("duplicate variable names");
  bool datasource_variable = false;
  if (const Struct* templating = Object(j, "templating")) {
    for (const Struct* v : Objects(*templating, "list")) {
      const std::string type = String(*v, "type");
      if (type == "datasource") {
        datasource_variable =
            String(*v, "name") == "datasource" && String(*v, "query") == "prometheus";
      } else if (type == "query") {
        const Struct* ds = Object(*v, "datasource");
        if (ds == nullptr || String(*ds, "uid") != "${datasource}") {
          problem("variable " + String(*v, "name") + " does not use the ${datasource} variable");
        }
      } else {
        problem("variable " + String(*v, "name") + " of unexpected type " + type);
      }
    }
  }
  if (!datasource_variable)
    problem("needs a datasource variable named datasource (type prometheus)");
  auto check_refs = [&](const std::string& where, const std::string& text) {
    for (auto it = std::sregex_iterator(text.begin(), text.end(), VariableRef());
         it != std::sregex_iterator(); ++it) {
      const std::string name = RefName(*it);
      if (!defined.count(name) && !Builtins().count(name)) {
        problem(where + " uses undefined variable $" + name);
      }
    }
  };
  if (auto vars = d.QueryVariables(); vars.ok()) {
    for (const QueryVariable& v : *vars) check_refs("variable " + v.name, v.selector);
  } else {
    problem(std::string(vars.status().message()));
  }

  static const std::set<std::string> kTypes = {"row",     "timeseries", "stat",           "table",
                                               "heatmap", "bargauge",   "state-timeline", "gauge",
                                               "text"};
  std::set<int> ids;
  std::set<std::string> titles;
  struct Box {
    int x, y, w, h;
    std::string title;
  };
  std::vector<Box> boxes;
  for (const Struct* p : AllPanels(j)) {
    const std::string title = String(*p, "title");
    const std::string type = String(*p, "type");
    const std::string where = "panel \"" + title + "\"";
    if (title.empty()) problem("a panel has no title");
    if (type != "row" && !titles.insert(title).second) {
      problem(where + ": another panel has the same title");
    }
    if (!kTypes.count(type)) problem(where + " has unknown type \"" + type + "\"");
    const int pid = static_cast<int>(Number(*p, "id"));
    if (pid <= 0 || !ids.insert(pid).second)
      problem(absl::StrCat(where, " id ", pid, " not unique"));
    const Struct* grid = Object(*p, "gridPos");
    if (grid == nullptr) {
      problem(where + " has no gridPos");
    } else {
      Box b{static_cast<int>(Number(*grid, "x")), static_cast<int>(Number(*grid, "y")),
            static_cast<int>(Number(*grid, "w")), static_cast<int>(Number(*grid, "h")), title};
      if (b.x < 0 || b.y < 0 || b.w <= 0 || b.h <= 0 || b.x + b.w > 24) {
        problem(absl::StrCat(where, " gridPos outside the 24-column grid: x=", b.x, " w=", b.w));
      }
      for (const Box& o : boxes) {
        if (b.x < o.x + o.w && o.x < b.x + b.w && b.y < o.y + o.h && o.y < b.y + b.h) {
          problem(where + " overlaps panel \"" + o.title + "\"");
        }
      }
      boxes.push_back(b);
    }
    if (type == "row" || type == "text") continue;
    const Struct* ds = Object(*p, "datasource");
    if (ds == nullptr || String(*ds, "uid") != "${datasource}" ||
        String(*ds, "type") != "prometheus") {
      problem(where + " does not use the ${datasource} variable");
    }
    if (String(*p, "description").empty()) problem(where + " has no description");
    const std::vector<const Struct*> targets = Objects(*p, "targets");
    if (targets.empty()) problem(where + " has no queries");
    std::set<std::string> refs;
    for (const Struct* t : targets) {
      const std::string ref = String(*t, "refId");
      if (ref.empty() || !refs.insert(ref).second)
        problem(where + " query refId \"" + ref + "\" not unique");
      const std::string expr = String(*t, "expr");
      if (expr.empty()) problem(where + " query " + ref + " has no expr");
      const Struct* tds = Object(*t, "datasource");
      if (tds != nullptr && String(*tds, "uid") != "${datasource}") {
        problem(where + " query " + ref + " names another datasource");
      }
      check_refs(where + " query " + ref, expr);
    }
  }
  return problems;
}

std::vector<std::string> MetricNamesIn(const std::string& text) {
  static const std::regex name(
      R"([a-z_]+:ringmaster_[a-z0-9_]*[a-z0-9](?::[a-z0-9_]+)?|ringmaster_[a-z0-9_]*[a-z0-9])");
  static const std::regex histogram_suffix("_(bucket|sum|count)$");
  std::set<std::string> out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), name); it != std::sregex_iterator();
       ++it) {
    std::string n = it->str();
    if (n.find(':') == std::string::npos) n = std::regex_replace(n, histogram_suffix, "");
    out.insert(n);
  }
  return {out.begin(), out.end()};
}

}  // namespace ringmaster::testing
