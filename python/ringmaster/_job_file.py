"""The job file (the same keys as ``ringctl``'s YAML), read into a ``JobSpec`` message.

This is a port of ``ctl/job_file_keys.cc`` and the reader of ``ctl/job_yaml.cc``: the same keys,
the same value forms and the same problem texts, so a spec refused by ``ringctl submit`` is refused
here with the same words. Like ringctl, it also refuses the keys only the builtin trainer reads
(``BUILTIN_ONLY_KEYS``, ported from ``spec/trainer_keys.h``) in a command job of another program.
Range and consistency rules are the coordinator's (it answers INVALID_ARGUMENT naming the field);
this reader checks only keys, value types and that rule.

``tests/test_client.py`` compares ``KEYS`` with the key outline in ``ctl/job_yaml.h`` (which
``//ctl:job_file_keys_test`` compares with the C++ table), so a key added there and not here fails
a test.

Threading: pure functions; safe from any thread.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, List, Mapping, Optional, Sequence, Tuple

from google.protobuf import message as _message

# Kinds of keys (ctl/job_file_keys.h KeyKind).
MAPPING = "mapping"
STRING = "string"
INT32 = "int32"
INT64 = "int64"
UINT64 = "uint64"
NUMBER = "number"
SECONDS_OR_AUTO = "seconds_or_auto"
NEGATED_BOOL = "negated_bool"
ENUM = "enum"
ARGV = "argv"
STRING_MAP = "string_map"


@dataclass(frozen=True)
class Key:
    """One row of the job file's table: dotted YAML key, kind, dotted JobSpec field, enum names."""

    key: str
    kind: str
    field: str
    names: Tuple[Tuple[str, int], ...] = ()

    @property
    def parent(self) -> str:
        return self.key.rpartition(".")[0]

    @property
    def name(self) -> str:
        return self.key.rpartition(".")[2]


_PRECISION = (("fp32", 1), ("bf16", 2))
_ATTENTION = (("fused", 1), ("materialized", 2))
_ELASTIC_BATCH = (("global", 1), ("per_replica", 2))

# The rows of ctl/job_file_keys.cc, in its order.
KEYS: Tuple[Key, ...] = (
    Key("name", STRING, "name"),
    Key("nodes", INT32, "nodes"),
    Key("min_nodes", INT32, "min_nodes"),
    Key("devices_per_node", INT32, "devices_per_node"),
    Key("spares", INT32, "spares"),
    Key("elastic_batch", ENUM, "elastic_batch", _ELASTIC_BATCH),
    Key("elastic_warmup_steps", INT32, "elastic_warmup_steps"),
    Key("elastic_wait", NUMBER, "elastic_wait_seconds"),
    Key("parallelism", MAPPING, "parallelism"),
    Key("parallelism.tensor", INT32, "parallelism.tensor"),
    Key("parallelism.pipeline", INT32, "parallelism.pipeline"),
    Key("parallelism.data", INT32, "parallelism.data"),
    Key("trainer", MAPPING, "trainer"),
    Key("trainer.builtin", STRING, "trainer.builtin"),
    Key("trainer.command", ARGV, "trainer.command.argv"),
    Key("trainer.model", MAPPING, "trainer.model"),
    Key("trainer.model.layers", INT32, "trainer.model.layers"),
    Key("trainer.model.d_model", INT32, "trainer.model.d_model"),
    Key("trainer.model.heads", INT32, "trainer.model.heads"),
    Key("trainer.model.seq_len", INT32, "trainer.model.seq_len"),
    Key("trainer.model.vocab", INT32, "trainer.model.vocab"),
    Key("trainer.batch", MAPPING, "trainer.batch"),
    Key("trainer.batch.micro_batch", INT32, "trainer.batch.micro_batch"),
    Key("trainer.batch.global_batch", INT32, "trainer.batch.global_batch"),
    Key("trainer.steps", INT64, "trainer.steps"),
    Key("trainer.optimizer", MAPPING, "trainer.optimizer"),
    Key("trainer.optimizer.lr", NUMBER, "trainer.optimizer.lr"),
    Key("trainer.optimizer.warmup_steps", INT32, "trainer.optimizer.warmup_steps"),
    Key("trainer.optimizer.weight_decay", NUMBER, "trainer.optimizer.weight_decay"),
    Key("trainer.optimizer.clip_grad_norm", NUMBER, "trainer.optimizer.clip_grad_norm"),
    Key("trainer.optimizer.min_lr", NUMBER, "trainer.optimizer.min_lr"),
    Key("trainer.optimizer.beta1", NUMBER, "trainer.optimizer.beta1"),
    Key("trainer.optimizer.beta2", NUMBER, "trainer.optimizer.beta2"),
    Key("trainer.optimizer.epsilon", NUMBER, "trainer.optimizer.epsilon"),
    Key("trainer.precision", ENUM, "trainer.precision", _PRECISION),
    Key("trainer.attention", ENUM, "trainer.attention", _ATTENTION),
    Key("trainer.zero_stage", INT32, "trainer.zero_stage"),
    Key("trainer.data", MAPPING, "trainer.data"),
    Key("trainer.data.path", STRING, "trainer.data.path"),
    Key("trainer.data.seed", UINT64, "trainer.data.seed"),
    Key("trainer.env", STRING_MAP, "trainer.env"),
    Key("checkpoint", MAPPING, "checkpoint"),
    Key("checkpoint.dir", STRING, "checkpoint.dir"),
    Key("checkpoint.every_steps", INT32, "checkpoint.every_steps"),
    Key("checkpoint.keep", INT32, "checkpoint.keep"),
    Key("checkpoint.max_consecutive_failures", INT32, "checkpoint.max_consecutive_failures"),
    Key("restart", MAPPING, "restart"),
    Key("restart.max_restarts", INT32, "restart.max_restarts"),
    Key("restart.window_minutes", INT32, "restart.window_minutes"),
    Key("watchdog", MAPPING, "watchdog"),
    Key("watchdog.hang_timeout", SECONDS_OR_AUTO, "watchdog.hang_timeout_seconds"),
    Key("watchdog.init_timeout", SECONDS_OR_AUTO, "watchdog.init_timeout_seconds"),
    Key("watchdog.checkpoint_timeout", SECONDS_OR_AUTO, "watchdog.checkpoint_timeout_seconds"),
    Key("watchdog.straggler_threshold", NUMBER, "watchdog.straggler_threshold"),
    Key("watchdog.link_check", NEGATED_BOOL, "watchdog.link_check_disabled"),
    Key("watchdog.link_check_bytes", INT64, "watchdog.link_check_bytes"),
    Key("watchdog.slow_link_ratio", NUMBER, "watchdog.slow_link_ratio"),
    Key("watchdog.min_link_bytes_per_second", NUMBER, "watchdog.min_link_bytes_per_second"),
    Key("watchdog.auto_link_check", NEGATED_BOOL, "watchdog.auto_link_check_disabled"),
    Key("watchdog.auto_link_check_interval", NUMBER,
        "watchdog.auto_link_check_interval_seconds"),
    Key("watchdog.python_watch", NEGATED_BOOL, "watchdog.python_watch_disabled"),
)

# spec/trainer_keys.h: the keys only the builtin trainer reads, in job-file order, and the problem
# text for one of them set in a command job of another program.
BUILTIN_ONLY_KEYS: Tuple[str, ...] = (
    "trainer.model", "trainer.batch", "trainer.optimizer", "trainer.precision",
    "trainer.attention", "trainer.zero_stage", "trainer.data",
)
BUILTIN_ONLY_RULE = ("only the builtin trainer reads it; a command job's program takes its "
                     "settings from its own argv and trainer.env (remove the key, or use "
                     "builtin: gpt)")

_BY_KEY = {k.key: k for k in KEYS}


def is_builtin_trainer_program(argv0: str) -> bool:
    """Whether ``argv0`` names the builtin trainer's program (basename ``trainer`` or
    ``ringmaster-trainer``), which reads the builtin-only keys as a builtin job does."""
    return argv0.rpartition("/")[2] in ("trainer", "ringmaster-trainer")


def refused_builtin_only_keys(trainer: _message.Message) -> List[str]:
    """The builtin-only keys a ``TrainerSpec`` sets in a command job of another program: a message
    key when its message is present, an enum or integer key when not 0; empty for other specs."""
    if trainer.WhichOneof("program") != "command":
        return []
    argv = trainer.command.argv
    if argv and is_builtin_trainer_program(argv[0]):
        return []
    refused = []
    for key in BUILTIN_ONLY_KEYS:
        name = key.rpartition(".")[2]
        field = trainer.DESCRIPTOR.fields_by_name[name]
        if field.message_type is not None:
            is_set = trainer.HasField(name)
        else:
            is_set = getattr(trainer, name) != 0
        if is_set:
            refused.append(key)
    return refused


def child_keys(parent: str) -> List[Key]:
    """The keys directly in mapping ``parent`` ("" for the top level), in table order."""
    return [k for k in KEYS if k.parent == parent]


def _edit_distance(a: str, b: str) -> int:
    # Optimal string alignment: a swap of neighbours is one edit.
    d = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(len(a) + 1):
        d[i][0] = i
    for j in range(len(b) + 1):
        d[0][j] = j
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[len(a)][len(b)]


def _near_miss(typed: str, known: str) -> bool:
    limit = 1 if len(known) <= 3 else 2 if len(known) <= 6 else 3
    if len(typed) > len(known) + limit or len(known) > len(typed) + limit:
        return False
    return _edit_distance(typed.lower(), known) <= limit


def unknown_key_message(name: str, parent: str) -> str:
    """The problem text for an unknown key ``name`` in mapping ``parent`` (as ringctl says it)."""
    elsewhere = [k.key for k in KEYS if k.parent != parent and k.name == name]
    near_elsewhere = [k.key for k in KEYS if k.parent != parent and _near_miss(name, k.name)]
    if elsewhere:
        return "unknown key here, did you mean %s?" % " or ".join(elsewhere)
    keys = child_keys(parent)
    best: Optional[Key] = None
    best_distance = 0
    for k in keys:
        if not _near_miss(name, k.name):
            continue
        distance = _edit_distance(name.lower(), k.name)
        if best is None or distance < best_distance:
            best, best_distance = k, distance
    if best is not None:
        return 'unknown key, did you mean "%s"?' % best.name
    if near_elsewhere:
        return "unknown key here, did you mean %s?" % " or ".join(near_elsewhere)
    return "unknown key (expected one of: %s)" % ", ".join(k.name for k in keys)


# --- Values -------------------------------------------------------------------------------------


class _Node:
    """A value of the document: "map" (value: [(key node, value node)]), "seq" (value: [node]),
    "scalar" (value: its text) or "null"; with its line and column (0-based) when known."""

    __slots__ = ("kind", "value", "line", "column")

    def __init__(self, kind: str, value: Any, line: Optional[int] = None,
                 column: Optional[int] = None) -> None:
        self.kind, self.value, self.line, self.column = kind, value, line, column


def _quote(text: str) -> str:
    # absl::CHexEscape's look: \n, \t, \", \\ and \xNN for other control bytes.
    out = []
    for ch in text:
        if ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ch in "\"'\\":
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append("\\x%02x" % ord(ch))
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _describe(node: _Node) -> str:
    if node.kind == "null":
        return "null"
    if node.kind == "scalar":
        return _quote(node.value)
    return "a list" if node.kind == "seq" else "a mapping"


def _from_python(value: Any) -> _Node:
    """A node for a Python value (a dict given to Client.submit): scalars become YAML text."""
    if value is None:
        return _Node("null", None)
    if isinstance(value, Mapping):
        return _Node("map", [(_from_python(k), _from_python(v)) for k, v in value.items()])
    if isinstance(value, (list, tuple)):
        return _Node("seq", [_from_python(v) for v in value])
    if isinstance(value, bool):
        return _Node("scalar", "true" if value else "false")
    if isinstance(value, float):
        if math.isnan(value):
            return _Node("scalar", ".nan")
        if math.isinf(value):
            return _Node("scalar", ".inf" if value > 0 else "-.inf")
        return _Node("scalar", repr(value))
    return _Node("scalar", str(value))


def _from_yaml(node: Any) -> _Node:
    """A node for a PyYAML composed node, keeping each scalar's text as written (as yaml-cpp)."""
    import yaml  # python3-yaml; only needed for job files.

    line, column = node.start_mark.line, node.start_mark.column
    if isinstance(node, yaml.MappingNode):
        return _Node("map", [(_from_yaml(k), _from_yaml(v)) for k, v in node.value], line, column)
    if isinstance(node, yaml.SequenceNode):
        return _Node("seq", [_from_yaml(v) for v in node.value], line, column)
    if node.tag == "tag:yaml.org,2002:null":
        return _Node("null", None, line, column)
    return _Node("scalar", node.value, line, column)


_INTEGER = re.compile(r"^[+-]?[0-9]+$")
_NUMBER = re.compile(r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(e[+-]?[0-9]+)?$")


def _parse_number(text: str) -> Tuple[Optional[float], bool]:
    """YAML's number forms (ctl/job_yaml.cc ParseNumber): (value or None, overflow)."""
    lower = text.lower()
    if lower == ".nan":
        return math.nan, False
    body, negative = lower, False
    if body[:1] in ("+", "-"):
        negative, body = body[0] == "-", body[1:]
    if body == ".inf":
        return (-math.inf if negative else math.inf), False
    if not _NUMBER.match(body):
        return None, False
    try:
        value = float(body)
    except (ValueError, OverflowError):
        return None, False
    if negative:
        value = -value
    return value, not math.isfinite(value)


class _Reader:
    def __init__(self, filename: str, spec: _message.Message) -> None:
        self.filename = filename
        self.spec = spec
        self.problems: List[str] = []

    def problem(self, node: Optional[_Node], path: str, what: str) -> None:
        where = self.filename + ": "
        if node is not None and node.line is not None:
            where = "%s:%d:%d: " % (self.filename, node.line + 1, node.column + 1)
        self.problems.append(where + path + (": " if path else "") + what)

    def read_job(self, root: _Node) -> None:
        if root.kind != "map":
            self.problem(root, "", "expected a mapping of job keys (name, nodes, trainer, ...), got "
                         + _describe(root))
            return
        self.read_mapping(root, "", "", self.spec)

    def read_mapping(self, node: _Node, path: str, parent: str, message: _message.Message) -> None:
        keys = {k.name: k for k in child_keys(parent)}
        seen = {}
        for key_node, value in node.value:
            if key_node.kind != "scalar":
                self.problem(key_node, path, "expected a key name, got " + _describe(key_node))
                continue
            name = key_node.value
            key_path = path + "." + name if path else name
            if name in seen:
                first = seen[name]
                self.problem(key_node, key_path, "duplicate key (first at line %s)" %
                             (first.line + 1 if first.line is not None else "?"))
                continue
            seen[name] = key_node
            key = keys.get(name)
            if key is None:
                self.problem(key_node, key_path, unknown_key_message(name, parent))
                continue
            # Values are pointed at by their key's position, as ringctl does.
            value_at = _Node(value.kind, value.value, key_node.line, key_node.column)
            self.read_key(key, value_at, key_path, message)
        if parent == "trainer":
            # Once the whole trainer mapping is read, as ringctl does.
            for refused in refused_builtin_only_keys(message):
                name = refused.rpartition(".")[2]
                self.problem(seen.get(name, node), path + "." + name, BUILTIN_ONLY_RULE)

    # The message holding the key's field, reached from `parent` (creating what is in between),
    # and the field's name in it.
    def _holder(self, key: Key, parent: _message.Message) -> Tuple[_message.Message, str]:
        parent_depth = len(_BY_KEY[key.parent].field.split(".")) if key.parent else 0
        path = key.field.split(".")[parent_depth:]
        holder = parent
        for name in path[:-1]:
            holder = getattr(holder, name)
            holder.SetInParent()
        return holder, path[-1]

    def _oneof_taken(self, key: Key, node: _Node, path: str, parent: _message.Message) -> bool:
        parent_depth = len(_BY_KEY[key.parent].field.split(".")) if key.parent else 0
        own = key.field.split(".")[parent_depth]
        field = parent.DESCRIPTOR.fields_by_name[own]
        oneof = field.containing_oneof
        if oneof is None:
            return False
        held = parent.WhichOneof(oneof.name)
        if held is None or held == own:
            return False
        siblings = []
        for sibling in child_keys(key.parent):
            first = sibling.field.split(".")[parent_depth]
            if parent.DESCRIPTOR.fields_by_name[first].containing_oneof is oneof:
                siblings.append(sibling.name)
        self.problem(node, path, "set %s, not both" % " or ".join(siblings))
        return True

    def _scalar(self, node: _Node, path: str, expected: str) -> Optional[str]:
        if node.kind == "null":
            return None
        if node.kind == "scalar":
            return node.value
        self.problem(node, path, "expected %s, got %s" % (expected, _describe(node)))
        return None

    def _integer(self, node: _Node, path: str, lo: int, hi: int) -> Optional[int]:
        text = self._scalar(node, path, "an integer")
        if text is None:
            return None
        if not _INTEGER.match(text):
            self.problem(node, path, "expected an integer, got " + _quote(text))
            return None
        value = int(text)
        if not lo <= value <= hi:
            self.problem(node, path, "out of range [%d, %d], got %s" % (lo, hi, text))
            return None
        return value

    def _number(self, node: _Node, path: str, text: str, expected: str) -> Optional[float]:
        value, overflow = _parse_number(text)
        if value is None:
            self.problem(node, path, "%s, got %s" % (expected, _quote(text)))
            return None
        if overflow:
            self.problem(node, path, "out of range for a double, got " + text)
            return None
        return value

    def read_key(self, key: Key, node: _Node, path: str, parent: _message.Message) -> None:
        def store(value: Any) -> None:
            if self._oneof_taken(key, node, path, parent):
                return
            holder, name = self._holder(key, parent)
            setattr(holder, name, value)

        kind = key.kind
        if kind == MAPPING:
            if node.kind == "null":
                return
            if node.kind != "map":
                self.problem(node, path, "expected a mapping, got " + _describe(node))
                return
            if self._oneof_taken(key, node, path, parent):
                return
            holder, name = self._holder(key, parent)
            child = getattr(holder, name)
            child.SetInParent()
            self.read_mapping(node, path, key.key, child)
        elif kind == STRING:
            text = self._scalar(node, path, "a string")
            if text is not None:
                store(text)
        elif kind in (INT32, INT64):
            bits = 31 if kind == INT32 else 63
            value = self._integer(node, path, -(1 << bits), (1 << bits) - 1)
            if value is not None:
                store(value)
        elif kind == UINT64:
            value = self._integer(node, path, 0, (1 << 64) - 1)
            if value is not None:
                store(value)
        elif kind == NUMBER:
            text = self._scalar(node, path, "a number")
            if text is not None:
                value = self._number(node, path, text, "expected a number")
                if value is not None:
                    store(value)
        elif kind == SECONDS_OR_AUTO:
            text = self._scalar(node, path, "auto or a number of seconds")
            if text is not None:
                if text.lower() == "auto":
                    store(0.0)
                else:
                    value = self._number(node, path, text, "expected auto or a number of seconds")
                    if value is not None:
                        store(value)
        elif kind == NEGATED_BOOL:
            text = self._scalar(node, path, "true or false")
            if text is not None:
                if text.lower() in ("true", "false"):
                    store(text.lower() != "true")
                else:
                    self.problem(node, path, "expected true or false, got " + _quote(text))
        elif kind == ENUM:
            expected = " or ".join(n for n, _ in key.names)
            text = self._scalar(node, path, expected)
            if text is not None:
                number = dict(key.names).get(text.lower())
                if number is None:
                    self.problem(node, path, "expected %s, got %s" % (expected, _quote(text)))
                else:
                    store(number)
        elif kind == ARGV:
            self._read_argv(key, node, path, parent)
        elif kind == STRING_MAP:
            self._read_string_map(key, node, path, parent)

    def _read_argv(self, key: Key, node: _Node, path: str, parent: _message.Message) -> None:
        if node.kind == "null":
            return
        if node.kind != "seq":
            hint = ""
            if node.kind == "scalar":
                hint = " (write it as [%s])" % ", ".join(w for w in re.split(r"[ \t]", node.value) if w)
            self.problem(node, path,
                         "expected a list of strings (argv), got %s%s" % (_describe(node), hint))
            return
        if self._oneof_taken(key, node, path, parent):
            return
        holder, name = self._holder(key, parent)
        holder.SetInParent()
        argv = getattr(holder, name)
        for index, element in enumerate(node.value):
            if element.kind == "null":
                argv.append("")
                continue
            text = self._scalar(element, "%s[%d]" % (path, index), "a string")
            if text is not None:
                argv.append(text)

    def _read_string_map(self, key: Key, node: _Node, path: str,
                         parent: _message.Message) -> None:
        if node.kind == "null":
            return
        if node.kind != "map":
            self.problem(node, path, "expected a mapping, got " + _describe(node))
            return
        holder, name = self._holder(key, parent)
        target = getattr(holder, name)
        seen = {}
        for key_node, value in node.value:
            if key_node.kind != "scalar":
                self.problem(key_node, path, "expected a variable name, got " + _describe(key_node))
                continue
            var = key_node.value
            var_path = path + "." + var
            if var in seen:
                first = seen[var]
                self.problem(key_node, var_path, "duplicate key (first at line %s)" %
                             (first.line + 1 if first.line is not None else "?"))
                continue
            seen[var] = key_node
            if value.kind == "null":
                target[var] = ""
                continue
            text = self._scalar(_Node(value.kind, value.value, key_node.line, key_node.column),
                                var_path, "a string")
            if text is not None:
                target[var] = text


def read_job(source: Any, filename: str, spec: _message.Message) -> List[str]:
    """Reads ``source`` (a dict, or a PyYAML composed node) into ``spec`` (an empty JobSpec).

    Returns the problems, one line each, "FILENAME[:LINE:COLUMN]: FIELD: what"; empty when the
    spec was read whole.
    """
    root = source if isinstance(source, _Node) else _from_python(source)
    reader = _Reader(filename, spec)
    reader.read_job(root)
    return reader.problems


def read_job_yaml(text: str, filename: str, spec: _message.Message) -> List[str]:
    """Reads a job file's text into ``spec``; returns the problems (as ``read_job``)."""
    import yaml  # python3-yaml

    try:
        documents = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = filename + ": "
        if mark is not None:
            where = "%s:%d:%d: " % (filename, mark.line + 1, mark.column + 1)
        return [where + "invalid YAML: " + str(getattr(e, "problem", None) or e)]
    documents = [d for d in documents if d is not None]
    if not documents or (len(documents) == 1 and documents[0].tag == "tag:yaml.org,2002:null"):
        return [filename + ": empty job file (expected keys such as name, nodes, trainer)"]
    if len(documents) > 1:
        mark = documents[1].start_mark
        return ["%s:%d:%d: a job file holds one YAML document, found %d" %
                (filename, mark.line + 1, mark.column + 1, len(documents))]
    reader = _Reader(filename, spec)
    reader.read_job(_from_yaml(documents[0]))
    return reader.problems


def outline_keys(outline: Sequence[str]) -> List[str]:
    """The dotted keys of a key outline as ctl/job_yaml.h lists them ("//  name (string): ...",
    indented two spaces per level). For the test that keeps KEYS in step with ringctl's table."""
    keys: List[str] = []
    stack: List[str] = []
    for line in outline:
        body = line.lstrip(" ")
        depth = (len(line) - len(body)) // 2 - 1
        name = body.split(" ", 1)[0]
        stack = stack[:depth] + [name]
        keys.append(".".join(stack))
    return keys
