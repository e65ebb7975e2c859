// The default answers on the seeded synthetic traces of tests/fixtures/kineto/synthetic
// (make_synthetic_traces.py): every figure is recomputed here straight from the file's raw events
// (nlohmann-json, intervals by hand), never through the model, and compared exactly.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <tuple>

#include "core/json.hpp"
#include "trace/analyze/analyze.hpp"
#include "trace/import/import.hpp"

namespace loupe::trace {
namespace {

namespace fs = std::filesystem;
const fs::path kSynthetic = fs::path(LOUPE_KINETO_FIXTURE_DIR) / "synthetic";

std::string gunzip(const fs::path& path) {
  gzFile file = gzopen(path.c_str(), "rb");
  EXPECT_NE(file, nullptr) << path;
  std::string text;
  char buffer[1 << 16];
  int read = 0;
  while ((read = gzread(file, buffer, sizeof(buffer))) > 0) text.append(buffer, read);
  gzclose(file);
  return text;
}

// One complete event of the file, times in ns.
struct Raw {
  std::string name, cat;
  int64_t pid = 0, tid = 0, start = 0, end = 0;
  Json args;
};

struct RawTrace {
  std::vector<Raw> events;
  int64_t origin = INT64_MAX;  // the earliest start: loupe's time origin for one file
};

// A pid or tid: a number, or a string of one; a name (a real trace's "Spans" lane) is -1.
int64_t as_int(const Json& value) {
  if (!value.is_string()) return value.get<int64_t>();
  const std::string text = value.get<std::string>();
  const bool number = !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c)) != 0;
  });
  return number ? std::stoll(text) : -1;
}

// A Kineto time in µs (an integer, or a fraction as real traces write it) in ns, rounded.
int64_t micros_to_ns(const Json& value) {
  if (value.is_number_integer()) return value.get<int64_t>() * 1000;
  return std::llround(value.get<double>() * 1000.0);
}

RawTrace raw_events(const fs::path& path) {
  const Json document = Json::parse(gunzip(path));
  RawTrace trace;
  for (const Json& event : document.at("traceEvents")) {
    if (event.value("ph", "") != "X") continue;
    Raw raw;
    raw.name = event.value("name", "");
    raw.cat = event.value("cat", "");
    raw.pid = as_int(event.at("pid"));
    raw.tid = as_int(event.at("tid"));
    raw.start = micros_to_ns(event.at("ts"));
    raw.end = raw.start + micros_to_ns(event.at("dur"));
    raw.args = event.value("args", Json::object());
    trace.origin = std::min(trace.origin, raw.start);
    trace.events.push_back(std::move(raw));
  }
  return trace;
}

bool is_gpu(const Raw& event) { return event.cat == "kernel" || event.cat == "gpu_memcpy"; }

std::vector<Interval> merged(std::vector<Interval> intervals) {
  std::sort(intervals.begin(), intervals.end());
  std::vector<Interval> out;
  for (const Interval& interval : intervals) {
    if (interval.second <= interval.first) continue;
    if (!out.empty() && interval.first <= out.back().second) {
      out.back().second = std::max(out.back().second, interval.second);
    } else {
      out.push_back(interval);
    }
  }
  return out;
}

int64_t length(const std::vector<Interval>& intervals) {
  int64_t total = 0;
  for (const Interval& interval : intervals) total += interval.second - interval.first;
  return total;
}

int64_t both(const std::vector<Interval>& left, const std::vector<Interval>& right) {
  int64_t total = 0;
  for (const Interval& a : left) {
    for (const Interval& b : right) {
      total += std::max<int64_t>(0, std::min(a.second, b.second) - std::max(a.first, b.first));
    }
  }
  return total;
}

int64_t covered_by(const std::vector<Interval>& intervals, int64_t start, int64_t end) {
  return both(merged(intervals), {{start, end}});
}

Envelope analyze_files(const std::vector<std::string>& names) {
  std::vector<std::string> paths;
  for (const std::string& name : names) paths.push_back((kSynthetic / name).string());
  AnalyzeRequest request;
  request.detail = true;  // every finding, not the top ones
  return analyze(load_traces(paths), request);
}

const Finding* with_id(const Envelope& envelope, const std::string& id) {
  for (const Finding& finding : envelope.findings) {
    if (finding.id == id) return &finding;
  }
  return nullptr;
}

double metric(const Finding& finding, const std::string& name) {
  for (const auto& [key, value] : finding.evidence.metrics) {
    if (key == name) return value;
  }
  ADD_FAILURE() << "no metric " << name << " in " << finding.id;
  return -1;
}

// When each gloo:all_reduce range of one rank's trace (in start order) had the rank's contribution
// ready, by docs/multi-rank.md's rule: the range's start, or, where the first synchronisation
// inside the range was blocked while a device-to-host copy of the rank's ended, the latest such
// copy's end (gloo stages a CUDA tensor through that copy, which waits for the compute stream).
std::vector<int64_t> gloo_arrivals(const RawTrace& trace) {
  std::vector<const Raw*> ranges;
  std::vector<int64_t> copy_ends;
  for (const Raw& event : trace.events) {
    if (event.name == "gloo:all_reduce" && event.cat == "user_annotation") ranges.push_back(&event);
    if (event.cat == "gpu_memcpy" && event.name.find("DtoH") != std::string::npos) {
      copy_ends.push_back(event.end);
    }
  }
  std::sort(ranges.begin(), ranges.end(),
            [](const Raw* left, const Raw* right) { return left->start < right->start; });
  std::sort(copy_ends.begin(), copy_ends.end());
  std::vector<int64_t> arrivals;
  for (const Raw* range : ranges) {
    const Raw* sync = nullptr;
    for (const Raw& event : trace.events) {
      if (&event == range || event.pid != range->pid || event.tid != range->tid) continue;
      if (event.start < range->start || event.start >= range->end) continue;
      const bool synchronises = event.name.find("Synchronize") != std::string::npos ||
                                event.name == "aten::item" ||
                                event.name == "aten::_local_scalar_dense";
      if (synchronises && (sync == nullptr || event.start < sync->start)) sync = &event;
    }
    int64_t arrival = range->start;
    if (sync != nullptr) {
      const int64_t until = std::min(sync->end, range->end);
      const auto after = std::upper_bound(copy_ends.begin(), copy_ends.end(), until);
      if (after != copy_ends.begin() && *std::prev(after) >= sync->start) {
        arrival = std::max(arrival, *std::prev(after));
      }
    }
    arrivals.push_back(arrival);
  }
  return arrivals;
}

// The default GPU figures of one file within [window_start, window_end], from the raw events,
// by the definitions of docs/pytorch-traces.md: ops clipped to the window; a gap of a stream is
// host sync / collective wait / host wait when the next op's launch call (same correlation id)
// began after the gap opened and, for the first two, a synchronisation on the launching thread /
// a collective in its process covers at least half of it; kernel wait when launched before and
// at most 10 us; other otherwise.
struct Expected {
  int64_t busy = 0, span = 0, kernel = 0, copy = 0, copy_under_compute = 0;
  uint64_t kernels = 0, copies = 0, launches = 0;
  std::map<int64_t, std::array<int64_t, 5>> idle;  // per stream: host, kernel, sync, coll, other
};

Expected direct_figures(const RawTrace& trace, int64_t window_start, int64_t window_end) {
  std::map<int64_t, const Raw*> runtime;  // by correlation id
  std::map<int64_t, std::vector<Interval>> syncs;
  std::vector<Interval> collectives;
  for (const Raw& event : trace.events) {
    if (event.cat == "cuda_runtime" && event.args.contains("correlation") &&
        event.args["correlation"].get<int64_t>() > 0) {
      runtime[event.args["correlation"].get<int64_t>()] = &event;
    }
    if (event.name == "cudaStreamSynchronize" || event.name == "cudaDeviceSynchronize") {
      syncs[event.tid].emplace_back(event.start, event.end);
    }
    if (event.name.rfind("gloo:", 0) == 0 || event.name.rfind("c10d::", 0) == 0 ||
        event.name == "record_param_comms") {
      collectives.emplace_back(event.start, event.end);
    }
  }
  Expected expected;
  std::vector<Interval> all, kernels, copies;
  std::map<int64_t, std::vector<const Raw*>> streams;
  std::set<int64_t> launches;
  for (const Raw& event : trace.events) {
    if (!is_gpu(event) || event.end <= window_start || event.start >= window_end) continue;
    const Interval clipped{std::max(event.start, window_start), std::min(event.end, window_end)};
    all.push_back(clipped);
    (event.cat == "kernel" ? kernels : copies).push_back(clipped);
    (event.cat == "kernel" ? expected.kernels : expected.copies) += 1;
    streams[event.tid].push_back(&event);
    launches.insert(event.args["correlation"].get<int64_t>());
  }
  expected.busy = length(merged(all));
  expected.kernel = length(merged(kernels));
  expected.copy = length(merged(copies));
  expected.copy_under_compute = both(merged(copies), merged(kernels));
  expected.launches = launches.size();
  int64_t first = INT64_MAX, last = INT64_MIN;
  for (const Interval& interval : all) {
    first = std::min(first, interval.first);
    last = std::max(last, interval.second);
  }
  expected.span = last - first;
  for (auto& [stream, ops] : streams) {
    std::sort(ops.begin(), ops.end(),
              [](const Raw* left, const Raw* right) { return left->start < right->start; });
    std::array<int64_t, 5> split{};
    int64_t until = std::min(ops.front()->end, window_end);
    for (size_t at = 1; at < ops.size(); ++at) {
      const int64_t start = std::max(ops[at]->start, window_start);
      if (start > until) {
        const int64_t gap = start - until;
        const Raw* launch = runtime.at(ops[at]->args["correlation"].get<int64_t>());
        const bool late = launch->start >= until;
        if (late && 2 * covered_by(syncs[launch->tid], until, start) >= gap) {
          split[2] += gap;
        } else if (late && 2 * covered_by(collectives, until, start) >= gap) {
          split[3] += gap;
        } else if (late) {
          split[0] += gap;
        } else if (gap <= 10'000) {
          split[1] += gap;
        } else {
          split[4] += gap;
        }
      }
      until = std::max(until, std::min(ops[at]->end, window_end));
    }
    expected.idle[stream] = split;
  }
  return expected;
}

void expect_gpu_figures(const Json& steady, const Expected& expected) {
  EXPECT_EQ(steady["busy_ns"], expected.busy);
  EXPECT_EQ(steady["span_ns"], expected.span);
  EXPECT_EQ(steady["compute_ns"], expected.kernel);
  EXPECT_EQ(steady["copy_ns"], expected.copy);
  EXPECT_EQ(steady["copy_under_compute_ns"], expected.copy_under_compute);
  EXPECT_EQ(steady["launches"]["count"], expected.launches);
  uint64_t kernels = 0, copies = 0;
  for (const Json& kind : steady["kinds"]) {
    (kind["kind"] == "kernels" ? kernels : copies) += kind["count"].get<uint64_t>();
  }
  EXPECT_EQ(kernels, expected.kernels);
  EXPECT_EQ(copies, expected.copies);
  ASSERT_EQ(steady["streams"].size(), expected.idle.size());
  for (const Json& stream : steady["streams"]) {
    const std::string label = stream["stream"];
    const int64_t id = std::stoll(label.substr(label.find("stream ") + 7));
    SCOPED_TRACE(label);
    const std::array<int64_t, 5>& split = expected.idle.at(id);
    EXPECT_EQ(stream["host_wait_ns"], split[0]);
    EXPECT_EQ(stream["kernel_wait_ns"], split[1]);
    EXPECT_EQ(stream["sync_wait_ns"], split[2]);
    EXPECT_EQ(stream["collective_wait_ns"], split[3]);
    EXPECT_EQ(stream["other_ns"], split[4]);
  }
}

// Issue 35: the warm-up cut dropped the first step's two GEMMs but kept the copies that ran under
// them, so copies looked exposed. Every figure now comes from one window, stated in the output.
TEST(SyntheticTraces, OneWarmupWindowForEveryGpuFigure) {
  const RawTrace trace = raw_events(kSynthetic / "copy_under_gemm.json.gz");
  // The window opens when the last GPU op launched inside ProfilerStep#0 ends.
  const Raw* first_step = nullptr;
  for (const Raw& event : trace.events) {
    if (event.name == "ProfilerStep#0") first_step = &event;
  }
  ASSERT_NE(first_step, nullptr);
  std::set<int64_t> warm_correlations;
  for (const Raw& event : trace.events) {
    if (event.cat == "cuda_runtime" && event.start >= first_step->start &&
        event.start < first_step->end && event.args.value("correlation", 0) > 0) {
      warm_correlations.insert(event.args["correlation"].get<int64_t>());
    }
  }
  ASSERT_EQ(warm_correlations.size(), 2u);
  int64_t opens = INT64_MIN, closes = INT64_MIN;
  for (const Raw& event : trace.events) {
    if (!is_gpu(event)) continue;
    closes = std::max(closes, event.end);
    if (warm_correlations.count(event.args["correlation"].get<int64_t>()) != 0) {
      opens = std::max(opens, event.end);
    }
  }
  const Envelope envelope = analyze_files({"copy_under_gemm.json.gz"});
  const Json& gpu = envelope.data["gpu"];
  EXPECT_EQ(gpu["window"]["start_ns"], opens - trace.origin);
  EXPECT_EQ(gpu["window"]["end_ns"], closes - trace.origin);
  // Two warm-up GEMMs and the second step's two copies, which ran under them, are before it.
  EXPECT_EQ(gpu["window"]["ops_before"], 4);
  const Expected expected = direct_figures(trace, opens, closes);
  expect_gpu_figures(gpu["steady"], expected);
  // Every copy in the window runs under a GEMM: nothing is exposed, and nothing warns.
  EXPECT_EQ(expected.copy_under_compute, expected.copy);
  const Finding* copy = with_id(envelope, "trace.gpu.copy_overlap");
  ASSERT_NE(copy, nullptr);
  EXPECT_EQ(copy->severity, Severity::kInfo);
  EXPECT_EQ(metric(*copy, "exposed_ns"), 0);
  EXPECT_NE(copy->claim.find("(steady window from "), std::string::npos) << copy->claim;
  // The whole trace, unwindowed, from the same raw events.
  expect_gpu_figures(gpu["all"], direct_figures(trace, INT64_MIN, INT64_MAX));
}

// Issue 35: gloo's run-loop thread runs the all-reduce while the main thread waits for its
// result. That is no interpreter-lock exclusion: no lock finding, a result wait instead.
TEST(SyntheticTraces, WaitingForAGlooCollectivesResultIsNoLock) {
  for (const std::vector<std::string>& files :
       std::vector<std::vector<std::string>>{{"gloo_rank0.json.gz"},
                                             {"gloo_rank1.json.gz"},
                                             {"gloo_rank0.json.gz", "gloo_rank1.json.gz"}}) {
    SCOPED_TRACE(files.size() == 2 ? "both ranks" : files[0]);
    const Envelope envelope = analyze_files(files);
    EXPECT_EQ(with_id(envelope, "trace.locks.gil_inferred"), nullptr);
    const Finding* wait = with_id(envelope, "trace.wait.result");
    ASSERT_NE(wait, nullptr);
    EXPECT_NE(wait->claim.find("pt_gloo_runloop"), std::string::npos) << wait->claim;
    EXPECT_NE(wait->claim.find("gloo:all_reduce"), std::string::npos) << wait->claim;
    EXPECT_NE(wait->claim.find("the call is a collective"), std::string::npos) << wait->claim;
    EXPECT_NE(wait->claim.find("sure: high"), std::string::npos) << wait->claim;
    EXPECT_EQ(metric(*wait, "waits"), 6);
  }
}

// The compute stream idles while the host waits for the all-reduce: that is collective wait,
// not "other", also on rank 1, whose kernels carry a correlation id but no ac2g flow.
TEST(SyntheticTraces, IdleWhileTheHostWaitsForACollectiveIsAttributed) {
  for (const std::string name : {"gloo_rank0.json.gz", "gloo_rank1.json.gz"}) {
    SCOPED_TRACE(name);
    const RawTrace trace = raw_events(kSynthetic / name);
    const Envelope envelope = analyze_files({name});
    const Json& gpu = envelope.data["gpu"];
    const Expected expected = direct_figures(trace, INT64_MIN, INT64_MAX);
    expect_gpu_figures(gpu["all"], expected);
    // Each step's all-reduce wait is collective wait; "other" keeps only the few queued ops that
    // started more than 10 us after an earlier op ended.
    const std::array<int64_t, 5>& split = expected.idle.at(7);
    EXPECT_GT(split[3], 6 * 900'000);
    EXPECT_LT(split[4], split[3] / 20);
  }
}

// Four ranks of one group; rank 3 was not profiled for one all-reduce (Kineto's "Seq" 7).
TEST(SyntheticTraces, ARankMissingOneCollectiveIsNamedAndTheRestStillMatch) {
  std::vector<std::string> files;
  for (int rank = 0; rank < 4; ++rank)
    files.push_back("missing_rank" + std::to_string(rank) + ".json.gz");
  // From the raw events: the sequence numbers each rank recorded for group 0.
  std::map<int64_t, std::set<int>> ranks_of_seq;
  for (int rank = 0; rank < 4; ++rank) {
    for (const Raw& event : raw_events(kSynthetic / files[rank]).events) {
      if (event.cat == "kernel" && event.name.rfind("ncclDevKernel", 0) == 0) {
        ranks_of_seq[event.args["Seq"].get<int64_t>()].insert(rank);
      }
    }
  }
  std::vector<std::string> expected_texts;
  for (const auto& [seq, ranks] : ranks_of_seq) {
    for (int rank = 0; rank < 4; ++rank) {
      if (ranks.count(rank) == 0) {
        expected_texts.push_back("rank " + std::to_string(rank) + " has no allreduce #" +
                                 std::to_string(seq) + " of group 0");
      }
    }
  }
  ASSERT_EQ(expected_texts, std::vector<std::string>{"rank 3 has no allreduce #7 of group 0"});
  const Envelope envelope = analyze_files(files);
  const Json& collectives = envelope.data["collectives"];
  EXPECT_EQ(collectives["matched_by"], "sequence number");
  EXPECT_EQ(collectives["matched"], ranks_of_seq.size());
  EXPECT_EQ(collectives["unmatched"], 1);
  ASSERT_EQ(collectives["mismatches"].size(), 1u);
  EXPECT_EQ(collectives["mismatches"][0]["text"], expected_texts[0]);
  const Finding* unmatched = with_id(envelope, "trace.collectives.unmatched");
  ASSERT_NE(unmatched, nullptr);
  EXPECT_EQ(unmatched->claim.rfind(expected_texts[0], 0), 0u) << unmatched->claim;
}

// Without Kineto's sequence numbers the same job matches in order, checked on name, element
// counts and dtype: the missing all-reduce is still named, not a shift of every later match.
TEST(SyntheticTraces, WithoutSequenceNumbersTheSignatureKeepsTheMatch) {
  const fs::path dir = fs::temp_directory_path() / ("loupe-noseq-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::vector<std::string> paths;
  for (int rank = 0; rank < 4; ++rank) {
    Json document =
        Json::parse(gunzip(kSynthetic / ("missing_rank" + std::to_string(rank) + ".json.gz")));
    for (Json& event : document["traceEvents"]) {
      if (event.contains("args")) event["args"].erase("Seq");
    }
    paths.push_back((dir / ("noseq_rank" + std::to_string(rank) + ".json")).string());
    std::ofstream(paths.back()) << document.dump();
  }
  const Envelope envelope = analyze(load_traces(paths), AnalyzeRequest{});
  fs::remove_all(dir);
  const Json& collectives = envelope.data["collectives"];
  EXPECT_EQ(collectives["matched_by"], "order and signature");
  EXPECT_EQ(collectives["matched"], 12);
  ASSERT_EQ(collectives["mismatches"].size(), 1u);
  EXPECT_EQ(collectives["mismatches"][0]["text"], "rank 3 has no allreduce #7 of group 0");
}

// Recent PyTorch also records each NCCL collective as a host range (`nccl:all_reduce`, with the
// same args) around the call that launches its kernel: the host calls are matched as a group of
// their own. A collective missing on a rank is said once, from the kernels (they decide); a host
// call's view is kept only where it disagrees — here rank 2's host range of #4 was not recorded,
// though its kernel was.
TEST(SyntheticTraces, AMissingCollectiveIsSaidOnceWhenHostCallsAndKernelsBothShowIt) {
  const fs::path dir = fs::temp_directory_path() / ("loupe-hostk-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::vector<std::string> paths;
  size_t host_calls = 0;
  for (int rank = 0; rank < 4; ++rank) {
    Json document =
        Json::parse(gunzip(kSynthetic / ("missing_rank" + std::to_string(rank) + ".json.gz")));
    Json added = Json::array();
    for (const Json& event : document["traceEvents"]) {
      if (event.value("name", "") != "record_param_comms") continue;
      if (rank == 2 && event["args"]["Seq"] == 4) continue;
      Json host = event;
      host["name"] = "nccl:all_reduce";
      host["ts"] = event["ts"].get<int64_t>() - 1;
      host["dur"] = event["dur"].get<int64_t>() + 2;
      added.push_back(std::move(host));
    }
    host_calls += added.size();
    for (Json& event : added) document["traceEvents"].push_back(std::move(event));
    paths.push_back((dir / ("hostk_rank" + std::to_string(rank) + ".json")).string());
    std::ofstream(paths.back()) << document.dump();
  }
  ASSERT_EQ(host_calls, 4u * 12 - 2);  // rank 3 has no #7 at all, rank 2 no host range of #4
  AnalyzeRequest request;
  request.detail = true;
  const Envelope envelope = analyze(load_traces(paths), request);
  fs::remove_all(dir);
  const Json& collectives = envelope.data["collectives"];
  std::vector<std::string> seen;
  for (const Json& mismatch : collectives["mismatches"]) {
    seen.push_back(mismatch.value("kind", "?") + ": " + mismatch.value("text", "?"));
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"kernel: rank 3 has no allreduce #7 of group 0",
                                            "host: rank 2 has no allreduce #4 of group 0"}));
  EXPECT_EQ(collectives["unmatched"], 2);
}

// A member whose collective has other sizes or another dtype than the rest of its group is
// named with what differs; the match itself holds (same sequence number).
TEST(SyntheticTraces, ACollectiveWithOtherSizesOnOneRankIsNamed) {
  const fs::path dir = fs::temp_directory_path() / ("loupe-sizes-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::vector<std::string> paths;
  int64_t theirs = -1;
  for (int rank = 0; rank < 4; ++rank) {
    Json document =
        Json::parse(gunzip(kSynthetic / ("missing_rank" + std::to_string(rank) + ".json.gz")));
    for (Json& event : document["traceEvents"]) {
      if (!event.contains("args") || !event["args"].contains("Seq")) continue;
      if (event["args"]["Seq"] != 3) continue;
      theirs = event["args"]["In msg nelems"].get<int64_t>();
      if (rank == 2) {
        event["args"]["In msg nelems"] = theirs * 2;
        event["args"]["dtype"] = "Float";
      }
    }
    paths.push_back((dir / ("sizes_rank" + std::to_string(rank) + ".json")).string());
    std::ofstream(paths.back()) << document.dump();
  }
  AnalyzeRequest request;
  request.detail = true;
  const Envelope envelope = analyze(load_traces(paths), request);
  fs::remove_all(dir);
  const Json& mismatches = envelope.data["collectives"]["mismatches"];
  std::vector<std::string> texts;
  for (const Json& mismatch : mismatches) texts.push_back(mismatch["text"]);
  const std::string differs = "rank 2's allreduce #3 of group 0 differs: In msg nelems " +
                              std::to_string(theirs * 2) + " where the others have " +
                              std::to_string(theirs) +
                              ", dtype Float where the others have BFloat16";
  EXPECT_EQ(texts, (std::vector<std::string>{differs, "rank 3 has no allreduce #7 of group 0"}));
  EXPECT_EQ(envelope.data["collectives"]["matched"], 12);
}

// A TP x DP job: tensor-parallel pairs {0,1}, {2,3} and data-parallel pairs {0,2}, {1,3}, each
// collective matched within its group from "Process Group Ranks". Rank 3 computes longer before
// its data-parallel all-reduces: it is the straggler, and the cause is its compute stream, not
// the NCCL kernel before.
TEST(SyntheticTraces, SubGroupsMatchWithinTheirGroupAndTheStragglersCauseIsItsCompute) {
  std::vector<std::string> files;
  std::vector<RawTrace> raw;
  for (int rank = 0; rank < 4; ++rank) {
    files.push_back("tpdp_rank" + std::to_string(rank) + ".json.gz");
    raw.push_back(raw_events(kSynthetic / files.back()));
  }
  const Envelope envelope = analyze_files(files);
  const Json& collectives = envelope.data["collectives"];
  EXPECT_EQ(collectives["matched"], 16);
  EXPECT_EQ(collectives["unmatched"], 0);
  EXPECT_EQ(collectives["mismatches"].size(), 0u);
  EXPECT_EQ(collectives["outside_group"], 0);
  // From the raw events: per group and Seq, each member's NCCL kernel start; the last arrival.
  std::map<std::pair<std::string, int64_t>, std::map<int, const Raw*>> calls;
  for (int rank = 0; rank < 4; ++rank) {
    for (const Raw& event : raw[rank].events) {
      if (event.name.rfind("ncclDevKernel", 0) != 0) continue;
      calls[{event.args["Process Group Name"], event.args["Seq"].get<int64_t>()}][rank] = &event;
    }
  }
  ASSERT_EQ(calls.size(), 16u);
  std::map<int, int64_t> imposed;
  for (const auto& [key, members] : calls) {
    ASSERT_EQ(members.size(), 2u);
    int64_t last = INT64_MIN;
    int last_rank = -1;
    for (const auto& [rank, event] : members) {
      if (event->start > last) last = event->start, last_rank = rank;
    }
    for (const auto& [rank, event] : members) imposed[last_rank] += last - event->start;
  }
  int straggler = 0;
  for (const auto& [rank, ns] : imposed) {
    if (ns > imposed[straggler]) straggler = rank;
  }
  ASSERT_EQ(straggler, 3);
  const Finding* top = with_id(envelope, "trace.collectives.straggler");
  ASSERT_NE(top, nullptr);
  EXPECT_EQ(metric(*top, "rank"), 3);
  EXPECT_EQ(metric(*top, "imposed_wait_ns"), imposed[3]);
  // Its compute since its previous collective, before each collective it arrived last at.
  std::vector<const Raw*> own;
  for (const Raw& event : raw[3].events) {
    if (event.name.rfind("ncclDevKernel", 0) == 0) own.push_back(&event);
  }
  std::sort(own.begin(), own.end(),
            [](const Raw* left, const Raw* right) { return left->start < right->start; });
  int64_t compute = 0, gemm = 0;
  for (const auto& [key, members] : calls) {
    if (members.count(3) == 0) continue;
    const Raw* mine = members.at(3);
    bool last = true;
    for (const auto& [rank, event] : members) last &= event->start <= mine->start;
    if (!last) continue;
    int64_t from = INT64_MIN;
    for (const Raw* event : own) {
      if (event->start < mine->start) from = event->end;
    }
    std::vector<Interval> work;
    for (const Raw& event : raw[3].events) {
      if (event.cat != "kernel" || event.name.rfind("nccl", 0) == 0) continue;
      const Interval clipped{std::max(event.start, from), std::min(event.end, mine->start)};
      if (clipped.second > clipped.first) work.push_back(clipped);
    }
    compute += length(merged(work));
    gemm += length(work);  // one kernel name, one stream: the same time
  }
  EXPECT_EQ(metric(*top, "compute_ns"), compute);
  EXPECT_EQ(metric(*top, "before_ns"), gemm);
  EXPECT_EQ(top->where.path, "sm90_gemm_bf16");
  EXPECT_EQ(top->claim.find("ncclDevKernel"), std::string::npos) << top->claim;
  EXPECT_NE(top->claim.find("Inferred cause: its extra compute (sm90_gemm_bf16)"),
            std::string::npos)
      << top->claim;
  EXPECT_GT(metric(*top, "compute_ns"), metric(*top, "compute_median_others_ns"));
}

// Kernels replayed by cudaGraphLaunch: tied to the launch by correlation id (one flow reaches the
// first only), one launch per replay, the GPU time under graphs, the range that issued them.
TEST(SyntheticTraces, CudaGraphReplaysAreOneLaunchAndTheirGpuTimeIsTold) {
  const RawTrace trace = raw_events(kSynthetic / "graph_decode.json.gz");
  const Envelope envelope = analyze_files({"graph_decode.json.gz"});
  const Json& gpu = envelope.data["gpu"];
  const int64_t opens = gpu["window"]["start_ns"].get<int64_t>() + trace.origin;
  std::set<int64_t> replays, launches;
  uint64_t graph_ops = 0;
  std::vector<Interval> graph_time;
  for (const Raw& event : trace.events) {
    if (event.cat != "kernel" || event.end <= opens) continue;
    launches.insert(event.args["correlation"].get<int64_t>());
    if (!event.args.contains("graph id")) continue;
    replays.insert(event.args["correlation"].get<int64_t>());
    ++graph_ops;
    graph_time.emplace_back(std::max(event.start, opens), event.end);
  }
  ASSERT_EQ(replays.size(), 4u);  // the first step's replay is warm-up
  const Json& graphs = gpu["steady"]["graphs"];
  EXPECT_EQ(graphs["launches"], replays.size());
  EXPECT_EQ(graphs["ops"], graph_ops);
  EXPECT_EQ(graphs["gpu_ns"], length(merged(graph_time)));
  EXPECT_EQ(gpu["steady"]["launches"]["count"], launches.size());
  ASSERT_EQ(graphs["ranges"].size(), 1u);
  EXPECT_EQ(graphs["ranges"][0]["range"], "decode_forward");
  const Finding* finding = with_id(envelope, "trace.gpu.graphs");
  ASSERT_NE(finding, nullptr);
  EXPECT_EQ(metric(*finding, "graph_launches"), 4);
}

// A real CUDA-graph decode (tests/fixtures/kineto/graph_decode_h100.json.gz, recorded on an H100 by
// make_graph_decode_trace.py): Kineto gives a replay's kernels the cudaGraphLaunch's correlation id
// and no graph id, and one ac2g flow fans out from the launch, an "f" per kernel. Every kernel of a
// replay is tied to it; the figures are recomputed from the raw events.
TEST(SyntheticTraces, ARealGraphReplayTiesEveryKernelToItsLaunch) {
  const fs::path file = fs::path(LOUPE_KINETO_FIXTURE_DIR) / "graph_decode_h100.json.gz";
  const RawTrace trace = raw_events(file);
  const Envelope envelope = analyze_files({"../graph_decode_h100.json.gz"});
  const Json& gpu = envelope.data["gpu"];
  const int64_t opens = gpu["window"]["start_ns"].get<int64_t>() + trace.origin;
  std::set<int64_t> graph_launches;  // the correlation ids of cudaGraphLaunch calls
  for (const Raw& event : trace.events) {
    if (event.cat == "cuda_runtime" && event.name == "cudaGraphLaunch") {
      graph_launches.insert(event.args["correlation"].get<int64_t>());
    }
  }
  std::set<int64_t> replays;
  uint64_t graph_ops = 0;
  std::vector<Interval> graph_time;
  for (const Raw& event : trace.events) {
    if (event.cat != "kernel" || event.end <= opens) continue;
    const int64_t correlation = event.args["correlation"].get<int64_t>();
    if (graph_launches.count(correlation) == 0) continue;
    replays.insert(correlation);
    ++graph_ops;
    graph_time.emplace_back(std::max(event.start, opens), event.end);
  }
  ASSERT_EQ(graph_launches.size(), 6u);
  ASSERT_EQ(replays.size(), 5u);  // the first step's replay is warm-up
  ASSERT_EQ(graph_ops, 370u);     // 74 kernels a replay
  const Json& graphs = gpu["steady"]["graphs"];
  EXPECT_EQ(graphs["launches"], replays.size());
  EXPECT_EQ(graphs["ops"], graph_ops);
  // The file's times are fractions of a µs at ~5.8e12 µs, past a double's exact ns: within a ns
  // an op.
  EXPECT_NEAR(graphs["gpu_ns"].get<double>(), static_cast<double>(length(merged(graph_time))),
              static_cast<double>(graph_ops));
  ASSERT_EQ(graphs["ranges"].size(), 1u);
  EXPECT_EQ(graphs["ranges"][0]["range"], "decode_step");
  const Finding* finding = with_id(envelope, "trace.gpu.graphs");
  ASSERT_NE(finding, nullptr);
  EXPECT_EQ(metric(*finding, "graph_launches"), 5);
}

// Two ranks of a gloo job on one H100 (tests/fixtures/kineto/gloo_ranks, recorded by
// make_rank_traces.py: gloo's collectives are record_function ranges on its worker threads, with no
// collective name, sizes or sequence number). In step 4 rank 1's launching thread sleeps 20 ms
// before its products. The collectives are matched in order and rank 1 is the straggler, with its
// launching thread's untraced time as the cause; figures recomputed from the raw events. Each rank
// is its own process: no thread of one can hold the other's interpreter lock.
TEST(SyntheticTraces, AGlooJobsHostStragglerIsNamedWithItsIdleLaunchingThread) {
  const std::vector<std::string> files = {"../gloo_ranks/gloo_host_straggler_rank0.json.gz",
                                          "../gloo_ranks/gloo_host_straggler_rank1.json.gz"};
  std::vector<std::vector<int64_t>> ready(2);  // per rank, its arrivals in order
  for (int rank = 0; rank < 2; ++rank)
    ready[rank] = gloo_arrivals(raw_events(kSynthetic / files[rank]));
  ASSERT_EQ(ready[0].size(), 8u);
  ASSERT_EQ(ready[1].size(), 8u);
  int64_t imposed_by_1 = 0;
  uint64_t last_1 = 0;
  for (size_t at = 0; at < 8; ++at) {
    if (ready[1][at] > ready[0][at]) imposed_by_1 += ready[1][at] - ready[0][at], ++last_1;
  }
  ASSERT_EQ(last_1, 8u);
  const Envelope envelope = analyze_files(files);
  EXPECT_EQ(envelope.data["collectives"]["matched"], 8) << envelope.data["collectives"].dump();
  const Finding* straggler = with_id(envelope, "trace.collectives.straggler");
  ASSERT_NE(straggler, nullptr);
  EXPECT_EQ(metric(*straggler, "rank"), 1);
  EXPECT_EQ(metric(*straggler, "arrived_last"), 8);
  // Last at 8 of 8 two-rank collectives: a random order does that once in 2^8.
  EXPECT_DOUBLE_EQ(metric(*straggler, "chance_p"), 1.0 / 256);
  EXPECT_EQ(straggler->severity, Severity::kWarn);
  EXPECT_NEAR(metric(*straggler, "imposed_wait_ns"), static_cast<double>(imposed_by_1), 16.0);
  // The sleep is untraced time of rank 1's launching (Python) thread, beyond rank 0's.
  EXPECT_GE(metric(*straggler, "host_idle_ns") - metric(*straggler, "host_idle_median_others_ns"),
            20e6);
  EXPECT_NE(straggler->claim.find("Inferred cause: its launching thread was idle"),
            std::string::npos)
      << straggler->claim;
  EXPECT_EQ(straggler->claim.find("PyTorch Profiler"), std::string::npos) << straggler->claim;
  EXPECT_EQ(with_id(envelope, "trace.locks.gil_inferred"), nullptr);
}

// The same job with a second process group of the same two ranks, interleaved with the first: 12
// collectives per rank, all matched, none missing, no lock inferred across the processes. No
// straggler was made, but both ranks share the one GPU: at the first all-reduce of each step rank
// 1's products finish after rank 0's, so its staged gradient is ready ~0.9 ms later and rank 0's
// range waits for it. The arrivals, who came last and the chance of it are recomputed from the
// raw events; none of the measured causes explains the wait (its compute is rank 0's).
TEST(SyntheticTraces, AGlooJobsTwoGroupsMatchEveryCollectiveAndInferNoLock) {
  const std::vector<std::string> files = {"../gloo_ranks/gloo_two_groups_rank0.json.gz",
                                          "../gloo_ranks/gloo_two_groups_rank1.json.gz"};
  std::vector<std::vector<int64_t>> ready(2);
  for (int rank = 0; rank < 2; ++rank)
    ready[rank] = gloo_arrivals(raw_events(kSynthetic / files[rank]));
  ASSERT_EQ(ready[0].size(), 12u);
  ASSERT_EQ(ready[1].size(), 12u);
  std::array<int64_t, 2> imposed{};
  std::array<uint64_t, 2> last{};
  for (size_t at = 0; at < 12; ++at) {
    const int later = ready[1][at] > ready[0][at] ? 1 : 0;
    ++last[later];
    imposed[later] += std::abs(ready[1][at] - ready[0][at]);
  }
  const int worst = imposed[1] > imposed[0] ? 1 : 0;
  double chance = 0;  // P(last at least last[worst] times of 12, each 1/2)
  for (uint64_t k = last[worst]; k <= 12; ++k) {
    double ways = 1;
    for (uint64_t i = 0; i < k; ++i)
      ways = ways * static_cast<double>(12 - i) / static_cast<double>(i + 1);
    chance += ways / 4096;
  }
  const bool stands_out = chance <= 0.05 || imposed[worst] >= 2 * imposed[1 - worst];
  EXPECT_EQ(worst, 1);
  EXPECT_EQ(last[1], 8u);
  EXPECT_TRUE(stands_out);  // rank 1 imposed more than twice the wait rank 0 did
  const Envelope envelope = analyze_files(files);
  EXPECT_EQ(envelope.data["collectives"]["matched"], 12) << envelope.data["collectives"].dump();
  EXPECT_EQ(envelope.data["collectives"]["unmatched"], 0);
  EXPECT_TRUE(envelope.data["collectives"]["mismatches"].empty());
  EXPECT_EQ(with_id(envelope, "trace.collectives.unmatched"), nullptr);
  EXPECT_EQ(with_id(envelope, "trace.locks.gil_inferred"), nullptr);
  const Finding* straggler = with_id(envelope, "trace.collectives.straggler");
  ASSERT_NE(straggler, nullptr);
  EXPECT_EQ(metric(*straggler, "rank"), worst);
  EXPECT_EQ(metric(*straggler, "arrived_last"), last[worst]);
  EXPECT_NEAR(metric(*straggler, "chance_p"), chance, 1e-12);
  EXPECT_NEAR(metric(*straggler, "imposed_wait_ns"), static_cast<double>(imposed[worst]), 16.0);
  EXPECT_EQ(straggler->severity, Severity::kWarn);
  EXPECT_NE(straggler->claim.find("Inferred cause: none of these explains"), std::string::npos)
      << straggler->claim;
}

// Issue 35, a gloo job on CUDA tensors (synthetic/gloo_gpu, PyTorch 2.11's shape): gloo's range
// begins as soon as c10d hands the all-reduce over, before the data is ready, and waits inside for
// the device-to-host staging copy, which waits for the compute stream. Rank 1 has more GPU work
// each step; rank 0's launching thread is the slower, so by range starts rank 0 would come last.
// A rank arrives when its contribution is ready: rank 1 is the straggler at every all-reduce,
// and its compute stream is the cause. Figures recomputed from the raw events.
TEST(SyntheticTraces, AGlooJobOnCudaTensorsArrivesWhenItsStagedOperandIsReady) {
  const std::vector<std::string> files = {"gloo_gpu_rank0.json.gz", "gloo_gpu_rank1.json.gz"};
  std::vector<RawTrace> raw;
  std::vector<std::vector<int64_t>> ready(2), starts(2);
  for (int rank = 0; rank < 2; ++rank) {
    raw.push_back(raw_events(kSynthetic / files[rank]));
    ready[rank] = gloo_arrivals(raw.back());
    for (const Raw& event : raw.back().events) {
      if (event.name == "gloo:all_reduce") starts[rank].push_back(event.start);
    }
    std::sort(starts[rank].begin(), starts[rank].end());
  }
  ASSERT_EQ(ready[0].size(), 8u);
  ASSERT_EQ(ready[1].size(), 8u);
  int64_t imposed_by_1 = 0;
  for (size_t at = 0; at < 8; ++at) {
    EXPECT_GT(starts[0][at], starts[1][at]) << at;  // by range starts rank 0 is later
    ASSERT_GT(ready[1][at], ready[0][at]) << at;    // rank 1's operand is ready later
    imposed_by_1 += ready[1][at] - ready[0][at];
  }
  // Each rank's GPU kernels from the end of its previous all-reduce to its arrival (the first
  // window opens at the rank's first event), summed: what the straggler computed beyond the other.
  std::array<int64_t, 2> compute{};
  for (int rank = 0; rank < 2; ++rank) {
    int64_t first = INT64_MAX;
    for (const Raw& event : raw[rank].events) first = std::min(first, event.start);
    std::vector<int64_t> ends;
    for (const Raw& event : raw[rank].events) {
      if (event.name == "gloo:all_reduce") ends.push_back(event.end);
    }
    std::sort(ends.begin(), ends.end());
    for (size_t at = 0; at < 8; ++at) {
      const int64_t from = at == 0 ? first : ends[at - 1], to = ready[rank][at];
      std::vector<std::pair<int64_t, int64_t>> kernels;
      for (const Raw& event : raw[rank].events) {
        if (event.cat != "kernel") continue;
        const int64_t start = std::max(event.start, from), end = std::min(event.end, to);
        if (end > start) kernels.emplace_back(start, end);
      }
      compute[rank] += length(merged(kernels));
    }
  }
  const Envelope envelope = analyze_files(files);
  EXPECT_EQ(envelope.data["collectives"]["matched"], 8);
  const Finding* straggler = with_id(envelope, "trace.collectives.straggler");
  ASSERT_NE(straggler, nullptr);
  EXPECT_EQ(metric(*straggler, "rank"), 1);
  EXPECT_EQ(metric(*straggler, "arrived_last"), 8);
  EXPECT_DOUBLE_EQ(metric(*straggler, "chance_p"), 1.0 / 256);
  EXPECT_EQ(straggler->severity, Severity::kWarn);
  EXPECT_NEAR(metric(*straggler, "imposed_wait_ns"), static_cast<double>(imposed_by_1), 16.0);
  EXPECT_NEAR(metric(*straggler, "compute_ns"), static_cast<double>(compute[1]), 16.0);
  EXPECT_NEAR(metric(*straggler, "compute_median_others_ns"), static_cast<double>(compute[0]),
              16.0);
  EXPECT_GE(2 * (compute[1] - compute[0]), imposed_by_1);  // the extra compute explains the wait
  EXPECT_NE(straggler->claim.find("its GPU kernels ran"), std::string::npos) << straggler->claim;
  EXPECT_NE(
      straggler->claim.find("Inferred cause: its extra compute (sm90_xmma_gemm_bf16bf16_bf16f32)"),
      std::string::npos)
      << straggler->claim;
}

// Queue length per stream (HTA's get_queue_length_summary): +1 when a launch call begins, −1
// when its op starts; statistics over the values after each change, and over time.
TEST(SyntheticTraces, QueueLengthCountsLaunchedOpsNotYetStarted) {
  const RawTrace trace = raw_events(kSynthetic / "critical_gpu_bound.json.gz");
  std::map<int64_t, int64_t> launch_at;  // correlation -> launch start
  for (const Raw& event : trace.events) {
    if (event.cat == "cuda_runtime" && event.name == "cudaLaunchKernel") {
      launch_at[event.args["correlation"].get<int64_t>()] = event.start;
    }
  }
  std::vector<std::pair<int64_t, int>> changes;
  for (const Raw& event : trace.events) {
    if (event.cat != "kernel") continue;
    changes.emplace_back(launch_at.at(event.args["correlation"].get<int64_t>()), +1);
    changes.emplace_back(event.start, -1);
  }
  std::sort(changes.begin(), changes.end(), [](const auto& left, const auto& right) {
    return left.first != right.first ? left.first < right.first : left.second > right.second;
  });
  int64_t length = 0, sum = 0, most = 0;
  double weighted = 0;
  for (size_t at = 0; at < changes.size(); ++at) {
    length += changes[at].second;
    sum += length;
    most = std::max(most, length);
    if (at + 1 < changes.size()) {
      weighted += static_cast<double>(length * (changes[at + 1].first - changes[at].first));
    }
  }
  ASSERT_EQ(changes.size(), 24u);
  ASSERT_EQ(most, 3);  // kernels 1 to 3 of a GPU-bound step wait behind kernel 0
  const Envelope envelope = analyze_files({"critical_gpu_bound.json.gz"});
  const Json& streams = envelope.data["gpu"]["all"]["streams"];
  ASSERT_EQ(streams.size(), 1u);
  const Json& queue = streams[0]["queue"];
  EXPECT_EQ(queue["changes"], changes.size());
  EXPECT_DOUBLE_EQ(queue["mean"].get<double>(),
                   static_cast<double>(sum) / static_cast<double>(changes.size()));
  EXPECT_DOUBLE_EQ(queue["time_mean"].get<double>(),
                   weighted / static_cast<double>(changes.back().first - changes.front().first));
  EXPECT_EQ(queue["max"], most);
}

// A four-rank gloo job on one H100 with causes planted before anything was read
// (tests/fixtures/kineto/planted_ranks, make_planted_rank_traces.py; the expected answers are in
// the fixtures' README). Who came last at each collective is recomputed here from the raw
// events, apart from loupe's matching: each gloo range is keyed by its ProfilerStep, the main
// thread's range it began in (tp_reduce: the rank's pair {0,1} or {2,3}; dp_reduce: the world)
// and its place there, and arrives as gloo_arrivals says.
struct PlantedJob {
  Envelope envelope;
  std::array<int64_t, 4> imposed{};  // the wait each rank imposed, by the raw events
  int straggler = -1;
};

PlantedJob planted(const std::string& scenario) {
  PlantedJob job;
  std::vector<std::string> names;
  std::map<std::tuple<std::string, std::string, int, int>, std::map<int, int64_t>> rows;
  for (int rank = 0; rank < 4; ++rank) {
    const std::string name =
        "../planted_ranks/planted_" + scenario + "_rank" + std::to_string(rank) + ".json.gz";
    names.push_back(name);
    const RawTrace trace = raw_events(kSynthetic / name);
    const std::vector<int64_t> arrivals = gloo_arrivals(trace);
    std::vector<const Raw*> ranges, steps, regions;
    for (const Raw& event : trace.events) {
      if (event.cat != "user_annotation") continue;
      if (event.name == "gloo:all_reduce") ranges.push_back(&event);
      if (event.name.rfind("ProfilerStep#", 0) == 0) steps.push_back(&event);
      if (event.name == "tp_reduce" || event.name == "dp_reduce") regions.push_back(&event);
    }
    std::sort(ranges.begin(), ranges.end(),
              [](const Raw* left, const Raw* right) { return left->start < right->start; });
    std::map<std::tuple<std::string, std::string, int>, int> places;
    for (size_t at = 0; at < ranges.size(); ++at) {
      auto around = [&](const std::vector<const Raw*>& list) {
        for (const Raw* outer : list) {
          if (outer->start <= ranges[at]->start && ranges[at]->start <= outer->end) {
            return outer->name;
          }
        }
        return std::string("?");
      };
      const std::string step = around(steps), region = around(regions);
      const int group = region == "tp_reduce" ? 1 + rank / 2 : 0;
      const int place = places[{step, region, group}]++;
      rows[{step, region, group, place}][rank] = arrivals[at];
    }
  }
  for (const auto& [key, arrivals] : rows) {
    if (arrivals.size() < 2) continue;
    int last = -1;
    for (const auto& [rank, arrival] : arrivals) {
      if (last < 0 || arrival > arrivals.at(last)) last = rank;
    }
    for (const auto& [rank, arrival] : arrivals) job.imposed[last] += arrivals.at(last) - arrival;
  }
  job.straggler = static_cast<int>(std::max_element(job.imposed.begin(), job.imposed.end()) -
                                   job.imposed.begin());
  job.envelope = analyze_files(names);
  return job;
}

std::vector<std::string> mismatch_texts(const Envelope& envelope) {
  std::vector<std::string> texts;
  for (const Json& row : envelope.data["collectives"]["mismatches"]) texts.push_back(row["text"]);
  return texts;
}

// Rank 1's launching thread sleeps 30 ms in step 3 before the world's gradient all-reduce.
TEST(PlantedRanks, AHostGapBeforeACollectiveNamesTheRankAndItsIdleThread) {
  const PlantedJob job = planted("host_straggler");
  EXPECT_EQ(job.straggler, 1);
  EXPECT_EQ(job.envelope.data["collectives"]["matched"], 16);
  EXPECT_TRUE(mismatch_texts(job.envelope).empty());
  const Finding* straggler = with_id(job.envelope, "trace.collectives.straggler");
  ASSERT_NE(straggler, nullptr);
  EXPECT_EQ(straggler->severity, Severity::kWarn);
  EXPECT_EQ(metric(*straggler, "rank"), 1);
  EXPECT_NEAR(metric(*straggler, "imposed_wait_ns"), static_cast<double>(job.imposed[1]), 64.0);
  EXPECT_GE(metric(*straggler, "host_idle_ns") - metric(*straggler, "host_idle_median_others_ns"),
            30e6);
  EXPECT_NE(straggler->claim.find("Inferred cause: its launching thread was idle"),
            std::string::npos)
      << straggler->claim;
  EXPECT_EQ(with_id(job.envelope, "trace.locks.gil_inferred"), nullptr);
}

// Rank 3's profiler is paused around step 3's all-reduce of its pair {2,3} (group "2").
TEST(PlantedRanks, OneSubGroupCollectiveMissingOnOneRankIsNamedInItsGroup) {
  const PlantedJob job = planted("missing");
  EXPECT_EQ(mismatch_texts(job.envelope),
            std::vector<std::string>{"rank 3 has no gloo:all_reduce #2 of group 2"});
  EXPECT_EQ(job.envelope.data["collectives"]["matched"], 15);
  EXPECT_EQ(job.envelope.data["collectives"]["unmatched"], 1);
  const Finding* straggler = with_id(job.envelope, "trace.collectives.straggler");
  ASSERT_NE(straggler, nullptr);
  EXPECT_EQ(straggler->severity, Severity::kInfo) << straggler->claim;
  EXPECT_EQ(metric(*straggler, "rank"), job.straggler);
  EXPECT_EQ(with_id(job.envelope, "trace.locks.gil_inferred"), nullptr);
}

// Rank 3's profiler starts one step late: its trace lacks ProfilerStep#2's three collectives.
// Rank 3's profiler was starting meanwhile, so rank 2 sat 3.8 s in their pair's all-reduce, which
// only rank 2's trace holds, and reached the world's all-reduce last: rank 2 is the straggler by
// the events, held inside that collective.
TEST(PlantedRanks, AProfileWindowStartedLateMissesItsFirstStepNotTheLast) {
  const PlantedJob job = planted("late_window");
  EXPECT_EQ(mismatch_texts(job.envelope),
            (std::vector<std::string>{"rank 3 has no gloo:all_reduce #1 of group 0",
                                      "rank 3 has no gloo:all_reduce #2 of group 0",
                                      "rank 3 has no gloo:all_reduce #1 of group 2"}));
  EXPECT_EQ(job.envelope.data["collectives"]["matched"], 15);
  const Finding* straggler = with_id(job.envelope, "trace.collectives.straggler");
  ASSERT_NE(straggler, nullptr);
  EXPECT_EQ(job.straggler, 2);
  EXPECT_EQ(metric(*straggler, "rank"), 2);
  EXPECT_NEAR(metric(*straggler, "imposed_wait_ns"), static_cast<double>(job.imposed[2]), 64.0);
  EXPECT_NE(straggler->claim.find("Inferred cause: it waited inside an earlier collective "
                                  "(gloo:all_reduce of group 2) for a member late there, whose "
                                  "trace does not show it"),
            std::string::npos)
      << straggler->claim;
}

// No fault; and a fault too small to show (rank 2's 40 extra 2048x2048 products, ~1 ms, no more
// than the four ranks sharing one GPU already come apart): by the events no rank stands out.
TEST(PlantedRanks, WithoutAFaultNoRankStandsOutAndNoLockIsInferred) {
  for (const std::string scenario : {"control", "compute_weak"}) {
    SCOPED_TRACE(scenario);
    const PlantedJob job = planted(scenario);
    EXPECT_EQ(job.envelope.data["collectives"]["matched"], 16);
    EXPECT_TRUE(mismatch_texts(job.envelope).empty());
    const Finding* straggler = with_id(job.envelope, "trace.collectives.straggler");
    ASSERT_NE(straggler, nullptr);
    EXPECT_EQ(straggler->severity, Severity::kInfo) << straggler->claim;
    EXPECT_EQ(metric(*straggler, "rank"), job.straggler);
    EXPECT_NEAR(metric(*straggler, "imposed_wait_ns"),
                static_cast<double>(job.imposed[job.straggler]), 64.0);
    EXPECT_EQ(with_id(job.envelope, "trace.locks.gil_inferred"), nullptr);
  }
}

}  // namespace
}  // namespace loupe::trace
