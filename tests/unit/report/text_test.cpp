// The terminal and Markdown renderings of a synthetic model, exactly.
#include <gtest/gtest.h>

#include "report/model.hpp"
#include "report_fixture.hpp"

namespace loupe::report {
namespace {

TEST(RenderTerminal, GateTableFindingsAndNotesExactly) {
  const Model model = testing_fixture::synthetic_model();
  EXPECT_EQ(render_terminal(model),
            "loupe run kda-smoke (/repo/examples/kda/smoke.toml), configuration incident "
            "precision=tf32_rz\n"
            "run r20261130-070000-abcd: 5 point(s) in 12.5 s, completed\n"
            "\n"
            "gate                            layer     verdict       key statistic\n"
            "cp_matches_single_device        check     FAIL          0.0031 <= 2e-06 n=1\n"
            "    fail: the worst value 0.0031 at T=2048,shards=4, not <= 2e-06\n"
            "decode_kernel_not_slower        bench     PASS          1.01 [0.98, 1.03] (t 0.05) "
            "n=1\n"
            "    pass: not SLOWER holds at every selected point (1)\n"
            "a_gate_with_a_very_long_name_t~ ?         NOT-RUN       -\n"
            "    not run: the cascade stopped\n"
            "key statistic: estimate [95% CI], a ratio candidate/baseline (> 1: the candidate is "
            "slower); (t 0.05): the A/B threshold, SAME within 1 ± 0.05 "
            "and SLOWER or FASTER beyond it; n=: the points (or paired runs) the gate decided "
            "from\n"
            "\n"
            "top findings\n"
            "  fail check.cp_vs_nocp.drift: error grows along T <x> | *y*\n"
            "    reproduce: loupe probe run cp_vs_nocp --seed 7 -- kda probe\n"
            "  warn check.cp_vs_nocp.oracle: worse than the reference\n"
            "    reproduce: (as above)\n"
            "  (3 more findings: `loupe ledger show r20261130-070000-abcd` lists all)\n"
            "\n"
            "notes\n"
            "  1 of 5 observation(s) could not be read\n"
            "  2 more error profile(s) not drawn (see the HTML report)\n"
            "  trace input repaired or dropped: trace_zone_unclosed 4\n"
            "\n"
            "recorded in /tmp/ledger.sqlite (loupe ledger show r20261130-070000-abcd)\n");
}

TEST(RenderTerminal, SubjectFailureAndNoGates) {
  Model model;
  model.header.run_id = "r1";
  model.header.title = "t";
  model.header.objective_path = "o.toml";
  model.header.configuration = "(ad hoc)";
  model.header.status = "failed";
  model.header.subject_failure = "kda crashed (signal 11)";
  EXPECT_EQ(render_terminal(model),
            "loupe run t (o.toml), configuration (ad hoc)\n"
            "run r1: 0 point(s), failed\n"
            "\n"
            "gate                            layer     verdict       key statistic\n"
            "(no gates)\n"
            "\n"
            "subject failure: kda crashed (signal 11)\n");
}

TEST(RenderMarkdown, GateTableFindingsPlotsExactly) {
  const Model model = testing_fixture::synthetic_model();
  EXPECT_EQ(
      render_markdown(model),
      "### loupe run kda-smoke: FAIL\n"
      "\n"
      "Run `r20261130-070000-abcd` of `/repo/examples/kda/smoke.toml`, configuration "
      "`incident precision=tf32_rz`: 5 point(s) in 12.5 s, completed, commit `0123456789ab`.\n"
      "\n"
      "| gate | layer | verdict | key statistic | rule |\n"
      "|---|---|---|---|---|\n"
      "| cp\\_matches\\_single\\_device | check | **FAIL** | 0.0031 \\<= 2e-06 n=1 | fail: the "
      "worst value 0.0031 at T=2048,shards=4, not \\<= 2e-06 |\n"
      "| decode\\_kernel\\_not\\_slower | bench | **PASS** | 1.01 \\[0.98, 1.03\\] (t 0.05) n=1 | "
      "pass: not SLOWER holds at every selected point (1) |\n"
      "| a\\_gate\\_with\\_a\\_very\\_long\\_name\\_that\\_does\\_not\\_fit | ? | **NOT-RUN** | - "
      "| "
      "not run: the cascade stopped |\n"
      "\n"
      "key statistic: estimate \\[95% CI\\], a ratio candidate/baseline (> 1: the candidate is "
      "slower); (t 0.05): the A/B threshold, SAME within 1 ± 0.05 "
      "and SLOWER or FASTER beyond it; n=: the points (or paired runs) the gate decided from\n"
      "\n"
      "#### Top findings\n"
      "\n"
      "- **fail** `check.cp_vs_nocp.drift`: error grows along T \\<x> \\| \\*y\\*\n"
      "  - next: rerun with precision=tf32x3\n"
      "  - reproduce: `loupe probe run cp_vs_nocp --seed 7 -- kda probe`\n"
      "- **warn** `check.cp_vs_nocp.oracle`: worse than the reference\n"
      "  - reproduce: as above\n"
      "\n"
      "3 more findings: `loupe ledger show r20261130-070000-abcd` lists all.\n"
      "\n"
      "#### Error profiles of failing checks\n"
      "\n"
      "- `cp_vs_nocp T=2048,shards=4` output `o` along `T`: growing: x8 from the first to the "
      "last quarter\n"
      "\n"
      "#### Bench comparisons\n"
      "\n"
      "| bench | comparison | point | ratio | CI | verdict |\n"
      "|---|---|---|---|---|---|\n"
      "| decode | merged vs tiled | batch=32 | 1.01 | [0.98, 1.03] | same (band ±5%) |\n"
      "| decode | merged vs tiled | batch=64 | 1.4 | [1.3, 1.5] | slower (band ±5%) |\n"
      "\n"
      "#### Scenario timelines\n"
      "\n"
      "- `serve mode=prefill+transfer`: transfer waited on interpreter 1 time(s)\n"
      "\n"
      "#### Notes\n"
      "\n"
      "- 1 of 5 observation(s) could not be read\n"
      "- 2 more error profile(s) not drawn (see the HTML report)\n"
      "- trace input repaired or dropped: `trace_zone_unclosed` 4\n"
      "\n"
      "`loupe report r20261130-070000-abcd --html FILE` renders the plots.\n");
}

TEST(RenderMarkdown, CodeSpansSurviveBackticksAndPipes) {
  Model model;
  model.header.run_id = "r`1";
  model.header.title = "t";
  model.header.status = "completed";
  Finding finding;
  finding.id = "check.x.y";
  finding.severity = Severity::kFail;
  finding.claim = "c";
  finding.reproduce = "a | b `c`";
  model.findings = {finding};
  model.findings_total = 1;
  const std::string markdown = render_markdown(model);
  EXPECT_NE(markdown.find("  - reproduce: `` a \\| b `c` ``\n"), std::string::npos) << markdown;
  EXPECT_NE(markdown.find("Run ``r`1``"), std::string::npos) << markdown;
}

}  // namespace
}  // namespace loupe::report
