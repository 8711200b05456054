// The manifests against the real binaries. For every overlay:
//  - every flag in a container's args and exec probes is one the binary lists in --helpfull
//    (the binary is found through the image: deploy/docker/Dockerfile maps image paths to
//    bazel-bin files), with a value where it needs one;
//  - the ports of --listen/--metrics_listen are the container ports that Services, probes and
//    monitors name, and servers do not bind loopback only;
//  - the coordinator and the agent run with their manifest's flags: volumes become directories
//    under $TEST_TMPDIR, Secrets hold make-secrets' material, the Downward API gives stand-in
//    values (pods.js); only addresses are rebound to 127.0.0.1:0 and GPUs replaced by CPU slots.
//    Every probe is run as the kubelet would (exec, gRPC health, HTTP GET) and must pass, and the
//    agent must register with the coordinator under its node's name (ringctl nodes).
"use strict";
const fs = require("fs");
const path = require("path");
const lib = require("./lib");
const { assert, podTemplates } = lib;
const docker = require("./dockerfile");
const {
  containerArgv,
  expand,
  containerEnv,
  FIELD_VALUES,
  hostPort,
  parseFlags,
  resolvePort,
} = require("./pods");
const { httpGet, Process, waitFor } = require("./processes");

// Server addresses of each binary: container port name -> the flag that binds it.
const SERVER_PORTS = {
  "ringmaster-coordinator": { grpc: "listen", metrics: "metrics_listen" },
  "ringmaster-agent": { metrics: "metrics_listen" },
};
// Lines the binaries log once a server is up (tools/cluster reads the same ones).
const READY_LINES = {
  "ringmaster-coordinator": {
    grpc: /coordinator gRPC listening on \S+:(\d+)/,
    metrics: /coordinator metrics listening on \S+:(\d+)/,
  },
  "ringmaster-agent": { metrics: /agent metrics listening on \S+:(\d+)/ },
};

const checks = new lib.Checks("deploy.k8s.binaries");
const stages = docker.parse();
const imageFiles = docker.imageFiles(stages);

// The runfile of the program an image runs at `imagePath`.
function binaryFor(image, imagePath) {
  const files = imageFiles.get(docker.stageOfImage(image));
  assert(files, `image ${image}: no Dockerfile stage "${docker.stageOfImage(image)}"`);
  assert(
    files.has(imagePath),
    `image ${image} has no ${imagePath} (Dockerfile stage ${docker.stageOfImage(image)})`,
  );
  const runfile = path.resolve(files.get(imagePath));
  assert(
    fs.existsSync(runfile),
    `${files.get(imagePath)} (for ${imagePath}) is not among the test's data`,
  );
  return runfile;
}

const helpCache = new Map();
// Flags a binary accepts: Map(name -> {bool}) from `--helpfull`.
function helpFlags(binary) {
  if (!helpCache.has(binary)) {
    const r = lib.run([binary, "--helpfull"]);
    const flags = new Map();
    for (const entry of (r.stdout + r.stderr).split(/\n(?=    --)/)) {
      const m = /^    --([A-Za-z0-9_]+) \([\s\S]*default: ([^;]*);/.exec(entry);
      if (m) flags.set(m[1], { bool: m[2] === "true" || m[2] === "false" });
    }
    assert(flags.size > 0, `${binary} --helpfull listed no flags`);
    helpCache.set(binary, flags);
  }
  return helpCache.get(binary);
}

function checkFlags(argv, binary, what) {
  const known = helpFlags(binary);
  for (const [flag, value] of Object.entries(parseFlags(argv.slice(1)).flags)) {
    assert(known.has(flag), `${what}: --${flag} is not a flag of ${path.basename(binary)}`);
    if (known.get(flag).bool) {
      assert(
        [true, "true", "false"].includes(value),
        `${what}: --${flag}=${value}: a boolean flag`,
      );
    } else {
      assert(value !== true && value !== "", `${what}: --${flag} needs a value`);
    }
  }
}

function execProbes(c) {
  return [c.startupProbe, c.livenessProbe, c.readinessProbe].filter((p) => p && p.exec);
}

function staticChecks(objects) {
  for (const { object } of podTemplates(objects)) {
    for (const c of object.spec.template.spec.containers) {
      const what = `${object.kind} ${object.metadata.name}/${c.name}`;
      const binary = binaryFor(c.image, c.command[0]);
      checkFlags([...c.command, ...(c.args || [])], binary, what);
      for (const p of execProbes(c))
        checkFlags(p.exec.command, binaryFor(c.image, p.exec.command[0]), `${what} probe`);
      const servers = SERVER_PORTS[path.basename(c.command[0])] || {};
      const { flags } = parseFlags(c.args || []);
      for (const port of c.ports || []) {
        const flag = servers[port.name];
        assert(
          flag,
          `${what}: port ${port.name} is served by no flag of ${path.basename(c.command[0])}`,
        );
        assert(
          typeof flags[flag] === "string",
          `${what}: port ${port.name} needs --${flag} (the default binds loopback)`,
        );
        const address = hostPort(flags[flag]);
        assert(
          address.port === port.containerPort,
          `${what}: --${flag}=${flags[flag]} but port ${port.name} is ${port.containerPort}`,
        );
        assert(
          !["127.0.0.1", "localhost", "::1"].includes(address.host),
          `${what}: --${flag}=${flags[flag]} is unreachable from outside the pod`,
        );
      }
    }
  }
}

// A container of a rendered workload, made runnable on this machine.
class LiveContainer {
  constructor(overlay, object, secrets) {
    this.object = object;
    this.spec = object.spec.template.spec;
    this.c = this.spec.containers.find((c) => path.basename(c.command[0]) in READY_LINES);
    assert(this.c, `${object.kind} ${object.metadata.name} runs no Ringmaster server`);
    this.name = path.basename(this.c.command[0]);
    const real = path.join(lib.tmpDir(), overlay, this.name);
    fs.mkdirSync(real, { recursive: true });
    // Unix socket paths are limited to 107 bytes and $TEST_TMPDIR is long: a short link to it.
    const link = fs.mkdtempSync("/tmp/rmk8s-");
    LiveContainer.links.push(link);
    fs.symlinkSync(real, path.join(link, "r"));
    this.root = path.join(link, "r");
    this.real = real;
    this.mounts = (this.c.volumeMounts || [])
      .map((m) => m.mountPath)
      .sort((a, b) => b.length - a.length);
    for (const m of this.c.volumeMounts || []) {
      const dir = this.root + m.mountPath;
      fs.mkdirSync(dir, { recursive: true });
      const v = (this.spec.volumes || []).find((x) => x.name === m.name);
      if (v && v.secret) {
        const s = secrets.find((x) => x.metadata.name === v.secret.secretName);
        assert(s, `Secret ${v.secret.secretName} is not one make-secrets creates`);
        for (const [key, b64] of Object.entries(s.data))
          fs.writeFileSync(path.join(dir, key), Buffer.from(b64, "base64"), { mode: 0o600 });
      }
    }
    this.env = containerEnv(this.c, object);
    this.ports = {}; // port name -> {manifest, actual}
  }

  // An argument with container paths moved under the root.
  mapPaths(arg) {
    if (this.mounts.length === 0) return arg;
    const alternatives = this.mounts.map((m) => m.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).join("|");
    return arg.replace(new RegExp(`(^|[=:,])(${alternatives})(?=/|$)`, "g"), `$1${this.root}$2`);
  }

  argv(rewrite) {
    const servers = SERVER_PORTS[this.name] || {};
    const flagOf = Object.fromEntries(Object.entries(servers).map(([port, flag]) => [flag, port]));
    return containerArgv(this.c, this.object).map((arg, i) => {
      if (i === 0) return binaryFor(this.c.image, arg);
      const m = /^--([a-z_]+)=(.*)$/.exec(arg);
      if (m && flagOf[m[1]]) {
        this.ports[flagOf[m[1]]] = { manifest: hostPort(m[2]).port };
        return `--${m[1]}=127.0.0.1:0`;
      }
      return (rewrite && rewrite(arg)) || this.mapPaths(arg);
    });
  }

  async start(rewrite) {
    this.process = new Process(this.argv(rewrite), `${this.real}.log`);
    for (const [port, regex] of Object.entries(READY_LINES[this.name])) {
      this.ports[port].actual = Number((await this.process.waitForLine(regex))[1]);
    }
  }

  // Runs every probe as the kubelet would; throws naming the first that fails.
  async probe(ringctl) {
    for (const kind of ["startupProbe", "livenessProbe", "readinessProbe"]) {
      const p = this.c[kind];
      if (!p) continue;
      const what = `${this.name} ${kind}`;
      if (p.exec) {
        const argv = p.exec.command
          .map((a, i) =>
            i === 0 ? binaryFor(this.c.image, a) : this.mapPaths(expand(a, this.env)),
          )
          .map((a) =>
            a.replace(/^(--coordinator=(?:localhost|127\.0\.0\.1)):(\d+)$/, (all, prefix, port) => {
              const named = Object.values(this.ports).find((x) => x.manifest === Number(port));
              assert(named, `${what}: ${all} is not a port this container serves`);
              return `${prefix}:${named.actual}`;
            }),
          );
        const r = lib.run(argv, { timeout: (p.timeoutSeconds || 1) * 1000 });
        assert(
          r.status === 0,
          `${what} (${p.exec.command.join(" ")}) failed: ${r.stdout}${r.stderr}`,
        );
      } else if (p.grpc) {
        const port = this.portNamed(p.grpc.port, "grpc", what);
        assert(!p.grpc.service, `${what}: the test only checks the whole server (service "")`);
        // The kubelet's gRPC probe: plaintext grpc.health.v1.Health/Check.
        const r = lib.run([
          ringctl,
          "--insecure",
          `--coordinator=127.0.0.1:${port}`,
          "--timeout=5",
          "health",
        ]);
        assert(
          r.status === 0,
          `${what} (kubelet gRPC probe on ${p.grpc.port}) failed: ${r.stderr}`,
        );
      } else if (p.httpGet) {
        const port = this.portNamed(p.httpGet.port, "metrics", what);
        // The kubelet probes again every periodSeconds: a readiness that comes with registering
        // with the coordinator (the agent's /readyz) may take a moment.
        let r = await httpGet('127.0.0.1', port, p.httpGet.path);
        if (kind === 'readinessProbe') {
          r = await waitFor(
              async () => {
                const got = await httpGet('127.0.0.1', port, p.httpGet.path);
                return got.status >= 200 && got.status < 400 ? got : null;
              },
              30,
              `${what}: GET ${p.httpGet.path} (last: ${r.status} ${r.body})`,
          );
        }
        assert(
          r.status >= 200 && r.status < 400,
          `${what}: GET ${p.httpGet.path} answered ${r.status}`,
        );
      } else {
        throw new Error(`${what}: only exec, grpc and httpGet probes are checked`);
      }
    }
  }

  // The actual port of the container port `port` (name or number), which must be `expected`.
  portNamed(port, expected, what) {
    const number = resolvePort([this.c], port);
    const name = (this.c.ports || []).find((p) => p.containerPort === number);
    assert(name && name.name === expected, `${what}: port ${port} is not the ${expected} port`);
    return this.ports[expected].actual;
  }
}
LiveContainer.links = [];
process.on("exit", () =>
  LiveContainer.links.forEach((l) => fs.rmSync(l, { recursive: true, force: true })),
);

async function liveChecks(overlay, objects, secretsDir, secrets) {
  const coordinatorObject = objects.find((o) => o.kind === "StatefulSet");
  const agentObject = objects.find((o) => o.kind === "DaemonSet");
  const coordinator = new LiveContainer(overlay, coordinatorObject, secrets);
  const agent = new LiveContainer(overlay, agentObject, secrets);
  const ringctl = path.resolve("ctl/ringctl");
  const coordinatorFlags = parseFlags(coordinator.c.args || []).flags;
  const tls = coordinatorFlags.insecure === undefined;
  const client = tls
    ? [
        `--tls_ca=${secretsDir}/ca.crt`,
        `--tls_cert=${secretsDir}/user.crt`,
        `--tls_key=${secretsDir}/user.key`,
        `--token=${fs.readFileSync(`${secretsDir}/tokens`, "utf8").split(" ")[0]}`,
      ]
    : ["--insecure"];
  try {
    await checks.check(
      `${overlay}: coordinator runs with its manifest's flags; its probes pass`,
      async () => {
        await coordinator.start();
        await coordinator.probe(ringctl);
      },
    );
    await checks.check(
      `${overlay}: agent runs with its manifest's flags, registers as its node; its probes pass`,
      async () => {
        assert(
          coordinator.ports.grpc && coordinator.ports.grpc.actual,
          "the coordinator is not running",
        );
        await agent.start((arg) => {
          if (arg.startsWith("--coordinator=")) {
            const target = hostPort(arg.slice("--coordinator=".length));
            const svc = objects.find(
              (o) =>
                o.kind === "Service" &&
                o.spec.clusterIP !== "None" &&
                `${o.metadata.name}.${o.metadata.namespace}.svc` === target.host,
            );
            assert(
              svc,
              `agent: --coordinator host ${target.host} is not a Service here (NAME.NAMESPACE.svc)`,
            );
            const port = svc.spec.ports.find((p) => p.port === target.port);
            assert(
              port &&
                resolvePort([coordinator.c], port.targetPort) === coordinator.ports.grpc.manifest,
              `agent: --coordinator port ${target.port} does not reach the coordinator's gRPC port`,
            );
            if (tls) {
              const r = lib.run([
                "openssl",
                "verify",
                "-CAfile",
                `${secretsDir}/ca.crt`,
                "-verify_hostname",
                target.host,
                `${secretsDir}/coordinator.crt`,
              ]);
              assert(
                r.status === 0,
                `the coordinator's certificate is not valid for ${target.host}: ${r.stdout}${r.stderr}`,
              );
            }
            return `--coordinator=localhost:${coordinator.ports.grpc.actual}`;
          }
          if (arg === "--devices=gpu") return "--devices=cpu:2"; // No GPU here.
          return null;
        });
        await agent.probe(ringctl);
        const node = FIELD_VALUES["spec.nodeName"];
        await waitFor(
          () => {
            const r = lib.run([
              ringctl,
              ...client,
              `--coordinator=localhost:${coordinator.ports.grpc.actual}`,
              "nodes",
            ]);
            return r.status === 0 && r.stdout.includes(node);
          },
          30,
          `node ${node} in ringctl nodes`,
        );
      },
    );
  } finally {
    await checks.check(`${overlay}: agent and coordinator stop cleanly on SIGTERM`, async () => {
      for (const x of [agent, coordinator]) {
        if (!x.process) continue;
        const exit = await x.process.stop();
        assert(exit.code === 0, `${x.name} exited ${JSON.stringify(exit)}:\n${x.process.tail()}`);
      }
    });
  }
}

async function main() {
  lib.requirePackage("yaml");
  const secretsDir = path.join(lib.tmpDir(), "secrets");
  const r = lib.run(["deploy/k8s/make-secrets", "--out", secretsDir]);
  if (r.status !== 0) lib.fail(`make-secrets: ${r.stderr}`);
  const secrets = lib.parseYamlStream(
    lib.requirePackage("yaml"),
    fs.readFileSync(`${secretsDir}/secrets.yaml`, "utf8"),
  );
  for (const overlay of lib.overlayNames()) {
    let objects = null;
    await checks.check(`${overlay}: renders`, () => {
      objects = lib.render(overlay);
    });
    if (!objects) continue;
    await checks.check(`${overlay}: flags and ports agree with the binaries`, () =>
      staticChecks(objects),
    );
    await liveChecks(overlay, objects, secretsDir, secrets);
  }
  checks.finish();
}

main();
