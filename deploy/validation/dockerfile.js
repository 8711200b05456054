// Reads deploy/docker/Dockerfile far enough to check it: its stages, the Bazel targets built,
// which bazel-bin file becomes which path in which image, and the Debian packages each stage
// installs.
"use strict";
const fs = require("fs");

const DOCKERFILE = "deploy/docker/Dockerfile";

// Instructions with continuation lines joined and comments dropped, grouped by stage.
function parse(text = fs.readFileSync(DOCKERFILE, "utf8")) {
  const joined = text
    .split("\n")
    .filter((l) => !/^\s*#/.test(l))
    .join("\n")
    .replace(/\\\n/g, " ");
  const stages = new Map();
  let stage = null;
  for (const line of joined
    .split("\n")
    .map((l) => l.trim())
    .filter(Boolean)) {
    const from = /^FROM\s+(\S+)(?:\s+AS\s+(\S+))?/i.exec(line);
    if (from) {
      stage = { name: from[2] || `stage${stages.size}`, base: from[1], instructions: [] };
      stages.set(stage.name, stage);
    } else if (stage) {
      stage.instructions.push(line);
    }
  }
  return stages;
}

function runs(stage) {
  return stage.instructions.filter((i) => /^RUN\s/i.test(i)).map((i) => i.replace(/^RUN\s+/i, ""));
}

// Bazel targets built by `bazel build` in any stage.
function bazelTargets(stages) {
  const targets = new Set();
  for (const stage of stages.values()) {
    for (const run of runs(stage)) {
      for (const m of run.matchAll(/bazel build ([^&;]*)/g)) {
        for (const t of m[1].split(/\s+/).filter((w) => w.startsWith("//"))) targets.add(t);
      }
    }
  }
  return targets;
}

// {stage: Map(imagePath -> bazel-bin relative path)} for the files copied into each stage.
function imageFiles(stages) {
  const outs = new Map(); // "/out/NAME" -> bazel-bin relative path
  for (const stage of stages.values()) {
    for (const run of runs(stage)) {
      // cp "$bin/PATH" /out/NAME, with bin=$(bazel info ... bazel-bin)
      for (const m of run.matchAll(/cp "\$bin\/([^"\s]+)" (\/out\/\S+)/g)) outs.set(m[2], m[1]);
    }
  }
  const result = new Map();
  for (const stage of stages.values()) {
    const files = new Map();
    for (const i of stage.instructions) {
      const m = /^COPY\s+--from=\S+\s+(\/out\/\S+)\s+(\/\S+)$/i.exec(i);
      if (!m) continue;
      if (!outs.has(m[1]))
        throw new Error(`${DOCKERFILE}: ${m[1]} is copied but no stage makes it`);
      files.set(m[2], outs.get(m[1]));
    }
    result.set(stage.name, files);
  }
  return result;
}

// Debian packages a stage installs with apt-get install (any branch of a shell conditional).
function aptPackages(stage) {
  const packages = new Set();
  for (const run of runs(stage)) {
    for (const m of run.matchAll(/apt-get install((?:\s+[^\s;&|]+)+)/g)) {
      for (const word of m[1].trim().split(/\s+/)) {
        if (!word.startsWith("-") && word !== "fi") packages.add(word);
      }
    }
  }
  return packages;
}

// The stage an image reference is built from: its last path component, tag removed
// ("registry.example.com/ringmaster/agent:0.1.0" -> "agent").
function stageOfImage(image) {
  return image.split("/").pop().split(/[:@]/)[0];
}

module.exports = { aptPackages, bazelTargets, DOCKERFILE, imageFiles, parse, stageOfImage };
