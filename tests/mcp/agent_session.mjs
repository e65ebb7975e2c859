// Issue 8's "done when": a scripted agent session over MCP with the official TypeScript SDK client.
// It runs the smoke objective in its incident configuration, reads the
// three failing gates' findings, matches skeletons (the top three are the three fixes), states a
// hypothesis, runs the fixed configuration, links both runs, compares them, and decides the
// hypothesis retain — which is recorded as needs-review, because the configuration change touches
// the objective's [review] categories — and checks that no MCP tool can approve it.
// The objective is tests/integration/run/tiny.toml: examples/kda/smoke.toml with more scenario
// repeats and a 1.3 bound on the transfer ratio, because with smoke.toml's 3 repeats the transfer
// gate was inconclusive on this shared 2-core machine (in the incident run too; tiny.toml says why).
// Usage: node agent_session.mjs LOUPE KDA   (ctest runs it through run_node_test.sh, RUN_SERIAL)
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";

import { connect, envelopeOf, scratchWithSmoke, step } from "./client/connect.mjs";

const [loupe, kda] = process.argv.slice(2);
assert.ok(loupe && kda, "usage: node agent_session.mjs LOUPE KDA");

// The incidents of reference/kda.md and the skeletons that fix them (skeletons/*.toml).
const failingGates = ["cp_matches_single_device", "decode_kernel_not_slower",
                      "transfer_overhead_within_30pct"];
const fixes = ["tf32x3-affine-merge", "merged-v-decode", "release-lock-around-blocking-wait"];
// A run whose wall-time gate is inconclusive on a loaded machine is run again, as an agent would
// (the gate's rule says "more repeats would narrow it"); every attempt is printed. A gate with the
// wrong definite verdict fails the session at once.
const maxAttempts = 4;

const scratch = scratchWithSmoke(kda, "loupe-mcp-agent-", "tests/integration/run/tiny.toml");
const objective = path.join(scratch, "smoke.toml");
// 30 repeats per scenario instead of 15: with other builds loading the machine (load 18 on 2
// cores), the incident's transfer ratio interval was [1.18, 1.54] at 15 repeats, inconclusive
// against 1.3 in 3 runs of 3.
const objectiveText = fs.readFileSync(objective, "utf8");
assert.equal(objectiveText.match(/^repeats = 15$/gm)?.length, 2, "tiny.toml has two scenarios");
fs.writeFileSync(objective, objectiveText.replace(/^repeats = 15$/gm, "repeats = 30"));
// The scratch folder lies outside the project root (the source tree): allowed, as a person would.
const { client, transport, stderr } = await connect(loupe, [
  "--home", path.join(scratch, "home"), "--allow-path", scratch]);

async function call(name, args, options) {
  return envelopeOf(await client.callTool({ name, arguments: args }, undefined, options));
}

async function runObjective(config) {
  const progress = [];
  const envelope = await call("run_objective", { objective, config },
                              { onprogress: (update) => progress.push(update), timeout: 240000 });
  assert.equal(envelope.kind, "run");
  assert.equal(envelope.data.status, "completed", JSON.stringify(envelope.error));
  assert.ok(progress.length >= 2, "progress notifications arrived");
  const values = progress.map((update) => update.progress);
  assert.deepEqual(values, [...values].sort((a, b) => a - b), "progress increases");
  return envelope;
}

const verdicts = (envelope) =>
  Object.fromEntries(envelope.data.gates.map((gate) => [gate.name, gate.verdict]));

try {
  await step("tools: the research tools are listed and none approves", async () => {
    const { tools } = await client.listTools();
    const names = tools.map((tool) => tool.name);
    for (const name of ["run_objective", "match_skeletons", "show_skeleton", "add_hypothesis",
                        "link_run", "decide_hypothesis", "show_hypothesis", "list_hypotheses"]) {
      assert.ok(names.includes(name), `${name} is listed`);
    }
    assert.deepEqual(names.filter((name) => /approve|review/.test(name)), []);
    const decide = tools.find((tool) => tool.name === "decide_hypothesis");
    assert.deepEqual(decide.inputSchema.properties.decision.enum, ["retain", "revise", "reject"]);
  });

  const incident = await step("run_objective smoke.toml --config incident", async () => {
    for (let attempt = 1; ; ++attempt) {
      const envelope = await runObjective("incident");
      const gates = verdicts(envelope);
      console.log(`     attempt ${attempt}: run ${envelope.data.run} ${envelope.verdict} ` +
                  JSON.stringify(gates));
      assert.equal(envelope.verdict, "fail");
      for (const [name, verdict] of Object.entries(gates)) {
        const wanted = failingGates.includes(name) ? "fail" : "pass";
        assert.ok(verdict === wanted || verdict === "inconclusive", `${name} is ${verdict}`);
      }
      if (failingGates.every((name) => gates[name] === "fail")) return envelope;
      assert.ok(attempt < maxAttempts, "a gate stayed inconclusive");
    }
  });
  const incidentRun = incident.data.run;
  console.log(`     run ${incidentRun}: failing gates ${failingGates.join(", ")}`);

  await step("read the three failing gates' findings", async () => {
    // The concise answer leads with the first finding of each failing gate, in gate order.
    const gates = incident.data.gates.filter((gate) => gate.verdict === "fail");
    assert.equal(incident.findings.length, 3);
    for (const [index, gate] of gates.entries()) {
      const finding = incident.findings[index];
      assert.equal(gate.finding_ids[0], finding.id, `${gate.name} explains itself with ${finding.id}`);
      assert.ok(finding.claim.length > 0 && finding.reproduce.length > 0);
      console.log(`     ${gate.name}: ${finding.id} (${finding.severity}): ${finding.claim.slice(0, 100)}`);
      console.log(`       all: ${gate.finding_ids.join(", ")}`);
    }
    // Incident 1: the CP state drifts; incident 3: the tiled decode is slower than the merged
    // one; incident 2: the dispatch thread holds the lock the transfer thread waits for.
    assert.ok(gates[0].finding_ids.includes("check.cp_vs_nocp.mismatch"));
    assert.equal(incident.findings[0].severity, "fail");
    assert.ok(gates[1].finding_ids.includes("bench.decode.slower"));
    assert.ok(gates[2].finding_ids.includes("trace.diff.locks"));
    // Issue 38, one direction: the gate reads tiled (configured) as the candidate against merged
    // and calls it SLOWER; its statistic, the bench finding and the ledger's copy all say slower.
    assert.equal(gates[1].ratio_of, "candidate/baseline");
    assert.equal(gates[1].candidate, "tiled");
    assert.equal(gates[1].baseline, "merged");
    assert.ok(Number.parseFloat(gates[1].statistic) > 1, gates[1].statistic);
    const expectSlower = (finding, where) => {
      assert.equal(finding.id, "bench.decode.slower", `${where}: ${JSON.stringify(finding)}`);
      assert.equal(finding.where.path, "tiled vs merged", where);
      assert.match(finding.claim, /^tiled is [0-9.]+(%|×) slower than merged \(.*tiled\/merged /, where);
      assert.ok(finding.evidence.metrics.ratio > 1 && finding.evidence.metrics.ci_low > 1, where);
    };
    expectSlower(incident.findings[1], "run_objective");
    // The ledger holds them too.
    const shown = await call("show_run", { run: incidentRun });
    assert.equal(shown.verdict, "fail");
    assert.equal(shown.findings[0].severity, "fail");
    const detailed = await call("show_run", { run: incidentRun, detail: true });
    const decode = detailed.findings.filter((finding) => finding.id.startsWith("bench.decode."));
    assert.ok(decode.length > 0, "show_run lists the bench.decode finding");
    for (const finding of decode) expectSlower(finding, "show_run");
    // The gate's own statistics come back in run_objective's gate rows (above); a detailed show_run
    // of this run is past the answer limit, which drops its data and keeps the findings.
  });

  const matches = await step("match_skeletons: the top three are the three fixes", async () => {
    const envelope = await call("match_skeletons", { run: incidentRun });
    const top = envelope.data.matches.slice(0, 3).map((match) => match.skeleton);
    assert.deepEqual([...top].sort(), [...fixes].sort(), JSON.stringify(envelope.data.matches));
    for (const match of envelope.data.matches.slice(0, 3)) {
      assert.ok(match.reasons.length > 0, `${match.skeleton} says why it matched`);
      console.log(`     ${match.skeleton} (score ${match.score}): ${match.reasons[0]}`);
    }
    const skeleton = await call("show_skeleton", { id: top[0] });
    assert.equal(skeleton.data.skeleton.id, top[0]);
    return top;
  });

  const hypothesis = await step("add_hypothesis citing the top skeleton, link the baseline", async () => {
    const added = await call("add_hypothesis", {
      text: "The fixed deployment (3xTF32 merges, merged V tiles, lock released around waits) " +
            "removes all three incidents without failing a gate",
      skeleton: matches[0],
    });
    const id = added.data.hypothesis.id;
    assert.equal(added.data.hypothesis.status, "open");
    const linked = await call("link_run", { hypothesis: id, run: incidentRun, role: "baseline" });
    assert.deepEqual(linked.data.hypothesis.links.map((link) => [link.run, link.role]),
                     [[incidentRun, "baseline"]]);
    return id;
  });

  const fixed = await step("run_objective smoke.toml --config fixed: every gate passes", async () => {
    for (let attempt = 1; ; ++attempt) {
      const envelope = await runObjective("fixed");
      const gates = verdicts(envelope);
      console.log(`     attempt ${attempt}: run ${envelope.data.run} ${envelope.verdict} ` +
                  JSON.stringify(gates));
      assert.ok(!Object.values(gates).includes("fail"), "no gate fails in the fixed configuration");
      if (envelope.verdict === "pass") return envelope;
      assert.ok(attempt < maxAttempts, "the fixed run stayed inconclusive");
    }
  });
  const fixedRun = fixed.data.run;

  await step("compare_runs: the three failing gates flipped to pass", async () => {
    const envelope = await call("compare_runs", { run_a: incidentRun, run_b: fixedRun });
    const flipped = envelope.data.gates.filter((gate) => gate.changed);
    assert.deepEqual(flipped.map((gate) => [gate.name, gate.a, gate.b]).sort(),
                     failingGates.map((name) => [name, "fail", "pass"]).sort());
  });

  await step("link the candidate and decide retain: recorded as needs-review", async () => {
    await call("link_run", { hypothesis, run: fixedRun, role: "candidate" });
    const envelope = await call("decide_hypothesis", {
      hypothesis, decision: "retain",
      why: `run ${fixedRun} passes every gate that run ${incidentRun} failed`,
    });
    assert.equal(envelope.data.recorded, "needs-review");
    const categories = [...new Set(envelope.data.triggers.map((trigger) => trigger.category))];
    // precision, dispatch_lock and decode_kernel changed: each is in one [review] category.
    assert.deepEqual(categories.sort(), ["concurrency", "numerics", "production-risk"]);
    for (const trigger of envelope.data.triggers) console.log(`     ${trigger.category}: ${trigger.reason}`);
    assert.equal(envelope.data.hypothesis.status, "needs-review");
    const decision = envelope.data.hypothesis.decisions.at(-1);
    assert.equal(decision.decision, "needs-review");
    assert.equal(decision.who, "mcp:loupe-sdk-test");
    assert.match(envelope.data.review, /loupe hypothesis review \d+ --approve --by NAME/);
  });

  await step("no MCP tool can approve", async () => {
    const refused = await client.callTool({ name: "decide_hypothesis", arguments: {
      hypothesis, decision: "approve", why: "an agent tries" } });
    assert.equal(refused.isError, true);
    assert.match(refused.structuredContent.error.hint, /one of: retain, revise, reject/);
    await assert.rejects(client.callTool({ name: "approve_hypothesis", arguments: { hypothesis } }),
                         /Unknown tool/);
    const shown = await call("show_hypothesis", { hypothesis });
    assert.equal(shown.data.hypothesis.status, "needs-review");
    assert.ok(shown.data.hypothesis.decisions.every((decision) => decision.approved_by === undefined));
  });
} catch (error) {
  console.log(`server stderr:\n${stderr()}`);
  throw error;
} finally {
  await client.close();
  await transport.close();
  fs.rmSync(scratch, { recursive: true, force: true });
}
console.log("agent_session: every step passed");
