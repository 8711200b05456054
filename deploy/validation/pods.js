// What a container of a rendered manifest would run: its environment (Downward API values made
// up for the test), its arguments after the kubelet's $(VAR) expansion, and their flags.
"use strict";

// Values the Downward API would give, for the fields the manifests use.
const FIELD_VALUES = {
  "spec.nodeName": "k8s-node-1",
  "status.hostIP": "127.0.0.1",
  "status.podIP": "127.0.0.1",
};

// The container's environment as the kubelet builds it. Throws for a fieldRef the test cannot
// stand in for, and for valueFrom sources other than fieldRef.
function containerEnv(container, object) {
  const env = {};
  for (const e of container.env || []) {
    if (e.value !== undefined) {
      env[e.name] = expand(e.value, env);
    } else if (e.valueFrom && e.valueFrom.fieldRef) {
      const field = e.valueFrom.fieldRef.fieldPath;
      if (field === "metadata.namespace") {
        env[e.name] = object.metadata.namespace;
      } else if (field in FIELD_VALUES) {
        env[e.name] = FIELD_VALUES[field];
      } else {
        throw new Error(`env ${e.name}: fieldRef ${field} has no stand-in value in pods.js`);
      }
    } else {
      throw new Error(`env ${e.name}: only value and fieldRef are supported`);
    }
  }
  return env;
}

// Kubernetes' $(VAR) expansion: defined variables are replaced, undefined ones stay as written,
// and $$ escapes a dollar.
function expand(text, env) {
  return text.replace(/\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (match, name) => {
    if (match === "$$") return "$";
    return Object.prototype.hasOwnProperty.call(env, name) ? env[name] : match;
  });
}

// The container's argv (command + args) after expansion.
function containerArgv(container, object) {
  const env = containerEnv(container, object);
  return [...(container.command || []), ...(container.args || [])].map((a) => expand(a, env));
}

// Flags of an argv: {name: value} for --name=value, true for a bare --name. Positional
// arguments are returned in `positional`.
function parseFlags(argv) {
  const flags = {};
  const positional = [];
  for (const arg of argv) {
    const m = /^--?([A-Za-z0-9_]+)(?:=(.*))?$/s.exec(arg);
    if (m) {
      flags[m[1]] = m[2] === undefined ? true : m[2];
    } else {
      positional.push(arg);
    }
  }
  return { flags, positional };
}

// Splits HOST:PORT; throws if malformed.
function hostPort(address) {
  const m = /^(.*):(\d+)$/.exec(address);
  if (!m) throw new Error(`"${address}" is not HOST:PORT`);
  return { host: m[1].replace(/^\[(.*)\]$/, "$1"), port: Number(m[2]) };
}

// containerPort of the port named or numbered `port` in `containers`, or undefined.
function resolvePort(containers, port) {
  for (const c of containers) {
    for (const p of c.ports || []) {
      if (p.name === port || p.containerPort === port) return p.containerPort;
    }
  }
  return undefined;
}

module.exports = {
  containerArgv,
  containerEnv,
  expand,
  FIELD_VALUES,
  hostPort,
  parseFlags,
  resolvePort,
};
