// mcp/server.hpp — `loupe mcp`: a Model Context Protocol server over stdio (JSON-RPC 2.0, one
// message per line), written on nlohmann-json; the subset in docs/mcp.md.
//
// Methods: initialize (protocol version negotiation), ping, tools/list, tools/call; notifications
// initialized, cancelled (stops the job) and progress (ignored). Errors: -32700 parse error (id
// null), -32600 invalid request (also a message past ServerSettings::max_message_bytes, id null),
// -32601 method not found, -32602 invalid params (and unknown tool), -32001 a call that ran past
// its time bound (time_bound_s in tool.hpp). A tool's bad arguments are not protocol errors: the
// call answers isError true with an error envelope naming the argument and the accepted values. Two
// ways to drive it:
//   serve()       reads lines until EOF, in chunks, never holding more than max_message_bytes of
//                 one. Long tools (run_objective, run_probe, bisect) run one at a time on a worker
//                 thread, every other tool one at a time on a second, while stdin is still read;
//                 calls send notifications/progress when the request carried a progressToken (at
//                 least every 5 s), and stop when cancelled: the subject's process group is killed
//                 and no response is sent. A call past its time bound is cancelled the same way and
//                 answered -32001. EOF cancels the long calls, lets the others answer, and returns
//                 0. Writes are serialised; each is one line, flushed.
//   handle_line() one line in, the lines to write out; every tool runs inline, without time
//                 bounds (fuzzing, tests).
// Thread-safety: one Server per stream; handle_line and serve are not to be mixed concurrently.
#pragma once

#include <functional>
#include <istream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "mcp/tool.hpp"

namespace loupe::mcp {

// Newest first; initialize echoes a client's version from this list, else answers the first.
const std::vector<std::string>& protocol_versions();

// Every tool of the server, in tools/list order.
const std::vector<Tool>& all_tools();

class Server {
 public:
  explicit Server(ServerSettings settings);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // One message (a line without its newline) → the lines to write, in order: progress
  // notifications, then the response (none for notifications). Never throws.
  std::vector<std::string> handle_line(std::string_view line);

  // Reads `in` line by line until EOF (in chunks of what the stream has ready: for std::cin, turn
  // off sync_with_stdio first) and writes every outgoing message through `write_line`
  // (one line, without newline; called under a lock). Returns 0.
  int serve(std::istream& in, const std::function<void(std::string_view)>& write_line);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace loupe::mcp
