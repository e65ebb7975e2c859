// Shared by the Node.js tests of `loupe mcp`: connect the official MCP TypeScript SDK client to the
// server over stdio, unpack tool results, and write a smoke objective that names this build's kda.
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

export const sourceDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");

// Starts `LOUPE mcp ARGS...` in the source tree and completes the initialize handshake.
export async function connect(loupe, args = []) {
  const transport = new StdioClientTransport({
    command: loupe,
    args: ["mcp", ...args],
    cwd: sourceDir,
    stderr: "pipe",
  });
  let stderr = "";
  transport.stderr?.on("data", (chunk) => {
    stderr += chunk.toString();
  });
  const client = new Client({ name: "loupe-sdk-test", version: "1.0.0" });
  await client.connect(transport);
  return { client, transport, stderr: () => stderr };
}

// A tool result's envelope, after checking that the text content carries the same JSON as
// structuredContent (clients show the model only one of them).
export function envelopeOf(result) {
  assert.ok(result.structuredContent, "the result has structuredContent");
  assert.equal(result.content.length, 1);
  assert.equal(result.content[0].type, "text");
  assert.deepEqual(JSON.parse(result.content[0].text), result.structuredContent);
  assert.equal(result.isError, result.structuredContent.error !== null);
  // Bounded: never above ~8,000 tokens (bytes / 4).
  assert.ok(result.content[0].text.length <= 32000, `answer of ${result.content[0].text.length} bytes`);
  return result.structuredContent;
}

// A scratch folder holding `objective` (default examples/kda/smoke.toml) as smoke.toml, rewritten
// to run the given kda (the file names the default preset's build/bin/kda, relative to its
// working_dir).
export function scratchWithSmoke(kda, prefix, objective = "examples/kda/smoke.toml") {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  const lines = fs.readFileSync(path.join(sourceDir, objective), "utf8").split("\n");
  const out = [];
  for (const line of lines) {
    if (line.startsWith("command = ")) out.push(`command = [${JSON.stringify(kda)}, "probe"]`);
    else if (!line.startsWith("working_dir = ")) out.push(line);
  }
  fs.writeFileSync(path.join(dir, "smoke.toml"), out.join("\n"));
  return dir;
}

// Runs `body` as one named step, printing it so that ctest's log reads as a transcript.
export async function step(name, body) {
  const started = Date.now();
  try {
    const value = await body();
    console.log(`ok   ${name} (${((Date.now() - started) / 1000).toFixed(1)} s)`);
    return value;
  } catch (error) {
    console.log(`FAIL ${name}`);
    throw error;
  }
}
