// Validates Kubernetes objects against the OpenAPI schemas shipped by the npm packages
// `kubernetes-models` (core API) and `@kubernetes-models/prometheus-operator`
// (monitoring.coreos.com: ServiceMonitor, PodMonitor, ...).
//
// Those validators check types, formats, enums and required fields, but accept properties the
// schema does not declare, so a misspelt field (`livenessProbes`) would pass. Strict mode closes
// that gap: the object is validated through a Proxy that records which properties the validator
// reads. Validators read every declared property and enumerate the keys of maps (labels,
// resources); a property of a non-map object that was never read is not in the schema.
"use strict";
const { requirePackage } = require("./lib");

const packages = {
  "monitoring.coreos.com": "@kubernetes-models/prometheus-operator",
};

// The model class for apiVersion/kind; throws if neither package knows it.
function modelFor(apiVersion, kind) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["", apiVersion];
  const pkg = packages[group] || "kubernetes-models";
  const module = group ? `${pkg}/${group}/${version}/${kind}` : `${pkg}/${version}/${kind}`;
  let exports;
  try {
    exports = requirePackage(module);
  } catch (e) {
    throw new Error(`no schema for ${apiVersion} ${kind} (looked for ${module})`);
  }
  if (typeof exports[kind] !== "function") throw new Error(`no model ${kind} in ${module}`);
  return exports[kind];
}

function track(value, where, log) {
  if (value === null || typeof value !== "object") return value;
  let entry = log.get(where);
  if (!entry) {
    entry = { read: new Set(), enumerated: false, value };
    log.set(where, entry);
  }
  return new Proxy(value, {
    get(target, key, receiver) {
      const v = Reflect.get(target, key, receiver);
      if (typeof key !== "string") return v;
      entry.read.add(key);
      return track(v, `${where}/${key}`, log);
    },
    ownKeys(target) {
      entry.enumerated = true;
      return Reflect.ownKeys(target);
    },
  });
}

// Throws an Error listing every schema violation and undeclared property of `object`.
function validateStrict(object) {
  const Model = modelFor(object.apiVersion, object.kind);
  const model = new Model(object);
  const log = new Map();
  const problems = [];
  try {
    model.validate.call(track(model.toJSON(), "", log));
  } catch (e) {
    problems.push(e.message);
  }
  for (const [where, entry] of log) {
    if (Array.isArray(entry.value) || entry.enumerated) continue;
    for (const key of Object.keys(entry.value)) {
      if (!entry.read.has(key)) problems.push(`${where}/${key}: not a field of the schema`);
    }
  }
  if (problems.length > 0) {
    throw new Error(
      `${object.kind} ${object.metadata && object.metadata.name}: ${problems.join("; ")}`,
    );
  }
}

module.exports = { validateStrict };
