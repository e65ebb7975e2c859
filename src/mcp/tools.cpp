#include "mcp/tools.hpp"

#include "mcp/server.hpp"

namespace loupe::mcp {

const std::vector<Tool>& all_tools() {
  static const std::vector<Tool> tools = [] {
    std::vector<Tool> list;
    add_run_tools(list);
    add_inspect_tools(list);
    add_counters_tools(list);
#ifndef LOUPE_MCP_NO_RESEARCH_TOOLS
    add_research_tools(list);
#endif
    return list;
  }();
  return tools;
}

}  // namespace loupe::mcp
