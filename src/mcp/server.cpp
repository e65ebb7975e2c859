#include "mcp/server.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "core/limits.hpp"
#include "gate/recorded_run.hpp"

namespace loupe::mcp {
namespace {

constexpr int kParseError = -32700;
constexpr int kInvalidRequest = -32600;
constexpr int kMethodNotFound = -32601;
constexpr int kInvalidParams = -32602;

// Clients reset their idle timeout on progress; 10 s is the longest gap docs/mcp.md promises.
constexpr auto kHeartbeat = std::chrono::seconds(5);
constexpr auto kMonitorTick = std::chrono::milliseconds(200);

using Clock = std::chrono::steady_clock;

constexpr const char* kInstructions =
    "loupe gives dense, local, objective feedback on inference systems. Typical loop: "
    "run_objective (an objective TOML, e.g. examples/kda/smoke.toml, config 'incident') -> read "
    "the failing gates and their findings -> match_skeletons on the run -> add_hypothesis, "
    "link_run (baseline, candidate) -> run_objective again -> decide_hypothesis. Answers are "
    "concise; pass detail: true for more. A retain decision that touches the objective's "
    "[review] categories is recorded as needs-review: only a person can approve it, with the "
    "CLI (loupe hypothesis review H --approve --by NAME).";

Json response(const Json& id, Json result) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}};
}

Json error_response(const Json& id, int code, const std::string& message) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"error", {{"code", code}, {"message", message}}}};
}

bool valid_id(const Json& id) { return id.is_string() || id.is_number_integer(); }

const Tool* find_tool(const std::string& name) {
  for (const auto& tool : all_tools()) {
    if (tool.name == name) return &tool;
  }
  return nullptr;
}

// 3 rather than 3.0 for whole numbers: progress counts points.
Json whole_or_fraction(double value) {
  if (value == std::floor(value) && std::fabs(value) < 1e15) return static_cast<int64_t>(value);
  return value;
}

// The progress of one call: values strictly increase, whether they come from the tool or from
// the heartbeat.
class ProgressSink {
 public:
  ProgressSink(Json token, std::function<void(const Json&)> emit)
      : token_(std::move(token)), emit_(std::move(emit)) {}

  void report(double progress, std::optional<double> total, const std::string& message) {
    std::lock_guard lock(mutex_);
    total_ = total;
    message_ = message;
    send(sent_any_ ? std::max(progress, last_ + 0.001) : progress, message);
  }

  void heartbeat(Clock::time_point started) {
    std::lock_guard lock(mutex_);
    if (token_.is_null() || Clock::now() - last_sent_ < kHeartbeat) return;
    const auto seconds =
        std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - started).count();
    std::string message = "still running after " + std::to_string(seconds) + " s";
    if (!message_.empty()) message += "; last: " + message_;
    send(sent_any_ ? last_ + 0.001 : 0.0, message);
  }

 private:
  void send(double value, const std::string& message) {
    last_sent_ = Clock::now();
    if (token_.is_null()) return;
    last_ = value;
    sent_any_ = true;
    Json params = {{"progressToken", token_}, {"progress", whole_or_fraction(value)}};
    if (total_) params["total"] = whole_or_fraction(*total_);
    params["message"] = message;
    emit_({{"jsonrpc", "2.0"}, {"method", "notifications/progress"}, {"params", params}});
  }

  std::mutex mutex_;
  Json token_;
  std::function<void(const Json&)> emit_;
  double last_ = 0;
  bool sent_any_ = false;
  std::optional<double> total_;
  std::string message_;
  Clock::time_point last_sent_ = Clock::now();
};

struct Job {
  Json id;
  const Tool* tool = nullptr;
  Json arguments;
  std::shared_ptr<ProgressSink> progress;
  std::atomic<bool> cancelled{false};
  Clock::time_point started = Clock::now();
};

}  // namespace

const std::vector<std::string>& protocol_versions() {
  static const std::vector<std::string> versions = {"2025-11-25", "2025-06-18", "2025-03-26",
                                                    "2024-11-05"};
  return versions;
}

struct Server::Impl {
  ServerSettings settings;
  std::mutex mutex;  // guards settings.client_name, the queue, the jobs and `stopping`
  std::condition_variable wake;
  std::deque<std::shared_ptr<Job>> queue;
  std::map<std::string, std::shared_ptr<Job>> jobs;  // by serialised request id
  std::shared_ptr<Job> running;
  bool stopping = false;

  // Runs a tool call to its envelope; never throws.
  Json execute(const Tool& tool, const Json& arguments, ProgressSink& progress,
               const std::atomic<bool>* cancelled) {
    ServerSettings call_settings;
    {
      std::lock_guard lock(mutex);
      call_settings = settings;
    }
    CallContext context{call_settings, nullptr, cancelled};
    context.progress = [&progress](double value, std::optional<double> total,
                                   const std::string& message) {
      progress.report(value, total, message);
    };
    const bool detail = arguments.is_object() && arguments.contains("detail") &&
                        arguments["detail"].is_boolean() && arguments["detail"].get<bool>();
    const bool has_detail = std::any_of(tool.params.begin(), tool.params.end(),
                                        [](const Param& param) { return param.name == "detail"; });
    const size_t limit = has_detail && !detail ? kConciseBytes : kMaxBytes;
    try {
      check_arguments(tool, arguments);
      return bound_envelope(tool.call(arguments, context), limit, tool.narrow_hint);
    } catch (const Error& error) {
      return bound_envelope(error_envelope(tool.envelope_kind, error), kMaxBytes, tool.narrow_hint);
    } catch (const std::filesystem::filesystem_error& error) {
      return error_envelope(tool.envelope_kind,
                            Error(ErrorCode::kInput,
                                  tool.name + ": cannot use " + error.path1().string() + ": " +
                                      error.code().message(),
                                  "check that the path exists and that loupe may write there"));
    } catch (const std::exception& error) {
      return error_envelope(tool.envelope_kind,
                            Error(ErrorCode::kInternal, std::string("internal error in ") +
                                                            tool.name + ": " + error.what()));
    }
  }

  // Handles one line. `emit` writes a message. `enqueue` (streaming mode) takes long tool calls;
  // without it every tool runs inline.
  void dispatch(std::string_view line, const std::function<void(const Json&)>& emit,
                const std::function<void(std::shared_ptr<Job>)>* enqueue) {
    if (line.find_first_not_of(" \t\r\n") == std::string_view::npos) return;
    Json message;
    try {
      // A message nested 100,000 deep overflowed the stack inside nlohmann-json and killed the
      // server; MCP messages nest a few levels, so anything past kMaxJsonDepth is refused first.
      check_json_nesting(line, "message", kMaxJsonDepth);
      message = Json::parse(line);
    } catch (const Error& error) {
      emit(error_response(nullptr, kParseError, "Parse error: " + error.message()));
      return;
    } catch (const Json::exception& error) {
      // parse_error, and out_of_range for a number beyond double ("1e400"; found by
      // fuzz/mcp_fuzz): either way the line is not a message loupe can read.
      emit(error_response(nullptr, kParseError, "Parse error: " + json_error_text(error)));
      return;
    }
    if (!message.is_object()) {
      emit(error_response(nullptr, kInvalidRequest,
                          "Invalid Request: a message must be a JSON object (batches are not "
                          "supported), got " +
                              std::string(message.type_name())));
      return;
    }
    const bool has_id = message.contains("id");
    const Json id = has_id ? message["id"] : Json(nullptr);
    if (has_id && !valid_id(id)) {
      emit(error_response(
          nullptr, kInvalidRequest,
          "Invalid Request: id must be a string or an integer, got " + dump_compact(id)));
      return;
    }
    if (!message.contains("jsonrpc") || message["jsonrpc"] != "2.0") {
      if (has_id)
        emit(error_response(id, kInvalidRequest, "Invalid Request: jsonrpc must be \"2.0\""));
      return;
    }
    if (!message.contains("method")) {
      // A response from the client (this server sends no requests): nothing to do.
      if (has_id && (message.contains("result") || message.contains("error"))) return;
      emit(error_response(id, kInvalidRequest, "Invalid Request: no method"));
      return;
    }
    if (!message["method"].is_string()) {
      if (has_id)
        emit(error_response(id, kInvalidRequest, "Invalid Request: method must be a string"));
      return;
    }
    const std::string method = message["method"].get<std::string>();
    const Json params = message.contains("params") ? message["params"] : Json::object();
    if (!params.is_object()) {
      if (has_id)
        emit(error_response(id, kInvalidParams, "Invalid params: params must be an object"));
      return;
    }
    if (!has_id) {
      notification(method, params);
      return;
    }
    if (method == "initialize") {
      emit(initialize(id, params));
    } else if (method == "ping") {
      emit(response(id, Json::object()));
    } else if (method == "tools/list") {
      Json tools = Json::array();
      for (const auto& tool : all_tools()) tools.push_back(tool_definition(tool));
      emit(response(id, {{"tools", std::move(tools)}}));
    } else if (method == "tools/call") {
      call(id, params, emit, enqueue);
    } else {
      emit(error_response(id, kMethodNotFound, "Method not found: " + method));
    }
  }

  Json initialize(const Json& id, const Json& params) {
    if (!params.contains("protocolVersion") || !params["protocolVersion"].is_string()) {
      return error_response(id, kInvalidParams,
                            "Invalid params: initialize needs protocolVersion (a string)");
    }
    const std::string wanted = params["protocolVersion"].get<std::string>();
    const auto& versions = protocol_versions();
    const bool known = std::find(versions.begin(), versions.end(), wanted) != versions.end();
    if (params.contains("clientInfo") && params["clientInfo"].is_object() &&
        params["clientInfo"].contains("name") && params["clientInfo"]["name"].is_string()) {
      std::lock_guard lock(mutex);
      settings.client_name = params["clientInfo"]["name"].get<std::string>();
    }
    return response(id, {{"protocolVersion", known ? wanted : versions.front()},
                         {"capabilities", {{"tools", {{"listChanged", false}}}}},
                         {"serverInfo",
                          {{"name", "loupe"},
                           {"title", "loupe: dense feedback for inference systems"},
                           {"version", "0.1.0"}}},
                         {"instructions", kInstructions}});
  }

  void notification(const std::string& method, const Json& params) {
    if (method != "notifications/cancelled") return;  // initialized, progress, others: nothing
    if (!params.contains("requestId") || !valid_id(params["requestId"])) return;
    std::lock_guard lock(mutex);
    const auto job = jobs.find(dump_compact(params["requestId"]));
    if (job == jobs.end()) return;
    job->second->cancelled.store(true);
    if (job->second == running) gate::interrupt_subjects();
  }

  void call(const Json& id, const Json& params, const std::function<void(const Json&)>& emit,
            const std::function<void(std::shared_ptr<Job>)>* enqueue) {
    if (!params.contains("name") || !params["name"].is_string()) {
      emit(error_response(id, kInvalidParams, "Invalid params: tools/call needs name (a string)"));
      return;
    }
    const std::string name = params["name"].get<std::string>();
    const Tool* tool = find_tool(name);
    if (tool == nullptr) {
      std::string names;
      for (const auto& known : all_tools()) names += (names.empty() ? "" : ", ") + known.name;
      emit(error_response(id, kInvalidParams, "Unknown tool: " + name + " (tools: " + names + ")"));
      return;
    }
    Json token = nullptr;
    if (params.contains("_meta") && params["_meta"].is_object() &&
        params["_meta"].contains("progressToken") && valid_id(params["_meta"]["progressToken"])) {
      token = params["_meta"]["progressToken"];
    }
    const Json arguments = params.contains("arguments") ? params["arguments"] : Json(nullptr);
    auto job = std::make_shared<Job>();
    job->id = id;
    job->tool = tool;
    job->arguments = arguments;
    job->progress = std::make_shared<ProgressSink>(token, emit);
    if (enqueue != nullptr && tool->long_running) {
      (*enqueue)(job);
      return;
    }
    emit(response(id, call_result(execute(*tool, arguments, *job->progress, &job->cancelled))));
  }
};

Server::Server(ServerSettings settings) : impl_(std::make_unique<Impl>()) {
  impl_->settings = std::move(settings);
}

Server::~Server() = default;

std::vector<std::string> Server::handle_line(std::string_view line) {
  std::vector<std::string> out;
  impl_->dispatch(
      line, [&out](const Json& message) { out.push_back(dump_compact(message)); }, nullptr);
  return out;
}

int Server::serve(std::istream& in, const std::function<void(std::string_view)>& write_line) {
  Impl& impl = *impl_;
  std::mutex write_mutex;
  const std::function<void(const Json&)> emit = [&](const Json& message) {
    const std::string text = dump_compact(message);
    std::lock_guard lock(write_mutex);
    write_line(text);
  };
  const std::function<void(std::shared_ptr<Job>)> enqueue = [&impl](std::shared_ptr<Job> job) {
    std::lock_guard lock(impl.mutex);
    impl.jobs[dump_compact(job->id)] = job;
    impl.queue.push_back(std::move(job));
    impl.wake.notify_all();
  };

  // Long calls run here, one at a time: interrupt_subjects() stops every subject of this process,
  // so two runs at once could not be cancelled separately.
  std::thread worker([&impl, &emit] {
    std::unique_lock lock(impl.mutex);
    while (true) {
      impl.wake.wait(lock, [&impl] { return impl.stopping || !impl.queue.empty(); });
      if (impl.queue.empty()) return;  // stopping
      std::shared_ptr<Job> job = impl.queue.front();
      impl.queue.pop_front();
      if (job->cancelled.load()) {
        impl.jobs.erase(dump_compact(job->id));
        continue;
      }
      impl.running = job;
      job->started = Clock::now();
      lock.unlock();
      const Json result = impl.execute(*job->tool, job->arguments, *job->progress, &job->cancelled);
      lock.lock();
      impl.running = nullptr;
      impl.jobs.erase(dump_compact(job->id));
      // A cancelled request gets no response (the client has stopped waiting for it).
      if (!job->cancelled.load()) emit(response(job->id, call_result(result)));
    }
  });
  // Heartbeat progress for the running call, and repeated interrupts while a cancelled call is
  // still running (a subject started after the cancel must stop too).
  std::thread monitor([&impl] {
    std::unique_lock lock(impl.mutex);
    while (!impl.stopping || impl.running) {
      impl.wake.wait_for(lock, kMonitorTick);
      if (!impl.running) continue;
      const std::shared_ptr<Job> job = impl.running;
      lock.unlock();
      if (job->cancelled.load()) {
        gate::interrupt_subjects();
      } else {
        job->progress->heartbeat(job->started);
      }
      lock.lock();
    }
  });

  std::string line;
  while (std::getline(in, line)) impl.dispatch(line, emit, &enqueue);

  // EOF: the client is gone. Cancel what is queued and running, and wait for the worker.
  {
    std::lock_guard lock(impl.mutex);
    impl.stopping = true;
    for (auto& job : impl.queue) job->cancelled.store(true);
    impl.queue.clear();
    if (impl.running) {
      impl.running->cancelled.store(true);
      gate::interrupt_subjects();
    }
    impl.wake.notify_all();
  }
  worker.join();
  {
    std::lock_guard lock(impl.mutex);
    impl.wake.notify_all();
  }
  monitor.join();
  return 0;
}

}  // namespace loupe::mcp
