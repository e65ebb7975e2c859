// The Chrome trace (Kineto shape) of CUPTI activity: detail::chrome_trace (cupti_tracer.hpp).
// No CUPTI calls here, so tests check the format against src/trace/import without a GPU.
#include <unistd.h>

#include <cstdio>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>

#include "trace/cupti/cupti_tracer.hpp"

namespace loupe::trace::cupti::detail {
namespace {

void escape_into(std::string& out, std::string_view text) {
  out += '"';
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char code[8];
      std::snprintf(code, sizeof(code), "\\u%04x", c);
      out += code;
    } else {
      out += c;
    }
  }
  out += '"';
}

// Microseconds with nanosecond digits, as Chrome traces want them.
std::string micros(uint64_t ns) {
  char text[40];
  std::snprintf(text, sizeof(text), "%llu.%03llu", static_cast<unsigned long long>(ns / 1000),
                static_cast<unsigned long long>(ns % 1000));
  return text;
}

// CUpti_ActivitySynchronizationType: 1 event, 2 stream wait event, 3 stream, 4 context (device).
const char* sync_name(uint32_t type) {
  switch (type) {
    case 1:
      return "cuda sync: event";
    case 2:
      return "cuda sync: stream wait event";
    case 3:
      return "cuda sync: stream";
    case 4:
      return "cuda sync: device";
    default:
      return "cuda sync";
  }
}

}  // namespace

std::string chrome_trace(const Activity& activity,
                         const std::function<std::string(uint32_t)>& runtime_name) {
  const SessionCounts& counts = activity.counts;
  const uint32_t process = static_cast<uint32_t>(getpid());
  std::unordered_map<uint64_t, const ApiRecord*> call_of;  // correlation → the runtime call
  for (const ApiRecord& call : activity.api) call_of[call.correlation] = &call;

  std::string out;
  out.reserve(256 * (activity.gpu.size() + activity.api.size() + activity.sync.size()) + 1024);
  out += "{\"schemaVersion\":1,\"displayTimeUnit\":\"ns\",\"loupeClockDomain\":\"";
  out += activity.monotonic ? "monotonic" : "cupti";
  out += "\",";
  out += "\"loupeCuptiStats\":{\"kernels\":" + std::to_string(counts.kernels) +
         ",\"memcpys\":" + std::to_string(counts.memcpys) +
         ",\"memsets\":" + std::to_string(counts.memsets) +
         ",\"synchronizations\":" + std::to_string(counts.synchronizations) +
         ",\"runtime_calls\":" + std::to_string(counts.runtime_calls) +
         ",\"dropped\":" + std::to_string(counts.dropped) + "},\"traceEvents\":[\n";
  bool first = true;
  auto begin_event = [&] {
    if (!first) out += ",\n";
    first = false;
  };
  std::map<uint32_t, std::map<uint32_t, bool>> streams;  // device → streams seen
  for (const GpuRecord& record : activity.gpu) streams[record.device][record.stream] = true;
  for (const auto& [device, device_streams] : streams) {
    begin_event();
    out += "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" + std::to_string(device) +
           ",\"tid\":0,\"args\":{\"name\":\"GPU " + std::to_string(device) + "\"}}";
    for (const auto& [stream, seen] : device_streams) {
      begin_event();
      out += "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + std::to_string(device) +
             ",\"tid\":" + std::to_string(stream) + ",\"args\":{\"name\":\"stream " +
             std::to_string(stream) + "\"}}";
    }
  }
  for (const ApiRecord& call : activity.api) {
    begin_event();
    out += "{\"ph\":\"X\",\"cat\":\"cuda_runtime\",\"name\":";
    escape_into(out, runtime_name(call.callback));
    out += ",\"pid\":" + std::to_string(call.process) + ",\"tid\":" + std::to_string(call.thread) +
           ",\"ts\":" + micros(call.start) + ",\"dur\":" + micros(call.end - call.start) +
           ",\"args\":{\"correlation\":" + std::to_string(call.correlation) + "}}";
  }
  for (const GpuRecord& record : activity.gpu) {
    static const char* const kCategories[] = {"kernel", "gpu_memcpy", "gpu_memset"};
    begin_event();
    out += "{\"ph\":\"X\",\"cat\":\"";
    out += kCategories[static_cast<int>(record.kind)];
    out += "\",\"name\":";
    escape_into(out, record.name);
    out += ",\"pid\":" + std::to_string(record.device) +
           ",\"tid\":" + std::to_string(record.stream) + ",\"ts\":" + micros(record.start) +
           ",\"dur\":" + micros(record.end - record.start) +
           ",\"args\":{\"correlation\":" + std::to_string(record.correlation) +
           ",\"device\":" + std::to_string(record.device) +
           ",\"stream\":" + std::to_string(record.stream);
    if (record.kind == GpuKind::kKernel) {
      out += ",\"grid\":[" + std::to_string(record.grid[0]) + "," + std::to_string(record.grid[1]) +
             "," + std::to_string(record.grid[2]) + "],\"block\":[" +
             std::to_string(record.block[0]) + "," + std::to_string(record.block[1]) + "," +
             std::to_string(record.block[2]) +
             "],\"registers per thread\":" + std::to_string(record.registers);
    } else {
      out += ",\"bytes\":" + std::to_string(record.bytes);
    }
    out += "}}";
    // The flow from the runtime call that launched this work (Kineto's "ac2g").
    const auto call = call_of.find(record.correlation);
    if (call == call_of.end()) continue;
    const std::string id = std::to_string(record.correlation);
    begin_event();
    out += "{\"ph\":\"s\",\"cat\":\"ac2g\",\"name\":\"ac2g\",\"id\":" + id +
           ",\"pid\":" + std::to_string(call->second->process) +
           ",\"tid\":" + std::to_string(call->second->thread) +
           ",\"ts\":" + micros(call->second->start) + "}";
    begin_event();
    out += "{\"ph\":\"f\",\"bp\":\"e\",\"cat\":\"ac2g\",\"name\":\"ac2g\",\"id\":" + id +
           ",\"pid\":" + std::to_string(record.device) +
           ",\"tid\":" + std::to_string(record.stream) + ",\"ts\":" + micros(record.start) + "}";
  }
  for (const SyncRecord& wait : activity.sync) {
    const auto call = call_of.find(wait.correlation);
    begin_event();
    out += "{\"ph\":\"X\",\"cat\":\"cuda_sync\",\"name\":\"";
    out += sync_name(wait.type);
    out += "\",\"pid\":" + std::to_string(call != call_of.end() ? call->second->process : process) +
           ",\"tid\":" + std::to_string(call != call_of.end() ? call->second->thread : 0) +
           ",\"ts\":" + micros(wait.start) + ",\"dur\":" + micros(wait.end - wait.start) +
           ",\"args\":{\"correlation\":" + std::to_string(wait.correlation) +
           ",\"stream\":" + std::to_string(wait.stream) + "}}";
  }
  out += "\n]}\n";
  return out;
}

}  // namespace loupe::trace::cupti::detail
