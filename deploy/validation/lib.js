// Shared by the deploy/validation tests: the npm packages (failing loudly when tools/setup has not
// installed them), rendering the kustomize overlays, and reporting named checks.
//
// The tests run under Bazel (tagged local) from the runfiles tree. Kustomize refuses files that
// are symlinks out of its root, so the declared runfiles are copied, dereferenced, into
// $TEST_TMPDIR and rendered there: a file missing from the BUILD's data fails the render.
"use strict";
const childProcess = require("child_process");
const crypto = require("crypto");
const fs = require("fs");
const path = require("path");

const validationDir = path.dirname(fs.realpathSync(__filename));
const nodeModules = path.join(validationDir, "node_modules");

// Loads an npm package from deploy/validation/node_modules; exits with a clear failure when the
// packages are missing or do not match package-lock.json.
function requirePackage(name) {
  const stamp = path.join(nodeModules, ".installed-lock-sha256");
  const lock = fs.readFileSync(path.join(validationDir, "package-lock.json"));
  const want = crypto.createHash("sha256").update(lock).digest("hex");
  let have = "";
  try {
    have = fs.readFileSync(stamp, "utf8").trim();
  } catch (e) {
    fail(`the validator's npm packages are not installed (${nodeModules}): run tools/setup`);
  }
  if (have !== want) fail(`${nodeModules} does not match package-lock.json: run tools/setup`);
  return require(require.resolve(name, { paths: [validationDir] }));
}

function fail(message) {
  console.error(`FAIL: ${message}`);
  process.exit(1);
}

function tmpDir() {
  const dir = process.env.TEST_TMPDIR;
  if (!dir) fail("TEST_TMPDIR is not set: run this through bazel test");
  return dir;
}

// Runs a program; returns {status, stdout, stderr}. Throws if it cannot be started.
function run(argv, options = {}) {
  const r = childProcess.spawnSync(argv[0], argv.slice(1), { encoding: "utf8", ...options });
  if (r.error) throw new Error(`cannot run ${argv[0]}: ${r.error.message}`);
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

// Copies the runfiles directories `dirs` (relative to the workspace) into a fresh tree.
let copiedTree = null;
function sourceTree(dirs = ["deploy", "dashboards"]) {
  if (copiedTree) return copiedTree;
  copiedTree = path.join(tmpDir(), "tree");
  for (const d of dirs) {
    fs.cpSync(d, path.join(copiedTree, d), { recursive: true, dereference: true });
  }
  return copiedTree;
}

const overlaysDir = "deploy/k8s/overlays";
function overlayNames() {
  return fs
    .readdirSync(overlaysDir)
    .filter((n) => fs.existsSync(path.join(overlaysDir, n, "kustomization.yaml")))
    .sort();
}

// `kubectl kustomize` of an overlay; returns the objects. Throws with kubectl's message.
function render(overlay) {
  const YAML = requirePackage("yaml");
  const dir = path.join(sourceTree(), overlaysDir, overlay);
  const r = run(["kubectl", "kustomize", dir]);
  if (r.status !== 0) throw new Error(`kubectl kustomize ${overlay} failed: ${r.stderr.trim()}`);
  return parseYamlStream(YAML, r.stdout);
}

function parseYamlStream(YAML, text) {
  return YAML.parseAllDocuments(text)
    .map((doc) => {
      if (doc.errors.length > 0) throw new Error(`YAML: ${doc.errors[0].message}`);
      return doc.toJSON();
    })
    .filter((o) => o !== null);
}

// Named checks, reported one per line and in $XML_OUTPUT_FILE (JUnit) for tools/test's counts.
class Checks {
  constructor(suite) {
    this.suite = suite;
    this.results = [];
  }
  async check(name, fn) {
    try {
      await fn();
      this.results.push({ name });
      console.log(`ok   ${name}`);
    } catch (e) {
      this.results.push({ name, error: e.message });
      console.log(`FAIL ${name}\n     ${e.message.replace(/\n/g, "\n     ")}`);
    }
  }
  // A check that cannot run yet, reported as skipped (never as passed).
  skip(name, reason) {
    this.results.push({ name, skipped: reason });
    console.log(`skip ${name}: ${reason}`);
  }
  finish() {
    const failed = this.results.filter((r) => r.error);
    if (process.env.XML_OUTPUT_FILE) fs.writeFileSync(process.env.XML_OUTPUT_FILE, this.xml());
    const skipped = this.results.filter((r) => r.skipped).length;
    const passed = this.results.length - failed.length - skipped;
    console.log(`${passed} passed, ${failed.length} failed, ${skipped} skipped`);
    process.exit(failed.length > 0 || passed === 0 ? 1 : 0);
  }
  xml() {
    const esc = (s) =>
      s.replace(/[<>&"]/g, (c) => ({ "<": "&lt;", ">": "&gt;", "&": "&amp;", '"': "&quot;" })[c]);
    const cases = this.results.map(
      (r) =>
        `  <testcase name="${esc(r.name)}" classname="${this.suite}">` +
        (r.error ? `<failure message="${esc(r.error)}"/>` : "") +
        (r.skipped ? `<skipped message="${esc(r.skipped)}"/>` : "") +
        "</testcase>",
    );
    const failures = this.results.filter((r) => r.error).length;
    const suite = `name="${this.suite}" tests="${this.results.length}" failures="${failures}"`;
    return (
      `<?xml version="1.0" encoding="UTF-8"?>\n<testsuites><testsuite ${suite}>\n` +
      `${cases.join("\n")}\n</testsuite></testsuites>\n`
    );
  }
}

function assert(condition, message) {
  if (!condition) throw new Error(message);
}

// Pod templates of workload objects: [{object, spec}].
function podTemplates(objects) {
  return objects
    .filter((o) => ["StatefulSet", "DaemonSet", "Deployment"].includes(o.kind))
    .map((o) => ({
      object: o,
      spec: o.spec.template.spec,
      labels: o.spec.template.metadata.labels || {},
    }));
}

function selects(selector, labels) {
  return Object.entries(selector || {}).every(([k, v]) => labels[k] === v);
}

module.exports = {
  assert,
  Checks,
  fail,
  overlayNames,
  parseYamlStream,
  podTemplates,
  render,
  requirePackage,
  run,
  selects,
  sourceTree,
  tmpDir,
};
