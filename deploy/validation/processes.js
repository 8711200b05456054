// Real processes for the binaries test: start one with its output in a log file, wait for a line
// or a condition with a deadline (never a bare sleep), stop it with SIGTERM.
"use strict";
const childProcess = require("child_process");
const fs = require("fs");
const http = require("http");

class Process {
  // Starts argv; stdout and stderr go to `logPath` and are kept for waitForLine.
  constructor(argv, logPath) {
    this.argv = argv;
    this.logPath = logPath;
    this.output = "";
    this.exit = null;
    this.listeners = new Set();
    this.child = childProcess.spawn(argv[0], argv.slice(1), { stdio: ["ignore", "pipe", "pipe"] });
    const log = fs.createWriteStream(logPath);
    const onData = (chunk) => {
      log.write(chunk);
      this.output += chunk.toString();
      this.listeners.forEach((l) => l());
    };
    this.child.stdout.on("data", onData);
    this.child.stderr.on("data", onData);
    this.exited = new Promise((resolve) => {
      this.child.on("exit", (code, signal) => {
        this.exit = { code, signal };
        this.listeners.forEach((l) => l());
        resolve(this.exit);
      });
      this.child.on("error", (e) => {
        this.exit = { code: null, signal: null, error: e.message };
        this.listeners.forEach((l) => l());
        resolve(this.exit);
      });
    });
  }

  // Resolves with the first match of `regex` in the output; rejects if the process exits first
  // or `seconds` pass.
  waitForLine(regex, seconds = 30) {
    return new Promise((resolve, reject) => {
      const done = (f, v) => {
        this.listeners.delete(check);
        clearTimeout(timer);
        f(v);
      };
      const check = () => {
        const m = regex.exec(this.output);
        if (m) return done(resolve, m);
        if (this.exit)
          done(
            reject,
            new Error(
              `${this.argv[0]} exited (${JSON.stringify(this.exit)}) before printing ${regex}:\n${this.tail()}`,
            ),
          );
      };
      const timer = setTimeout(
        () =>
          done(
            reject,
            new Error(`no ${regex} from ${this.argv[0]} within ${seconds} s:\n${this.tail()}`),
          ),
        seconds * 1000,
      );
      this.listeners.add(check);
      check();
    });
  }

  tail() {
    return this.output.split("\n").slice(-8).join("\n");
  }

  // SIGTERM, then the exit status (SIGKILL and an error after `seconds`).
  async stop(seconds = 30) {
    if (!this.exit) this.child.kill("SIGTERM");
    let timer;
    const deadline = new Promise((resolve) => {
      timer = setTimeout(() => resolve(null), seconds * 1000);
    });
    const exit = await Promise.race([this.exited, deadline]);
    clearTimeout(timer);
    if (exit === null) {
      this.child.kill("SIGKILL");
      throw new Error(`${this.argv[0]} ignored SIGTERM for ${seconds} s`);
    }
    return exit;
  }
}

// Calls `condition` (returning a truthy value when met) until it is met or `seconds` pass.
async function waitFor(condition, seconds, what) {
  const deadline = Date.now() + seconds * 1000;
  for (;;) {
    const value = await condition();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${seconds} s waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

// GET http://host:port/path; resolves with {status, body}.
function httpGet(host, port, path) {
  return new Promise((resolve, reject) => {
    const req = http.get({ host, port, path, timeout: 5000 }, (res) => {
      let body = "";
      res.on("data", (c) => {
        body += c;
      });
      res.on("end", () => resolve({ status: res.statusCode, body }));
    });
    req.on("timeout", () => req.destroy(new Error("timed out")));
    req.on("error", reject);
  });
}

module.exports = { httpGet, Process, waitFor };
