#!/usr/bin/env bash
# Runs one of the Node.js MCP client tests: run_node_test.sh SCRIPT LOUPE KDA
# SCRIPT is relative to tests/mcp. Exit 77 (ctest: skipped) with the reason when node is absent.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if ! command -v node >/dev/null 2>&1; then
  echo "skipped: node is not installed (scripts/install-deps installs it)"
  exit 77
fi
if [[ ! -d "$here/client/node_modules/@modelcontextprotocol/sdk" ]]; then
  echo "tests/mcp/client/node_modules is missing: run scripts/install-deps (npm ci in tests/mcp/client)" >&2
  exit 1
fi
exec node "$here/$1" "$2" "$3"
