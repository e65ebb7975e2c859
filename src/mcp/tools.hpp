// mcp/tools.hpp — the groups of tools all_tools() (server.hpp) lists, one source file each.
// Internal to src/mcp.
#pragma once

#include <vector>

#include "mcp/tool.hpp"

namespace loupe::mcp {

// run_objective, run_probe (long: worker thread, progress, cancellation).
void add_run_tools(std::vector<Tool>& tools);
// diff_tensors, analyze_trace, diff_traces, list_runs, show_run, compare_runs.
void add_inspect_tools(std::vector<Tool>& tools);
// counters (Nsight Compute exports as findings).
void add_counters_tools(std::vector<Tool>& tools);
// add_hypothesis, link_run, decide_hypothesis, list_hypotheses, show_hypothesis,
// list_skeletons, show_skeleton, match_skeletons. No tool approves a decision.
void add_research_tools(std::vector<Tool>& tools);

// The `home` and `ledger` parameters every ledger tool takes.
Param home_param();
Param ledger_param();
Param detail_param(const std::string& what);

}  // namespace loupe::mcp
