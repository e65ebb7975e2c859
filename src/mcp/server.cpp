#include "mcp/server.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
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
// Server-defined (-32000 to -32099); the MCP TypeScript SDK's RequestTimeout has the same code.
constexpr int kRequestTimeout = -32001;

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
  // Set by whichever decides the request's outcome first (its result, its time bound, a
  // client's cancel): exactly one of them answers, or none for a cancel.
  std::atomic<bool> settled{false};
  Clock::time_point started = Clock::now();
  double time_bound_s = 0;
  Clock::time_point deadline() const {
    return started +
           std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(time_bound_s));
  }
};

// A queue of calls and the one running from it. Long calls (which run subjects) have a lane of
// their own: interrupt_subjects() stops every subject of this process, so two runs at once could
// not be cancelled separately. Every other call runs on the quick lane, so the reader thread
// stays free to answer pings and cancels while a call works.
struct Lane {
  std::deque<std::shared_ptr<Job>> queue;
  std::shared_ptr<Job> running;
  bool runs_subjects = false;
};

// Lines of at most `max_bytes` from a stream, read in chunks of what is available: a longer line
// is consumed to its newline and reported by its length, never held.
class LineReader {
 public:
  LineReader(std::istream& in, size_t max_bytes)
      : in_(*in.rdbuf()), max_bytes_(max_bytes), chunk_(size_t{1} << 16) {}

  // The next line, without its newline, into `line`; false at EOF. A line longer than max_bytes
  // leaves `line` empty and sets `too_long` the moment it passes the bound, so the client hears
  // at once; the rest of that line is skipped by the next call, never buffered.
  bool next(std::string& line, bool& too_long) {
    line.clear();
    too_long = false;
    while (skipping_) {
      if (begin_ == end_ && !fill()) return false;
      const char* start = chunk_.data() + begin_;
      const auto* newline = static_cast<const char*>(std::memchr(start, '\n', end_ - begin_));
      if (newline == nullptr) {
        begin_ = end_;
        continue;
      }
      begin_ += static_cast<size_t>(newline - start) + 1;
      skipping_ = false;
    }
    bool any = false;
    while (true) {
      if (begin_ == end_ && !fill()) return any;
      any = true;
      const char* start = chunk_.data() + begin_;
      const auto* newline = static_cast<const char*>(std::memchr(start, '\n', end_ - begin_));
      const size_t take = newline != nullptr ? static_cast<size_t>(newline - start) : end_ - begin_;
      if (line.size() + take > max_bytes_) {
        too_long = true;
        std::string().swap(line);
        begin_ += take;
        if (newline != nullptr) {
          ++begin_;
        } else {
          skipping_ = true;
        }
        return true;
      }
      line.append(start, take);
      begin_ += take;
      if (newline != nullptr) {
        ++begin_;
        return true;
      }
    }
  }

 private:
  // Reads what the stream has ready (waiting for at least one byte); false at EOF.
  bool fill() {
    begin_ = 0;
    end_ = 0;
    std::streamsize ready = in_.in_avail();
    if (ready <= 0) {
      const int first = in_.sbumpc();
      if (first == std::char_traits<char>::eof()) return false;
      chunk_[end_++] = static_cast<char>(first);
      ready = in_.in_avail();
    }
    if (ready > 0) {
      const auto room = static_cast<std::streamsize>(chunk_.size() - end_);
      end_ += static_cast<size_t>(in_.sgetn(chunk_.data() + end_, std::min(ready, room)));
    }
    return true;
  }

  std::streambuf& in_;
  size_t max_bytes_;
  std::vector<char> chunk_;
  size_t begin_ = 0;
  size_t end_ = 0;
  bool skipping_ = false;  // inside a line already answered as too long
};

std::string seconds_text(double seconds) {
  std::string text = std::to_string(seconds);
  text.erase(text.find_last_not_of('0') + 1);
  if (!text.empty() && text.back() == '.') text.pop_back();
  return text;
}

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
  Lane long_lane{{}, nullptr, true};
  Lane quick_lane;
  std::map<std::string, std::shared_ptr<Job>> jobs;  // by serialised request id
  bool stopping = false;

  Json oversized_message() const {
    return error_response(
        nullptr, kInvalidRequest,
        "Invalid Request: a message exceeds the maximum message size of " +
            std::to_string(settings.max_message_bytes) +
            " bytes; the rest of its line is skipped (loupe mcp --max-message-size BYTES raises "
            "the limit)");
  }

  static Json timed_out(const Job& job) {
    return error_response(job.id, kRequestTimeout,
                          "Request timed out: " + job.tool->name + " ran past its time bound of " +
                              seconds_text(job.time_bound_s) +
                              " s and was cancelled (loupe mcp --tool-timeout " + job.tool->name +
                              "=SECONDS raises it)");
  }

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
    } catch (const std::bad_alloc&) {
      // Readers name their input when they can; either way the input was too large, not loupe
      // broken, and the server stays up for the next request.
      return error_envelope(tool.envelope_kind,
                            Error(ErrorCode::kInput,
                                  tool.name + ": the input needs more memory than the server "
                                              "could allocate",
                                  "pass fewer or smaller inputs"));
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
    if (line.size() > settings.max_message_bytes) {
      emit(oversized_message());
      return;
    }
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
    job->second->settled.store(true);
    job->second->cancelled.store(true);
    if (job->second == long_lane.running) gate::interrupt_subjects();
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
    if (enqueue != nullptr) {
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
    (job->tool->long_running ? impl.long_lane : impl.quick_lane).queue.push_back(std::move(job));
    impl.wake.notify_all();
  };

  // Each lane runs its calls one at a time. A call's time bound starts when it starts running.
  const auto run_lane = [&impl, &emit](Lane& lane) {
    std::unique_lock lock(impl.mutex);
    while (true) {
      impl.wake.wait(lock, [&] { return impl.stopping || !lane.queue.empty(); });
      if (lane.queue.empty()) return;  // stopping
      std::shared_ptr<Job> job = lane.queue.front();
      lane.queue.pop_front();
      if (job->cancelled.load()) {
        impl.jobs.erase(dump_compact(job->id));
        continue;
      }
      lane.running = job;
      job->started = Clock::now();
      job->time_bound_s = time_bound_s(impl.settings, *job->tool);
      lock.unlock();
      const Json result = impl.execute(*job->tool, job->arguments, *job->progress, &job->cancelled);
      const bool late = Clock::now() > job->deadline();
      lock.lock();
      lane.running = nullptr;
      impl.jobs.erase(dump_compact(job->id));
      // One answer per request: none for a cancelled one (the client stopped waiting), the
      // time-out error for one that ran past its bound, else the result.
      if (!job->settled.exchange(true)) {
        if (late) {
          job->cancelled.store(true);
          emit(Impl::timed_out(*job));
        } else {
          emit(response(job->id, call_result(result)));
        }
      }
    }
  };
  std::thread long_worker(run_lane, std::ref(impl.long_lane));
  std::thread quick_worker(run_lane, std::ref(impl.quick_lane));
  // Heartbeat progress for the running calls; a call past its time bound is cancelled as a
  // client's cancel would be (its subjects interrupted, again on every tick while it still runs,
  // so that a subject started after the cancel stops too) and answered with the time-out error.
  std::thread monitor([&impl, &emit] {
    std::unique_lock lock(impl.mutex);
    while (!impl.stopping || impl.long_lane.running || impl.quick_lane.running) {
      impl.wake.wait_for(lock, kMonitorTick);
      for (Lane* lane : {&impl.long_lane, &impl.quick_lane}) {
        if (!lane->running) continue;
        const std::shared_ptr<Job> job = lane->running;
        lock.unlock();
        if (!job->cancelled.load() && Clock::now() > job->deadline() &&
            !job->settled.exchange(true)) {
          job->cancelled.store(true);
          emit(Impl::timed_out(*job));
        }
        if (job->cancelled.load()) {
          if (lane->runs_subjects) gate::interrupt_subjects();
        } else {
          job->progress->heartbeat(job->started);
        }
        lock.lock();
      }
    }
  });

  LineReader reader(in, impl.settings.max_message_bytes);
  std::string line;
  bool too_long = false;
  while (reader.next(line, too_long)) {
    if (too_long) {
      emit(impl.oversized_message());
    } else {
      impl.dispatch(line, emit, &enqueue);
    }
  }

  // EOF: the client is gone. Cancel the long calls, queued and running; the quick ones finish
  // (within their time bounds) and answer. Then wait for the workers.
  {
    std::lock_guard lock(impl.mutex);
    impl.stopping = true;
    Lane& lane = impl.long_lane;
    for (auto& job : lane.queue) job->cancelled.store(true);
    lane.queue.clear();
    if (lane.running) {
      lane.running->settled.store(true);
      lane.running->cancelled.store(true);
      gate::interrupt_subjects();
    }
    impl.wake.notify_all();
  }
  long_worker.join();
  quick_worker.join();
  {
    std::lock_guard lock(impl.mutex);
    impl.wake.notify_all();
  }
  monitor.join();
  return 0;
}

}  // namespace loupe::mcp
