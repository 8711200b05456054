// deploy/docker/Dockerfile without a container engine: it builds the Bazel targets whose outputs
// the images carry, the manifests' programs (including the agent's --trainer_binary) are in their
// images, and each image installs the Debian package of every shared library its binaries link
// (ldd and dpkg on the binaries built for this test, on the Debian release the images use).
"use strict";
const fs = require("fs");
const path = require("path");
const lib = require("./lib");
const { assert, podTemplates } = lib;
const docker = require("./dockerfile");
const { containerArgv, parseFlags } = require("./pods");

const checks = new lib.Checks("deploy.docker.images");

// Packages every debian:*-slim image has (the C and C++ runtimes, zlib for dpkg).
const BASE_PACKAGES = new Set(["libc6", "libgcc-s1", "libstdc++6", "zlib1g"]);
// Libraries of the CUDA toolkit (not from Debian) and the NVIDIA packages that ship them.
const CUDA_PACKAGES = {
  "libcudart.so.13": "cuda-cudart-13-0",
  "libcublas.so.13": "libcublas-13-0",
  "libcublasLt.so.13": "libcublas-13-0",
  "libnccl.so.2": "libnccl2",
};

// bazel-bin path of a label's binary: //a/b -> a/b/b, //a/b:c -> a/b/c.
function outputOf(label) {
  const [pkg, name] = label.slice(2).split(":");
  return `${pkg}/${name || pkg.split("/").pop()}`;
}

// Spellings of a library's path that dpkg may have recorded (merged /usr).
function spellings(file) {
  const real = fs.realpathSync(file);
  const toggle = (p) => (p.startsWith("/usr/") ? p.slice(4) : `/usr${p}`);
  return [file, real, toggle(file), toggle(real)];
}

// The shared libraries of a binary: [{name, file}] from ldd.
function librariesOf(binary) {
  const r = lib.run(["ldd", binary]);
  assert(r.status === 0, `ldd ${binary}: ${r.stderr}`);
  const libraries = [];
  for (const line of r.stdout.split("\n")) {
    const m = /^\s*(\S+) => (.*?) \(/.exec(line) || /^\s*(\S+) => (not found)/.exec(line);
    if (!m) continue;
    assert(m[2] !== "not found", `${binary}: ${m[1]} not found`);
    libraries.push({ name: m[1], file: m[2] });
  }
  return libraries;
}

// Map(path -> Debian package) for `files`, from one dpkg -S call.
function debianOwners(files) {
  const owners = new Map();
  const r = lib.run(["dpkg", "-S", ...new Set(files.flatMap(spellings))]);
  for (const line of r.stdout.split("\n")) {
    const m = /^([^:,\s]+)(?::\S+)?: (\S+)$/.exec(line);
    if (m) owners.set(m[2], m[1]);
  }
  return owners;
}

// The packages a binary needs: Map(package -> library), without the base image's.
function packagesOf(binary) {
  const libraries = librariesOf(binary);
  const owners = debianOwners(libraries.map((l) => l.file));
  const needed = new Map();
  for (const { name, file } of libraries) {
    const pkg =
      CUDA_PACKAGES[name] ||
      spellings(file)
        .map((p) => owners.get(p))
        .find(Boolean);
    assert(
      pkg,
      `${binary}: no known package ships ${name} (${file}); add it to CUDA_PACKAGES or install it`,
    );
    if (!BASE_PACKAGES.has(pkg)) needed.set(pkg, name);
  }
  return needed;
}

async function main() {
  const stages = docker.parse();
  const files = docker.imageFiles(stages);
  const built = docker.bazelTargets(stages);

  await checks.check("Dockerfile: builds what the images copy", () => {
    const outputs = new Map([...built].map((t) => [outputOf(t), t]));
    for (const [stage, map] of files) {
      for (const [imagePath, output] of map) {
        assert(
          outputs.has(output),
          `stage ${stage}: ${imagePath} is bazel-bin/${output}, which no bazel build makes`,
        );
      }
    }
    for (const t of ["//coordinator", "//agent", "//ctl:ringctl", "//trainer"]) {
      assert(built.has(t), `${t} is not built (built: ${[...built].join(" ")})`);
    }
  });

  await checks.check(
    "Dockerfile: images use the Debian release the build and this test use",
    () => {
      const text = fs.readFileSync(docker.DOCKERFILE, "utf8");
      const debian = /^ARG DEBIAN=debian:(\w+)/m.exec(text);
      assert(debian, "no ARG DEBIAN=debian:RELEASE");
      const release = /^VERSION_CODENAME=(\w+)/m.exec(fs.readFileSync("/etc/os-release", "utf8"));
      assert(
        release && debian[1].startsWith(release[1]),
        `images use ${debian[1]}, this machine ${release && release[1]}: package names differ`,
      );
      for (const stage of stages.values()) {
        assert(
          stage.base === "${DEBIAN}" || stages.has(stage.base),
          `stage ${stage.name} starts FROM ${stage.base}`,
        );
      }
    },
  );

  for (const overlay of lib.overlayNames()) {
    await checks.check(`${overlay}: programs the manifests run are in their images`, () => {
      for (const { object } of podTemplates(lib.render(overlay))) {
        for (const c of object.spec.template.spec.containers) {
          const map = files.get(docker.stageOfImage(c.image));
          assert(map, `${c.image}: no Dockerfile stage ${docker.stageOfImage(c.image)}`);
          const programs = [
            c.command[0],
            ...[c.startupProbe, c.livenessProbe, c.readinessProbe]
              .filter((p) => p && p.exec)
              .map((p) => p.exec.command[0]),
          ];
          const trainer = parseFlags(containerArgv(c, object)).flags.trainer_binary;
          if (trainer) {
            programs.push(trainer);
            assert(
              map.get(trainer) === outputOf("//trainer"),
              `${c.image}: --trainer_binary=${trainer} is not //trainer's output`,
            );
          }
          for (const p of programs) assert(map.has(p), `${c.image} has no ${p}`);
        }
      }
    });
  }

  for (const [stage, map] of files) {
    const installed = docker.aptPackages(stages.get(stage));
    for (const [imagePath, output] of map) {
      await checks.check(`image ${stage}: installs the runtime packages of ${imagePath}`, () => {
        assert(fs.existsSync(output), `${output} is not among the test's data`);
        const missing = [...packagesOf(output)].filter(([pkg]) => !installed.has(pkg));
        assert(
          missing.length === 0,
          `add to stage ${stage}'s apt-get install: ${missing.map(([p, l]) => `${p} (${l})`).join(", ")}`,
        );
      });
    }
  }
  checks.finish();
}

main();
