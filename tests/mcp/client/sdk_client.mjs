// The official MCP TypeScript SDK client against `loupe mcp` over stdio: initialize, list the
// tools (names, schemas, annotations), and call three of them — list_runs, diff_tensors and
// run_objective (one layer, with progress) — plus a call with bad arguments.
// Usage: node sdk_client.mjs LOUPE KDA   (ctest runs it through ../run_node_test.sh)
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";

import { connect, envelopeOf, scratchWithSmoke, sourceDir, step } from "./connect.mjs";

const [loupe, kda] = process.argv.slice(2);
assert.ok(loupe && kda, "usage: node sdk_client.mjs LOUPE KDA");

const scratch = scratchWithSmoke(kda, "loupe-mcp-sdk-");
const home = path.join(scratch, "home");
// The scratch folder lies outside the project root (the source tree): allowed, as a person would.
const { client, transport, stderr } = await connect(loupe, ["--home", home, "--allow-path", scratch]);
try {
  await step("initialize: server info and the tools capability", async () => {
    assert.equal(client.getServerVersion().name, "loupe");
    assert.deepEqual(client.getServerCapabilities().tools, { listChanged: false });
    assert.match(client.getInstructions(), /run_objective/);
  });

  const tools = await step("tools/list: names, flat schemas, honest annotations", async () => {
    const { tools } = await client.listTools();
    for (const tool of tools) {
      assert.match(tool.name, /^[a-z0-9_]{1,64}$/);
      assert.equal(tool.inputSchema.type, "object");
      assert.equal(tool.inputSchema.additionalProperties, false);
      for (const [name, property] of Object.entries(tool.inputSchema.properties ?? {})) {
        assert.notEqual(property.type, "object", `${tool.name}.${name} is flat`);
      }
      // No outputSchema: every answer is the one loupe envelope (docs/formats.md), and tools/list
      // stays under 12,000 characters.
      assert.equal(tool.outputSchema, undefined, `${tool.name} declares no outputSchema`);
      // destructiveHint and idempotentHint mean something only when readOnlyHint is false (MCP's
      // ToolAnnotations), so read-only tools leave them out (tools/list's budget, issue 24).
      const hints = tool.annotations.readOnlyHint === true
                        ? ["readOnlyHint", "openWorldHint"]
                        : ["readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"];
      for (const hint of hints) {
        assert.equal(typeof tool.annotations[hint], "boolean", `${tool.name} ${hint}`);
      }
      assert.ok(!/approve|review/.test(tool.name), `${tool.name}: no tool approves`);
    }
    const byName = Object.fromEntries(tools.map((tool) => [tool.name, tool]));
    for (const name of ["run_objective", "run_probe", "diff_tensors", "analyze_trace",
                        "diff_traces", "list_runs", "show_run", "compare_runs"]) {
      assert.ok(byName[name], `tool ${name} is listed`);
    }
    assert.equal(byName.list_runs.annotations.readOnlyHint, true);
    assert.equal(byName.run_objective.annotations.readOnlyHint, false);
    assert.equal(byName.run_objective.annotations.idempotentHint, false);
    // The run tools start subject programs, which may change anything their user can (issue 17).
    assert.equal(byName.run_objective.annotations.destructiveHint, true);
    assert.equal(byName.run_probe.annotations.destructiveHint, true);
    return tools;
  });
  console.log(`     ${tools.length} tools: ${tools.map((tool) => tool.name).join(", ")}`);

  await step("call list_runs: an empty ledger", async () => {
    const envelope = envelopeOf(await client.callTool({ name: "list_runs", arguments: {} }));
    assert.equal(envelope.kind, "ledger.list");
    assert.equal(envelope.data.total, 0);
    assert.deepEqual(envelope.data.runs, []);
  });

  await step("call diff_tensors: the error sits in the last quarter of T", async () => {
    const data = path.join(sourceDir, "tests/mcp/golden/data");
    const envelope = envelopeOf(await client.callTool({
      name: "diff_tensors",
      arguments: { a: path.join(data, "candidate.npy"), b: path.join(data, "reference.npy"),
                   axes: ["T", "V"], along: "T" },
    }));
    assert.equal(envelope.kind, "diff");
    assert.equal(envelope.verdict, "fail");  // past float32's default tolerance
    assert.ok(envelope.findings.length > 0);
    assert.equal(envelope.findings[0].where.coords.T, 7, JSON.stringify(envelope.findings[0]));
  });

  await step("call run_objective (check layer, incident) with progress", async () => {
    const progress = [];
    const result = await client.callTool(
      { name: "run_objective",
        arguments: { objective: path.join(scratch, "smoke.toml"), config: "incident", only: "check" } },
      undefined,
      { onprogress: (update) => progress.push(update), timeout: 120000 },
    );
    const envelope = envelopeOf(result);
    assert.equal(envelope.kind, "run");
    assert.equal(envelope.verdict, "fail");
    assert.equal(envelope.data.status, "completed");
    const gates = Object.fromEntries(envelope.data.gates.map((gate) => [gate.name, gate.verdict]));
    assert.equal(gates.cp_matches_single_device, "fail");
    assert.equal(gates.cp_control_holds, "pass");
    assert.equal(gates.decode_kernel_not_slower, "not-run");
    assert.equal(envelope.findings[0].id, "check.cp_vs_nocp.mismatch");
    // One notification before the cascade, then one per point (3 checks); a point that runs long
    // adds "still running" heartbeats between them (fractional progress). All increase.
    const points = progress.filter((update) => Number.isInteger(update.progress));
    assert.deepEqual(points.map((update) => update.progress), [0, 1, 2, 3], JSON.stringify(progress));
    assert.equal(points[3].total, 3);
    for (let index = 1; index < progress.length; ++index) {
      assert.ok(progress[index].progress > progress[index - 1].progress, JSON.stringify(progress));
      if (!Number.isInteger(progress[index].progress)) {
        assert.match(progress[index].message, /^still running after \d+ s; last: /);
      }
    }
  });

  await step("call list_runs with bad arguments: isError with the accepted values", async () => {
    const result = await client.callTool({ name: "list_runs", arguments: { limit: 0 } });
    const envelope = envelopeOf(result);
    assert.equal(result.isError, true);
    assert.equal(envelope.error.code, "usage");
    assert.match(envelope.error.hint, /limit takes integer in \[1, 100\]/);
  });
} catch (error) {
  console.log(`server stderr:\n${stderr()}`);
  throw error;
} finally {
  await client.close();
  await transport.close();
  fs.rmSync(scratch, { recursive: true, force: true });
}
console.log("sdk_client: all steps passed");
