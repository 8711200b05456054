// deploy/k8s without a cluster: every overlay renders with `kubectl kustomize`, every object
// passes its schema strictly (schemas.js), and the objects agree with each other: Services,
// monitors, network policies and probes name ports that exist, accounts have no API access,
// Secrets are the ones make-secrets creates, agents get what NCCL and the Downward API wiring
// need, and the dashboards ConfigMap holds exactly dashboards/*.json.
"use strict";
const fs = require("fs");
const path = require("path");
const lib = require("./lib");
const { assert, podTemplates, selects } = lib;
const { validateStrict } = require("./schemas");
const { containerArgv, containerEnv, parseFlags, resolvePort } = require("./pods");

const checks = new lib.Checks("deploy.k8s.manifests");

function byKind(objects, kind) {
  return objects.filter((o) => o.kind === kind);
}

function name(o) {
  return `${o.kind} ${o.metadata.name}`;
}

// Pod templates selected by a label selector ({matchLabels}) in the same namespace.
function selectedPods(objects, matchLabels, namespace) {
  return podTemplates(objects).filter(
    (p) => p.object.metadata.namespace === namespace && selects(matchLabels, p.labels),
  );
}

function checkNamespaces(objects) {
  const namespaces = byKind(objects, "Namespace").map((n) => n.metadata.name);
  assert(namespaces.length === 1, `expected one Namespace, found ${namespaces.join(", ")}`);
  for (const o of objects) {
    if (["Namespace", "ClusterRole", "ClusterRoleBinding"].includes(o.kind)) continue;
    assert(
      o.metadata.namespace === namespaces[0],
      `${name(o)} is in namespace ${o.metadata.namespace}, not ${namespaces[0]}`,
    );
  }
}

function checkAccounts(objects) {
  const accounts = new Map(byKind(objects, "ServiceAccount").map((a) => [a.metadata.name, a]));
  for (const { object, spec } of podTemplates(objects)) {
    const account = accounts.get(spec.serviceAccountName);
    assert(
      account,
      `${name(object)} runs as "${spec.serviceAccountName}", not an account defined here`,
    );
    assert(
      spec.automountServiceAccountToken === false && account.automountServiceAccountToken === false,
      `${name(object)}: its API token must not be mounted (automountServiceAccountToken: false)`,
    );
  }
  for (const b of [...byKind(objects, "RoleBinding"), ...byKind(objects, "ClusterRoleBinding")]) {
    for (const s of b.subjects || []) {
      assert(
        !(s.kind === "ServiceAccount" && accounts.has(s.name)),
        `${name(b)} grants API access to ${s.name}, which needs none`,
      );
    }
    const role = objects.find(
      (o) => o.kind === b.roleRef.kind && o.metadata.name === b.roleRef.name,
    );
    assert(role, `${name(b)} refers to ${b.roleRef.kind} ${b.roleRef.name}, not defined here`);
    for (const rule of role.rules) {
      const extra = rule.verbs.filter((v) => !["get", "list", "watch"].includes(v));
      assert(extra.length === 0, `${name(role)} allows ${extra.join(", ")}: read-only expected`);
      assert(
        ![...rule.resources, ...rule.apiGroups].includes("*"),
        `${name(role)} uses a wildcard`,
      );
    }
  }
}

function checkServices(objects) {
  for (const svc of byKind(objects, "Service")) {
    const pods = selectedPods(objects, svc.spec.selector, svc.metadata.namespace);
    assert(pods.length > 0, `${name(svc)} selects no pods`);
    for (const port of svc.spec.ports) {
      for (const p of pods) {
        assert(
          resolvePort(p.spec.containers, port.targetPort) !== undefined,
          `${name(svc)} port ${port.name}: targetPort ${port.targetPort} is not a port of ${name(p.object)}`,
        );
      }
    }
  }
  for (const sts of byKind(objects, "StatefulSet")) {
    const svc = byKind(objects, "Service").find((s) => s.metadata.name === sts.spec.serviceName);
    assert(
      svc && svc.spec.clusterIP === "None",
      `${name(sts)}: serviceName must be a headless Service here`,
    );
    const mounts = sts.spec.template.spec.containers
      .flatMap((c) => c.volumeMounts || [])
      .map((m) => m.name);
    for (const claim of sts.spec.volumeClaimTemplates || []) {
      assert(
        mounts.includes(claim.metadata.name),
        `${name(sts)}: claim ${claim.metadata.name} is not mounted`,
      );
    }
  }
}

function checkMonitors(objects) {
  for (const sm of byKind(objects, "ServiceMonitor")) {
    const services = byKind(objects, "Service").filter(
      (s) =>
        s.metadata.namespace === sm.metadata.namespace &&
        selects(sm.spec.selector.matchLabels, s.metadata.labels || {}),
    );
    for (const ep of sm.spec.endpoints) {
      const withPort = services.filter((s) => s.spec.ports.some((p) => p.name === ep.port));
      assert(
        withPort.length === 1,
        `${name(sm)}: port "${ep.port}" must be on exactly one selected Service, ` +
          `found ${withPort.length} (${withPort.map((s) => s.metadata.name).join(", ")})`,
      );
    }
  }
  for (const pm of byKind(objects, "PodMonitor")) {
    const pods = selectedPods(objects, pm.spec.selector.matchLabels, pm.metadata.namespace);
    assert(pods.length > 0, `${name(pm)} selects no pods`);
    for (const ep of pm.spec.podMetricsEndpoints) {
      for (const p of pods) {
        assert(
          resolvePort(p.spec.containers, ep.port) !== undefined,
          `${name(pm)}: no port "${ep.port}" on ${name(p.object)}`,
        );
      }
    }
  }
}

function checkNetworkPolicies(objects) {
  for (const np of byKind(objects, "NetworkPolicy")) {
    const ns = np.metadata.namespace;
    const pods = selectedPods(objects, np.spec.podSelector.matchLabels, ns);
    assert(pods.length > 0, `${name(np)} selects no pods`);
    for (const rule of np.spec.ingress || []) {
      for (const port of rule.ports || []) {
        for (const p of pods) {
          assert(
            resolvePort(p.spec.containers, port.port) !== undefined,
            `${name(np)}: ingress port ${port.port} is not on ${name(p.object)}`,
          );
        }
      }
    }
    for (const rule of np.spec.egress || []) {
      const targets = (rule.to || [])
        .filter((t) => t.podSelector && !t.namespaceSelector)
        .flatMap((t) => selectedPods(objects, t.podSelector.matchLabels, ns));
      for (const port of rule.ports || []) {
        for (const p of targets) {
          assert(
            resolvePort(p.spec.containers, port.port) !== undefined,
            `${name(np)}: egress port ${port.port} is not on ${name(p.object)}`,
          );
        }
      }
    }
  }
}

// A probe is a gRPC health check when it is the kubelet's grpc probe or runs `ringctl ... health`
// (which calls grpc.health.v1.Health/Check).
function isGrpcHealth(probe) {
  if (probe.grpc) return true;
  const argv = probe.exec ? probe.exec.command : [];
  return (
    /(^|\/)ringctl$/.test(argv[0] || "") &&
    parseFlags(argv.slice(1)).positional.join(" ") === "health"
  );
}

function checkProbes(objects) {
  for (const { object, spec } of podTemplates(objects)) {
    for (const c of spec.containers) {
      assert(
        c.livenessProbe && c.readinessProbe,
        `${name(object)}/${c.name}: needs liveness and readiness probes`,
      );
      assert(
        isGrpcHealth(c.livenessProbe),
        `${name(object)}/${c.name}: liveness must check grpc.health.v1`,
      );
      if (object.kind === "StatefulSet") {
        assert(
          isGrpcHealth(c.readinessProbe),
          `${name(object)}/${c.name}: readiness must check grpc.health.v1`,
        );
      }
      for (const probe of [c.startupProbe, c.livenessProbe, c.readinessProbe].filter(Boolean)) {
        const port = (probe.grpc || probe.httpGet || probe.tcpSocket || {}).port;
        if (port !== undefined) {
          assert(
            resolvePort([c], port) !== undefined,
            `${name(object)}/${c.name}: probe port ${port} is not a container port`,
          );
        }
      }
    }
  }
}

function checkSecrets(objects, made) {
  for (const { object, spec } of podTemplates(objects)) {
    for (const v of (spec.volumes || []).filter((v) => v.secret)) {
      const secret = made.find((s) => s.metadata.name === v.secret.secretName);
      assert(
        secret,
        `${name(object)}: Secret ${v.secret.secretName} is not one make-secrets creates`,
      );
      for (const c of spec.containers) {
        const mount = (c.volumeMounts || []).find((m) => m.name === v.name);
        if (!mount) continue;
        const probes = [c.startupProbe, c.livenessProbe, c.readinessProbe].filter(
          (p) => p && p.exec,
        );
        const files = [
          ...containerArgv(c, object),
          ...Object.values(containerEnv(c, object)),
          ...probes.flatMap((p) => p.exec.command),
        ]
          .flatMap((a) => a.split(/[=,]/))
          .filter((a) => a.startsWith(mount.mountPath + "/"));
        assert(
          files.length > 0,
          `${name(object)}/${c.name} mounts ${v.name} but reads nothing from it`,
        );
        for (const f of files) {
          const key = f.slice(mount.mountPath.length + 1);
          assert(
            key in secret.data,
            `${name(object)}/${c.name} reads ${f}, but Secret ${secret.metadata.name} has no key ${key}`,
          );
        }
      }
    }
  }
}

function checkAgents(objects) {
  const agents = byKind(objects, "DaemonSet");
  assert(agents.length > 0, "no agent DaemonSet");
  for (const ds of agents) {
    const spec = ds.spec.template.spec;
    const c = spec.containers.find((x) => /(^|\/)ringmaster-agent$/.test(x.command[0]));
    assert(c, `${name(ds)} runs no ringmaster-agent`);
    const { flags } = parseFlags(containerArgv(c, ds));
    for (const [flag, value] of Object.entries(flags)) {
      assert(
        !/\$\(/.test(String(value)),
        `${name(ds)}: --${flag}=${value} refers to an undefined variable`,
      );
    }
    if (spec.hostNetwork) {
      assert(
        spec.dnsPolicy === "ClusterFirstWithHostNet",
        `${name(ds)}: host network needs dnsPolicy ClusterFirstWithHostNet to resolve the coordinator`,
      );
    }
    const nodeEnv = (c.env || []).find((e) => (c.args || []).includes(`--node_name=$(${e.name})`));
    assert(
      nodeEnv && nodeEnv.valueFrom.fieldRef.fieldPath === "spec.nodeName",
      `${name(ds)}: --node_name must come from spec.nodeName`,
    );
    const shm = (c.volumeMounts || []).find((m) => m.mountPath === "/dev/shm");
    const shmVolume = shm && spec.volumes.find((v) => v.name === shm.name);
    assert(
      shmVolume && shmVolume.emptyDir && shmVolume.emptyDir.medium === "Memory",
      `${name(ds)}: /dev/shm must be a Memory emptyDir`,
    );
    const gpus = ((c.resources || {}).limits || {})["nvidia.com/gpu"];
    assert(
      (flags.devices === "gpu") === (gpus !== undefined),
      `${name(ds)}: --devices=${flags.devices} and nvidia.com/gpu limit ${gpus} disagree`,
    );
  }
}

async function checkDashboards(overlayObjects) {
  const YAML = lib.requirePackage("yaml");
  const json = fs
    .readdirSync("dashboards")
    .filter((f) => f.endsWith(".json"))
    .sort();
  const kustomization = YAML.parse(fs.readFileSync("dashboards/kustomization.yaml", "utf8"));
  const generator = kustomization.configMapGenerator.find(
    (g) => g.name === "ringmaster-dashboards",
  );
  const listed = (generator.files || []).slice().sort();
  await checks.check(
    `dashboards: kustomization lists dashboards/*.json (${json.length} files)`,
    () => {
      const missing = json.filter((f) => !listed.includes(f));
      assert(
        missing.length === 0,
        `add to dashboards/kustomization.yaml under files: ${missing.map((f) => `- ${f}`).join(", ")}`,
      );
      const extra = listed.filter((f) => !json.includes(f));
      assert(
        extra.length === 0,
        `dashboards/kustomization.yaml lists missing files: ${extra.join(", ")}`,
      );
    },
  );
  for (const f of json) {
    await checks.check(`dashboards: ${f} is a dashboard`, () => {
      const d = JSON.parse(fs.readFileSync(path.join("dashboards", f), "utf8"));
      assert(d && typeof d.title === "string" && d.title !== "", `${f} has no title`);
    });
  }
  for (const [overlay, objects] of overlayObjects) {
    const cm = objects.find(
      (o) => o.kind === "ConfigMap" && o.metadata.name === "ringmaster-dashboards",
    );
    if (!cm) continue;
    await checks.check(`dashboards: ${overlay} ConfigMap holds them`, () => {
      assert(cm.metadata.labels.grafana_dashboard === "1", "missing label grafana_dashboard");
      assert(
        JSON.stringify(Object.keys(cm.data || {}).sort()) === JSON.stringify(json),
        `keys ${Object.keys(cm.data || {})}`,
      );
      const bytes = Buffer.byteLength(JSON.stringify(cm));
      assert(bytes < 1000000, `${bytes} bytes: over the 1 MiB object limit; split the ConfigMap`);
    });
  }
}

async function main() {
  lib.requirePackage("kubernetes-models");
  let made = [];
  await checks.check("make-secrets: Secrets render and pass the schema", () => {
    const out = path.join(lib.tmpDir(), "secrets");
    const r = lib.run(["deploy/k8s/make-secrets", "--out", out]);
    assert(r.status === 0, `make-secrets failed: ${r.stderr}`);
    made = lib.parseYamlStream(
      lib.requirePackage("yaml"),
      fs.readFileSync(path.join(out, "secrets.yaml"), "utf8"),
    );
    assert(made.length === 3, `expected 3 Secrets, got ${made.length}`);
    made.forEach(validateStrict);
  });
  const rendered = new Map();
  const overlays = lib.overlayNames();
  await checks.check("overlays: gpu and cpu-dev exist", () => {
    assert(
      overlays.includes("gpu") && overlays.includes("cpu-dev"),
      `found ${overlays.join(", ")}`,
    );
  });
  for (const overlay of overlays) {
    let objects = null;
    await checks.check(`${overlay}: kubectl kustomize renders it`, () => {
      objects = lib.render(overlay);
      assert(objects.length > 0, "rendered nothing");
    });
    if (!objects) continue;
    rendered.set(overlay, objects);
    await checks.check(`${overlay}: every object passes its schema (strict)`, () => {
      const errors = [];
      for (const o of objects) {
        try {
          validateStrict(o);
        } catch (e) {
          errors.push(e.message);
        }
      }
      assert(errors.length === 0, errors.join("\n"));
    });
    await checks.check(`${overlay}: every object is in the Namespace it creates`, () =>
      checkNamespaces(objects),
    );
    await checks.check(`${overlay}: accounts have no API access`, () => checkAccounts(objects));
    await checks.check(`${overlay}: Services select pods and ports`, () => checkServices(objects));
    await checks.check(`${overlay}: monitors find their ports`, () => checkMonitors(objects));
    await checks.check(`${overlay}: network policies name real ports`, () =>
      checkNetworkPolicies(objects),
    );
    await checks.check(`${overlay}: probes check grpc.health.v1 on real ports`, () =>
      checkProbes(objects),
    );
    await checks.check(`${overlay}: mounted Secrets and keys exist`, () =>
      checkSecrets(objects, made),
    );
    await checks.check(`${overlay}: agents' node wiring`, () => checkAgents(objects));
  }
  await checkDashboards(rendered);
  checks.finish();
}

main();
