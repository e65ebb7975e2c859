// `loupe trace analyze|diff|export`: thin commands over src/trace.
#include <malloc.h>

#include <cstdint>
#include <filesystem>
#include <iostream>
#include <memory>
#include <system_error>

#include "cli/commands.hpp"
#include "core/json.hpp"
#include "trace/analyze/analyze.hpp"
#include "trace/export/chrome_export.hpp"
#include "trace/import/import.hpp"

namespace loupe::cli {
namespace {

struct TraceOptions {
  std::vector<std::string> files;
  std::vector<std::string> classes;
  std::string overlap;
  std::string window;
  std::string gap_threshold = "100us";
  std::string iteration;
  bool detail = false;
  bool json = false;
  std::string chrome_out;
  std::vector<int> ranks;  // --rank: one per file
  unsigned threads = 0;    // --threads: for the analyses; 0 picks
};

trace::AnalyzeRequest make_request(const TraceOptions& options) {
  trace::AnalyzeRequest request;
  for (const std::string& text : options.classes)
    request.classes.push_back(trace::parse_class(text));
  if (!options.overlap.empty()) {
    const size_t comma = options.overlap.find(',');
    if (comma == std::string::npos || comma == 0 || comma + 1 == options.overlap.size()) {
      throw Error(ErrorCode::kUsage, "--overlap '" + options.overlap + "' is not A,B",
                  "name two classes defined with --class, e.g. --overlap compute,transfer");
    }
    request.overlap =
        std::make_pair(options.overlap.substr(0, comma), options.overlap.substr(comma + 1));
  }
  request.window_class = options.window;
  request.gap_threshold_ns = trace::parse_duration_ns("--gap-threshold", options.gap_threshold);
  request.iteration = options.iteration;
  request.detail = options.detail;
  request.threads = options.threads;
  return request;
}

std::string quote(const std::string& text) {
  if (text.find_first_of(" '\"$&|;<>()*?[]\\") == std::string::npos) return text;
  std::string out = "'";
  for (char character : text)
    out += character == '\'' ? std::string("'\\''") : std::string(1, character);
  return out + "'";
}

std::string reproduce_line(const std::string& verb, const TraceOptions& options) {
  std::string line = "loupe trace " + verb;
  for (const std::string& file : options.files) line += " " + quote(file);
  if (!options.ranks.empty()) {
    std::string list;
    for (int rank : options.ranks) list += (list.empty() ? "" : ",") + std::to_string(rank);
    line += " --rank " + list;
  }
  for (const std::string& text : options.classes) line += " --class " + quote(text);
  if (!options.overlap.empty()) line += " --overlap " + quote(options.overlap);
  if (!options.window.empty()) line += " --window " + quote(options.window);
  if (options.gap_threshold != "100us") line += " --gap-threshold " + options.gap_threshold;
  if (!options.iteration.empty()) line += " --iteration " + quote(options.iteration);
  return line;
}

void print(const Envelope& envelope, bool json) {
  if (json) {
    std::cout << render_envelope(envelope) << "\n";
    return;
  }
  for (const Finding& finding : envelope.findings) {
    std::cout << "[" << severity_name(finding.severity) << "] " << finding.id << ": "
              << finding.claim << "\n";
    if (!finding.evidence.events.empty()) {
      const EventRef& event = finding.evidence.events.front();
      // Relative to the trace's start (data.time_origin_ns), as a person reads a time line.
      std::cout << "    evidence: event " << event.id << " " << event.name << " on " << event.track
                << " at +" << trace::format_duration(event.start_ns) << " for "
                << trace::format_duration(event.end_ns - event.start_ns) << "\n";
    }
    std::cout << "    next: " << finding.next << "\n";
  }
  if (envelope.data.contains("alignment")) {
    std::cout << "clocks: " << envelope.data["alignment"].get<std::string>() << "\n";
  }
  if (envelope.data.contains("collectives")) {
    const Json& collectives = envelope.data["collectives"];
    std::cout << "ranks: " << collectives["clock"].get<std::string>() << "\n";
    for (const Json& rank : collectives["ranks"]) {
      std::cout << "  rank " << rank["rank"].get<int>() << ": "
                << rank["collectives"].get<uint64_t>() << " collectives, last at "
                << rank["arrived_last"].get<uint64_t>() << ", communication "
                << trace::format_duration(rank["comm_ns"].get<int64_t>()) << " (exposed "
                << trace::format_duration(rank["exposed_ns"].get<int64_t>()) << ", waiting "
                << trace::format_duration(rank["waited_ns"].get<int64_t>()) << ")\n";
    }
  }
  for (size_t index = 0; index < static_cast<size_t>(Stat::kCount); ++index) {
    const auto stat = static_cast<Stat>(index);
    if (envelope.stats.count(stat) == 0) continue;
    const StatInfo& info = stat_info(stat);
    std::cout << "stats: " << info.name << " = " << envelope.stats.count(stat) << " ("
              << stat_severity_name(info.severity) << ": " << info.description << ")\n";
  }
  if (envelope.truncated) {
    std::cout << "(truncated: " << envelope.data.value("truncation", std::string()) << ")\n";
  }
}

void add_analysis_options(CLI::App* command, TraceOptions& options) {
  command->add_option("--class", options.classes,
                      "NAME=SELECTOR; selector terms joined by '&': name:REGEX, cat:C, thread:X, "
                      "stream:X, track:X, kind:thread|gpu_stream (docs/formats.md)");
  command->add_option("--overlap", options.overlap,
                      "A,B: overlap and exposed time of class A under B");
  command->add_option("--window", options.window, "CLASS: also per instance of this class");
  command->add_option("--gap-threshold", options.gap_threshold,
                      "shortest idle interval reported (default 100us)");
  command->add_option("--iteration", options.iteration,
                      "PATTERN: the ranges whose critical path is walked (default ProfilerStep#N)");
  command
      ->add_option("--rank", options.ranks,
                   "R,R,...: the rank of each file, in order (overrides distributedInfo and "
                   "the file name; -1 keeps them)")
      ->delimiter(',');
  command
      ->add_option("--threads", options.threads,
                   "threads the analyses run on, 1 for one after another (default 0: up to 4 "
                   "of the machine's); the findings are the same")
      ->check(CLI::Range(0u, 256u));
  command->add_flag("--detail", options.detail, "every finding and table row");
  command->add_flag("--json", options.json, "print one JSON envelope");
}

// Inputs from this size on (their bytes on disk, so a pipe counts nothing) make fresh pages the
// dearest thing the import and the analyses touch: malloc then keeps freed blocks of up to 32 MiB
// (the most glibc accepts) in its arena and up to 1 GiB of free arena top, so a part reader's
// columns, freed once its part is appended, become finish()'s and the analyses' vectors instead
// of pages faulted in again. `loupe trace analyze` of a 753 MB Kineto file, three interleaved
// runs each (2026-12-07 13:11 UTC, load ~2): minor faults 27.1-28.0 k -> 13.0-13.3 k, system time
// 0.65-0.76 s -> 0.25-0.39 s, wall 1.45-1.48 s -> 1.12-1.17 s, peak 235-247 MB -> 263-275 MB.
// Below it glibc's own thresholds stay: on a 50 MB file the kept blocks fragment the arena more
// than they save (peak 47-49 MB with glibc's, 71-73 MB kept).
constexpr uintmax_t kKeepFreedBlocksFromBytes = uintmax_t{256} << 20;

void keep_freed_blocks_for(const std::vector<std::string>& files) {
  uintmax_t total = 0;
  for (const std::string& file : files) {
    std::error_code error;
    const uintmax_t size = std::filesystem::file_size(file, error);
    if (!error) total += size;
  }
  if (total < kKeepFreedBlocksFromBytes) return;
  ::mallopt(M_MMAP_THRESHOLD, 32 << 20);
  ::mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

void add_trace_command(CLI::App& app, CommandResult& result) {
  CLI::App* trace = app.add_subcommand("trace", "analyze, compare and export traces");
  trace->require_subcommand(1);
  auto options = std::make_shared<TraceOptions>();

  CLI::App* analyze = trace->add_subcommand(
      "analyze", "breakdown, overlap, locks and gaps of one workload's trace files");
  analyze->add_option("files", options->files, "loupe binary or Chrome/Kineto JSON (.gz too)")
      ->required();
  add_analysis_options(analyze, *options);
  analyze->callback([options, &result] {
    result.kind = "trace.analyze";
    const trace::AnalyzeRequest request = make_request(*options);
    keep_freed_blocks_for(options->files);
    const trace::Model model =
        trace::load_traces(options->files, /*keep_args=*/false, options->ranks);
    Envelope envelope = trace::analyze(model, request);
    for (Finding& finding : envelope.findings)
      finding.reproduce = reproduce_line("analyze", *options);
    print(envelope, result.json);
    result.exit_code = 0;
  });

  CLI::App* diff = trace->add_subcommand("diff", "compare two traces of one workload as findings");
  diff->add_option("files", options->files, "trace A then trace B")->required()->expected(2);
  add_analysis_options(diff, *options);
  diff->callback([options, &result] {
    result.kind = "trace.diff";
    const trace::AnalyzeRequest request = make_request(*options);
    keep_freed_blocks_for(options->files);
    const trace::Model a = trace::load_traces({options->files[0]});
    const trace::Model b = trace::load_traces({options->files[1]});
    Envelope envelope = trace::diff(a, b, request);
    for (Finding& finding : envelope.findings) finding.reproduce = reproduce_line("diff", *options);
    print(envelope, result.json);
    result.exit_code = 0;
  });

  CLI::App* export_command =
      trace->add_subcommand("export", "write a trace as Chrome JSON (Perfetto UI)");
  export_command->add_option("files", options->files, "the trace(s) to convert")->required();
  export_command->add_option("--chrome", options->chrome_out, "output .json path")->required();
  export_command->add_flag("--json", options->json, "print one JSON envelope");
  export_command->callback([options, &result] {
    result.kind = "trace.export";
    const trace::Model model = trace::load_traces(options->files, /*keep_args=*/true);
    try {
      trace::export_chrome_json(model, options->chrome_out);
    } catch (const Error& error) {
      throw Error(error.code(), "--chrome: " + error.message(), error.hint());
    }
    Envelope envelope;
    envelope.kind = "trace.export";
    envelope.verdict = Verdict::kNone;
    envelope.stats = model.stats;
    envelope.data = {{"out", options->chrome_out},
                     {"slices", model.slices.size()},
                     {"tracks", model.tracks.size()},
                     {"alignment", model.alignment}};
    if (result.json) {
      print(envelope, true);
    } else {
      std::cout << "wrote " << options->chrome_out << " (" << model.slices.size() << " slices on "
                << model.tracks.size() << " tracks); open it in https://ui.perfetto.dev\n";
      print(envelope, false);
    }
    result.exit_code = 0;
  });
}

}  // namespace

LOUPE_REGISTER_COMMAND(40, add_trace_command);

}  // namespace loupe::cli
