// Checks dashboards/*.json against Grafana's own schema: the TypeScript types @grafana/schema
// generates from Grafana's CUE kinds (the dashboard, and each panel plugin's options and field
// config), with the TypeScript compiler. Each dashboard and panel becomes a typed object literal,
// so a misspelt or unknown property, a wrong type or a missing required option is an error.
// Grafana stores enum options as strings in JSON; the schema declares them as TypeScript enums,
// so a copy of the type declarations with each enum turned into the union of its values is
// checked against. A deliberately broken panel must fail the same check (the check can fail).
//
// Run by //tests:grafana_schema_test; tools/setup installs the npm packages (pinned by
// package-lock.json) into node_modules/ beside this file.
"use strict";
const fs = require("fs");
const os = require("os");
const path = require("path");

const here = path.dirname(fs.realpathSync(__filename));
const modules = path.join(here, "node_modules");
if (!fs.existsSync(path.join(modules, "typescript")) ||
    !fs.existsSync(path.join(modules, "@grafana", "schema"))) {
  console.error(`FAIL: npm packages missing in ${modules}: run tools/setup`);
  process.exit(1);
}
const ts = require(path.join(modules, "typescript"));
const schemaVersion = require(path.join(modules, "@grafana/schema/package.json")).version;

// Panel plugin id -> the module of its generated Options / FieldConfig types.
const PANELS = {
  timeseries: ["timeseries", "TimeSeriesPanelCfg"],
  stat: ["stat", "StatPanelCfg"],
  table: ["table", "TablePanelCfg"],
  bargauge: ["bargauge", "BarGaugePanelCfg"],
  "state-timeline": ["statetimeline", "StateTimelinePanelCfg"],
  heatmap: ["heatmap", "HeatmapPanelCfg"],
};
const RAW = "@grafana/schema/dist/esm/raw";

// Copies the schema package's declaration files with `enum X { A = "a" }` as `type X = "a"`.
function copySchema(to) {
  const from = path.join(modules, "@grafana", "schema");
  const walk = (dir) => {
    for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
      const src = path.join(dir, entry.name);
      const dst = path.join(to, path.relative(from, src));
      if (entry.isDirectory()) {
        walk(src);
      } else if (/\.d\.(ts|mts|cts)$/.test(entry.name) || entry.name === "package.json") {
        fs.mkdirSync(path.dirname(dst), { recursive: true });
        let text = fs.readFileSync(src, "utf8");
        text = text.replace(/(export )?declare enum (\w+) \{([^}]*)\}/g, (_, exp, name, body) => {
          const values = [...body.matchAll(/=\s*("[^"]*"|-?\d+)/g)].map((m) => m[1]);
          return `${exp || ""}type ${name} = ${values.length ? values.join(" | ") : "never"};`;
        });
        fs.writeFileSync(dst, text);
      }
    }
  };
  walk(from);
}

// TypeScript source declaring every dashboard and panel of `dashboards` ({name, json}).
function source(dashboards) {
  const lines = [`import type { Dashboard, Panel, RowPanel } from "${RAW}/dashboard/x/dashboard_types.gen";`];
  for (const [id, [dir, kind]] of Object.entries(PANELS)) {
    lines.push(`import type * as ${id.replace("-", "_")} from "${RAW}/composable/${dir}/panelcfg/x/${kind}_types.gen";`);
  }
  dashboards.forEach(({ name, json }, i) => {
    const d = JSON.parse(JSON.stringify(json));
    const panels = d.panels || [];
    delete d.panels;
    lines.push(`// ${name}`, `export const dashboard${i}: Dashboard = ${JSON.stringify(d)};`);
    panels.forEach((p, j) => {
      const label = `${name}: panel "${p.title}"`;
      if (p.type === "row") {
        lines.push(`// ${label}`, `export const row${i}_${j}: RowPanel = ${JSON.stringify(p)};`);
        return;
      }
      const ns = p.type.replace("-", "_");
      if (!PANELS[p.type]) {
        lines.push(`// ${label}`, `export const unknown${i}_${j}: "a known panel type" = "${p.type}";`);
        return;
      }
      const options = p.options || {};
      const custom = (p.fieldConfig && p.fieldConfig.defaults && p.fieldConfig.defaults.custom) || {};
      delete p.options;
      if (p.fieldConfig && p.fieldConfig.defaults) delete p.fieldConfig.defaults.custom;
      lines.push(`// ${label}`, `export const panel${i}_${j}: Panel = ${JSON.stringify(p)};`);
      lines.push(`export const options${i}_${j}: ${ns}.Options = ${JSON.stringify(options)};`);
      if (p.type !== "stat" && p.type !== "bargauge") {
        lines.push(`export const custom${i}_${j}: ${ns}.FieldConfig = ${JSON.stringify(custom)};`);
      }
    });
  });
  return lines.join("\n") + "\n";
}

// Type-checks `dashboards`; returns the errors, each with the dashboard and panel it is in.
function check(dashboards, dir) {
  fs.mkdirSync(dir, { recursive: true });
  const file = path.join(dir, "dashboards.ts");
  const text = source(dashboards);
  fs.writeFileSync(file, text);
  const program = ts.createProgram([file], {
    strict: true, noEmit: true, module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2020,
    moduleResolution: ts.ModuleResolutionKind.Node10, skipLibCheck: true,
    typeRoots: [], baseUrl: dir,
  });
  const lines = text.split("\n");
  return ts.getPreEmitDiagnostics(program).map((d) => {
    const message = ts.flattenDiagnosticMessageText(d.messageText, "\n  ");
    if (!d.file) return message;
    const { line } = d.file.getLineAndCharacterOfPosition(d.start);
    let where = "";
    for (let l = line; l >= 0; l--) {
      if (lines[l].startsWith("// ")) { where = lines[l].slice(3); break; }
    }
    return `${where}: ${message}`;
  });
}

function main() {
  const dir = fs.mkdtempSync(path.join(process.env.TEST_TMPDIR || os.tmpdir(), "grafana-schema-"));
  copySchema(path.join(dir, "node_modules", "@grafana", "schema"));
  const dashboards = fs.readdirSync("dashboards").filter((f) => f.endsWith(".json")).sort()
    .map((name) => ({ name, json: JSON.parse(fs.readFileSync(path.join("dashboards", name), "utf8")) }));
  let failed = false;
  if (dashboards.length === 0) { console.error("FAIL: no dashboards/*.json"); failed = true; }

  const errors = check(dashboards, dir);
  const panels = dashboards.reduce((n, d) => n + (d.json.panels || []).length, 0);
  if (errors.length) {
    failed = true;
    console.error(`FAIL: ${errors.length} schema error(s) against @grafana/schema ${schemaVersion}:`);
    errors.forEach((e) => console.error("  " + e));
  } else {
    console.log(`ok: ${dashboards.length} dashboards, ${panels} panels match @grafana/schema ${schemaVersion}`);
  }

  // The check must be able to fail: a heatmap with a misspelt option and a stat with a wrong
  // enum value.
  const broken = JSON.parse(JSON.stringify(dashboards[0].json));
  broken.panels = [
    { id: 1, type: "heatmap", title: "broken heatmap", gridPos: { x: 0, y: 0, w: 12, h: 8 },
      options: { calculate: false, cellGapp: 1 } },
    { id: 2, type: "stat", title: "broken stat", gridPos: { x: 12, y: 0, w: 12, h: 8 },
      options: { colorMode: "rainbow" } },
  ];
  const caught = check([{ name: "broken.json", json: broken }], path.join(dir, "broken"));
  for (const want of ["cellGapp", "rainbow"]) {
    if (!caught.some((e) => e.includes(want))) {
      failed = true;
      console.error(`FAIL: the check did not catch "${want}" in a broken dashboard: ${caught.join("; ")}`);
    }
  }
  if (!failed) console.log("ok: a broken dashboard is caught");
  process.exit(failed ? 1 : 0);
}

main();
