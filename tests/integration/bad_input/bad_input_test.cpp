// Bad input everywhere: every case feeds one `loupe` command a malformed file or argument and
// asserts exit 2 and a message that names the input, the position in it and what was expected
// (three substrings of stderr, or of the JSON envelope's error for --json cases).
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <sqlite3.h>

#include "core/process.hpp"
#include "loupe/tensor.hpp"

namespace loupe {
namespace {

namespace fs = std::filesystem;

struct BadInput {
  const char* name;               // the ctest name
  std::vector<std::string> args;  // loupe's arguments; "{subject}" is the test subject
  const char* input;              // names the input
  const char* position;           // names where in it
  const char* expected;           // says what was expected
};

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string le64(uint64_t value) {
  std::string out(8, '\0');
  std::memcpy(out.data(), &value, 8);
  return out;
}

std::string floats(std::vector<float> values) {
  std::string out(values.size() * 4, '\0');
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// A .npy of float32 values under a hand-written header dictionary.
std::string npy_with_header(const std::string& dictionary, const std::string& data) {
  std::string header = dictionary;
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY\x01";
  out += '\0';
  out += static_cast<char>(header.size() & 0xFF);
  out += static_cast<char>(header.size() >> 8);
  return out + header + data;
}

std::string safetensors(const std::string& header_json, const std::string& data) {
  return le64(header_json.size()) + header_json + data;
}

// The objective every objective case starts from; plan never starts its subject.
constexpr const char* kObjective = R"(name = "bad-input"
[subject]
command = ["/bin/true"]
timeout_s = 60
[[check]]
probe = "rows"
params = { N = 256 }
seed = 7
[[gate]]
name = "rows_pass"
expr = "check.rows passes"
[[deployment_key]]
key = "rows"
implies = [{ probe = "rows", param = "N" }]
[[deployment]]
name = "small"
settings = { rows = 256 }
)";

// A minimal export of a completed run, as `loupe ledger export` writes one.
constexpr const char* kExport = R"({
  "loupe_ledger_export": 1,
  "run": {
    "id": "r20260101-000000-0000",
    "status": "completed",
    "started_at": "2026-01-01T00:00:00Z",
    "ended_at": "2026-01-01T00:00:05Z",
    "objective": {"path": "/repo/objective.toml", "hash": "ab"},
    "git": {"commit": "", "dirty": false, "diff_hash": "", "dirty_paths": []},
    "environment": {},
    "config": {},
    "gates": [{"name": "rows_pass", "verdict": "pass", "statistics": {}, "rule": "passes"}],
    "findings": [],
    "observations": []
  }
}
)";

std::string replace(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  if (at == std::string::npos) throw std::runtime_error("fixture: no '" + from + "'");
  return text.replace(at, from.size(), to);
}

class BadInputTest : public ::testing::TestWithParam<BadInput> {
 protected:
  static void SetUpTestSuite() {
    dir_ =
        new fs::path(fs::temp_directory_path() / ("loupe_bad_input_" + std::to_string(::getpid())));
    fs::remove_all(*dir_);
    fs::create_directories(*dir_ / "home");
    const fs::path& dir = *dir_;

    Tensor good(DType::kF32, {4});
    for (int index = 0; index < 4; ++index) good.mutable_data<float>()[index] = index + 1.0f;
    write_npy(dir / "good.npy", good);
    const std::string npy = read_bytes(dir / "good.npy");
    write_bytes(dir / "truncated.npy", npy.substr(0, npy.size() - 6));
    write_bytes(dir / "bad_magic.npy", "\x93NUMPX" + npy.substr(6));
    write_bytes(dir / "complex.npy",
                npy_with_header("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }",
                                floats({1, 2, 3, 4})));
    write_bytes(dir / "bad_shape.npy",
                npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (4, -1), }",
                                floats({1, 2, 3, 4})));
    Tensor three(DType::kF32, {3});
    write_npy(dir / "three.npy", three);

    write_bytes(dir / "lying.safetensors",
                safetensors(R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,64]}})",
                            floats({1, 2, 3, 4})));
    write_bytes(dir / "huge_header.safetensors", le64(uint64_t{1} << 40) + "{}");
    write_bytes(dir / "cut_header.safetensors", safetensors(R"({"x": {"dtype": "F32", )", ""));
    write_bytes(dir / "unknown_dtype.safetensors",
                safetensors(R"({"x":{"dtype":"Q7","shape":[4],"data_offsets":[0,16]}})",
                            floats({1, 2, 3, 4})));

    write_bytes(dir / "not_json.json", "hello, this is not a trace");
    write_bytes(dir / "ok.json",
                R"({"traceEvents":[{"name":"a","ph":"X","ts":0,"dur":5,"pid":1,"tid":1}]})");
    write_bytes(dir / "short.loupetrace", std::string("LOUPETRC\x01\x00\x00\x00", 12));

    write_bytes(dir / "objective.toml", kObjective);
    write_bytes(dir / "unknown_key.toml", replace(kObjective, "seed = 7", "seed = 7\nsede = 3"));
    write_bytes(dir / "wrong_type.toml", replace(kObjective, "seed = 7", "seed = \"seven\""));
    write_bytes(dir / "bad_gate.toml",
                replace(kObjective, "check.rows passes", "check.rows passes and"));
    write_bytes(dir / "bad_syntax.toml", replace(kObjective, "[[check]]", "[[check]"));
    write_bytes(dir / "unknown_probe.toml",
                replace(kObjective, "probe = \"rows\"\n", "probe = \"cols\"\n"));
    write_bytes(dir / "not_a_ledger.sqlite", "this is not an SQLite database, not at all....");

    // Issue 17: inputs nested deep enough to crash a library parser, and other hostile input.
    std::string deep_header =
        "{'descr': '<f4', 'fortran_order': False, 'shape': " + std::string(50000, '(') +
        std::string(50000, ')') + ", }";
    while ((12 + deep_header.size() + 1) % 64 != 0) deep_header += ' ';
    deep_header += '\n';
    const uint32_t deep_length = static_cast<uint32_t>(deep_header.size());
    write_bytes(dir / "deep.npy", std::string("\x93NUMPY\x02\x00", 8) +
                                      std::string(reinterpret_cast<const char*>(&deep_length), 4) +
                                      deep_header);
    write_bytes(dir / "config.json", R"({"name": "not a trace", "values": [1, 2, 3]})");
    write_bytes(dir / "deep_export.json", R"({"loupe_ledger_export": 1, "run": )" +
                                              std::string(50000, '[') + std::string(50000, ']') +
                                              "}");
    const std::string export_text = kExport;
    write_bytes(dir / "export_unknown_field.json",
                replace(export_text, "\"status\"", "\"imported\": {}, \"status\""));
    write_bytes(dir / "export_bad_id.json",
                replace(export_text, "\"id\": \"r20260101-000000-0000\"", "\"id\": \"../../x\""));
    write_bytes(
        dir / "export_deep_config.json",
        replace(export_text, "\"config\": {}",
                "\"config\": {\"a\": " + std::string(20000, '[') + std::string(20000, ']') + "}"));
    write_bytes(dir / "export_good.json", export_text);
    std::string dotted = "[a";
    for (int part = 1; part < 100000; ++part) dotted += ".a";
    write_bytes(dir / "dotted.toml", "name = \"dotted\"\n" + dotted + "]\nb = 1\n");
    write_bytes(dir / "repeats.toml",
                replace(kObjective, "seed = 7", "seed = 7\nrepeats = 9223372036854775807"));
    std::string thousands = "[1", hundreds = "[1";
    for (int value = 2; value <= 3000; ++value) thousands += ", " + std::to_string(value);
    for (int value = 2; value <= 1000; ++value) hundreds += ", " + std::to_string(value);
    write_bytes(dir / "sweep.toml",
                replace(kObjective, "params = { N = 256 }",
                        "params = { N = " + thousands + "], M = " + hundreds + "] }"));
    write_bytes(dir / "escape.toml", replace(kObjective, "probe = \"rows\"\n",
                                             "name = \"rows\"\nprobe = \"../../rows\"\n"));
    {
      // An application's own SQLite database: loupe must refuse it and leave it as it was.
      sqlite3* db = nullptr;
      ASSERT_EQ(sqlite3_open((dir / "app.sqlite").c_str(), &db), SQLITE_OK);
      ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE notes (text TEXT)", nullptr, nullptr, nullptr),
                SQLITE_OK);
      sqlite3_close(db);
    }

    // A ledger to look runs up in: one run of the objective, whose subject (/bin/true) writes
    // nothing, so it is recorded as a subject failure in a few milliseconds.
    ProcessSpec record;
    record.argv = {LOUPE_EXECUTABLE, "run", "objective.toml", "--home", "home"};
    record.working_dir = dir;
    record.timeout = std::chrono::seconds(60);
    run_process(record);
    ASSERT_TRUE(fs::exists(dir / "home" / "ledger.sqlite"));
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }

  static fs::path* dir_;
};

fs::path* BadInputTest::dir_ = nullptr;

TEST_P(BadInputTest, ExitsTwoNamingInputPositionAndExpectation) {
  const BadInput& bad = GetParam();
  ProcessSpec spec;
  spec.argv = {LOUPE_EXECUTABLE};
  for (const auto& arg : bad.args) spec.argv.push_back(arg == "{subject}" ? CHECK_SUBJECT : arg);
  spec.working_dir = *dir_;
  spec.timeout = std::chrono::seconds(30);
  const ProcessResult result = run_process(spec);
  const std::string text = result.stderr_text + result.stdout_text;
  EXPECT_EQ(result.exit_code, 2) << result.describe() << "\n" << text;
  EXPECT_NE(text.find(bad.input), std::string::npos) << "input '" << bad.input << "' in:\n" << text;
  EXPECT_NE(text.find(bad.position), std::string::npos) << "position '" << bad.position << "' in:\n"
                                                        << text;
  EXPECT_NE(text.find(bad.expected), std::string::npos)
      << "expectation '" << bad.expected << "' in:\n"
      << text;
}

// "1,2,...,COUNT": a sweep list.
std::string numbers(int count) {
  std::string text = "1";
  for (int value = 2; value <= count; ++value) text += "," + std::to_string(value);
  return text;
}

const BadInput kCases[] = {
    // loupe diff: .npy
    {"diff_truncated_npy",
     {"diff", "truncated.npy", "good.npy"},
     "truncated.npy",
     "offset 128",
     "16 bytes of data"},
    {"diff_npy_bad_magic",
     {"diff", "bad_magic.npy", "good.npy"},
     "bad_magic.npy",
     "offset 0",
     R"(expected "\x93NUMPY")"},
    {"diff_npy_complex_dtype",
     {"diff", "complex.npy", "good.npy"},
     "complex.npy",
     "header field 'descr'",
     "expected one of '<f2'"},
    {"diff_npy_negative_shape",
     {"diff", "bad_shape.npy", "good.npy"},
     "bad_shape.npy",
     "shape",
     "expected"},
    {"diff_shapes_differ",
     {"diff", "good.npy", "three.npy"},
     "three.npy",
     "B is [3]",
     "expected the same shape"},
    {"diff_missing_file",
     {"diff", "missing.npy", "good.npy"},
     "missing.npy",
     "A (",
     "pass two .npy files"},
    // loupe diff: .safetensors
    {"diff_safetensors_offsets_lie",
     {"diff", "lying.safetensors", "lying.safetensors"},
     "lying.safetensors",
     "tensor 'x': data_offsets [0, 64]",
     "needs 16"},
    {"diff_safetensors_header_too_long",
     {"diff", "huge_header.safetensors", "good.npy"},
     "huge_header.safetensors",
     "(at offset 0)",
     "runs past the end of the file"},
    {"diff_safetensors_cut_header",
     {"diff", "cut_header.safetensors", "good.npy"},
     "cut_header.safetensors",
     "offset",
     "expected"},
    {"diff_safetensors_unknown_dtype",
     {"diff", "unknown_dtype.safetensors", "good.npy"},
     "unknown_dtype.safetensors",
     "tensor 'x'",
     "expected one of BOOL"},
    // loupe diff: options
    {"diff_unknown_metric",
     {"diff", "good.npy", "good.npy", "--tol", "rms=1"},
     "--tol rms=1",
     "unknown metric 'rms'",
     "valid metrics: max_abs"},
    {"diff_bound_not_a_number",
     {"diff", "good.npy", "good.npy", "--tol", "rms_ratio=abc"},
     "--tol rms_ratio=abc",
     "'abc'",
     "not a number"},
    {"diff_unknown_axis",
     {"diff", "good.npy", "good.npy", "--axes", "N", "--along", "Q"},
     "--along Q",
     "axis",
     "--axes"},
    // loupe trace
    {"trace_not_json",
     {"trace", "analyze", "not_json.json"},
     "not_json.json",
     "offset 0",
     "no '[' or '{'"},
    {"trace_binary_truncated",
     {"trace", "analyze", "short.loupetrace"},
     "short.loupetrace",
     "ends at offset 12",
     "72 bytes expected"},
    {"trace_diff_second_not_json",
     {"trace", "diff", "ok.json", "not_json.json"},
     "not_json.json",
     "offset 0",
     "no '[' or '{'"},
    {"trace_bad_class",
     {"trace", "analyze", "ok.json", "--class", "bad"},
     "--class",
     "'bad'",
     "NAME=SELECTOR"},
    {"trace_bad_duration",
     {"trace", "analyze", "ok.json", "--gap-threshold", "5parsecs"},
     "--gap-threshold",
     "'5parsecs'",
     "500ns"},
    {"trace_bad_overlap",
     {"trace", "analyze", "ok.json", "--overlap", "A"},
     "--overlap",
     "'A'",
     "A,B"},
    {"trace_export_unwritable",
     {"trace", "export", "ok.json", "--chrome", "/proc/no/out.json"},
     "/proc/no/out.json",
     "--chrome",
     "writable"},
    // objectives (loupe plan; loupe run reads them the same way)
    {"objective_unknown_key",
     {"plan", "unknown_key.toml"},
     "unknown_key.toml:9",
     "check[0].sede",
     "expected one of probe"},
    {"objective_wrong_type",
     {"plan", "wrong_type.toml"},
     "wrong_type.toml:8",
     "check[0].seed",
     "expected an integer"},
    {"objective_bad_gate",
     {"plan", "bad_gate.toml"},
     "bad_gate.toml:11",
     "column 19",
     "expected 'where' or the end"},
    {"objective_bad_toml",
     {"plan", "bad_syntax.toml"},
     "bad_syntax.toml:5",
     "TOML syntax",
     "expected ']'"},
    {"objective_unknown_probe",
     {"plan", "unknown_probe.toml"},
     "unknown_probe.toml:14",
     "implies[0].probe",
     "probes in this file: cols"},
    {"config_unknown_deployment",
     {"plan", "objective.toml", "--config", "nosuch"},
     "objective.toml",
     "'nosuch'",
     "named: small"},
    {"config_unknown_key",
     {"plan", "objective.toml", "--config", "zzz=3"},
     "objective.toml",
     "'zzz'",
     "keys: rows"},
    {"run_bad_set",
     {"run", "objective.toml", "--home", "home", "--set", "N"},
     "--set",
     "'N'",
     "expected NAME=VALUE"},
    // ledger and report
    {"ledger_unknown_run",
     {"ledger", "show", "r-nosuch", "--home", "home"},
     "home/ledger.sqlite",
     "no run r-nosuch",
     "loupe ledger list"},
    {"ledger_compare_unknown_run",
     {"ledger", "compare", "r-a", "r-b", "--home", "home"},
     "home/ledger.sqlite",
     "no run r-",
     "loupe ledger list"},
    {"ledger_not_a_database",
     {"ledger", "list", "--ledger", "not_a_ledger.sqlite"},
     "not_a_ledger.sqlite",
     "not a database",
     "loupe ledger"},
    {"ledger_import_not_json",
     {"ledger", "import", "objective.toml", "--home", "home"},
     "objective.toml",
     "line 1, column 2",
     "loupe ledger export"},
    {"report_unknown_run",
     {"report", "r-nosuch", "--home", "home"},
     "home/ledger.sqlite",
     "no run r-nosuch",
     "loupe ledger list"},
    // loupe probe
    {"probe_unknown",
     {"probe", "run", "nosuch", "--home", "home", "--", "{subject}"},
     "loupe_check_subject",
     "no probe named 'nosuch'",
     "the probes are: sum_correct"},
    {"probe_set_wrong_type",
     {"probe", "run", "sum_correct", "--set", "N=abc", "--home", "home", "--", "{subject}"},
     "sum_correct",
     "parameter 'N'",
     "is int, got 'abc'"},
    {"probe_set_not_allowed",
     {"probe", "run", "sum_correct", "--set", "N=12", "--home", "home", "--", "{subject}"},
     "sum_correct",
     "parameter 'N'",
     "allowed: 256, 1024"},
    {"probe_set_unknown_parameter",
     {"probe", "run", "sum_correct", "--set", "M=1", "--home", "home", "--", "{subject}"},
     "sum_correct",
     "'M'",
     "its parameters are: N (int)"},
    {"probe_set_without_value",
     {"probe", "run", "sum_correct", "--set", "N", "--home", "home", "--", "{subject}"},
     "--set",
     "'N'",
     "expected NAME=VALUE"},
    {"probe_zip_lengths_differ",
     {"probe", "run", "sum_correct", "--zip", "N=256,1024", "--zip", "M=1", "--home", "home", "--",
      "{subject}"},
     "--zip M",
     "has 1 values",
     "need the same length"},
    {"probe_unknown_metric",
     {"probe", "run", "sum_correct", "--tol", "foo=1", "--home", "home", "--", "{subject}"},
     "--tol foo=1",
     "unknown metric 'foo'",
     "valid metrics"},
    {"probe_bad_memory",
     {"probe", "run", "sum_correct", "--memory", "lots", "--home", "home", "--", "{subject}"},
     "--memory",
     "'lots'",
     "expected a size in bytes"},
    {"probe_missing_subject",
     {"probe", "run", "sum_correct", "--home", "home", "--", "/nonexistent/subject"},
     "/nonexistent/subject",
     "subject command",
     "an executable"},
    // loupe bench
    // issue 17: nesting limits, names that leave the home, run size, ledgers and imports
    {"npy_header_fifty_thousand_parentheses",
     {"diff", "deep.npy", "good.npy"},
     "deep.npy",
     "header at offset 70",
     "expected at most 8 nested tuples or lists"},
    {"trace_json_that_is_not_a_trace",
     {"trace", "analyze", "config.json"},
     "config.json",
     "offset 0",
     "expected a Chrome/Kineto trace"},
    {"ledger_import_fifty_thousand_deep",
     {"ledger", "import", "deep_export.json", "--home", "home"},
     "deep_export.json",
     "offset 161 (line 1, column 162)",
     "expected at most 128 nested arrays and objects"},
    {"ledger_import_twenty_thousand_deep_config",
     {"ledger", "import", "export_deep_config.json", "--home", "home"},
     "export_deep_config.json",
     "(line 11, column ",
     "expected at most 128 nested arrays and objects"},
    {"ledger_import_unknown_field",
     {"ledger", "import", "export_unknown_field.json", "--home", "home"},
     "export_unknown_field.json",
     "field 'run.imported'",
     "expected one of id, status"},
    {"ledger_import_run_id_with_dot_dot",
     {"ledger", "import", "export_bad_id.json", "--home", "home"},
     "export_bad_id.json",
     "field 'run.id'",
     "expected a run id of 1 to 128 characters"},
    {"ledger_import_into_another_applications_database",
     {"ledger", "import", "export_good.json", "--ledger", "app.sqlite"},
     "app.sqlite",
     "application_id 0x00000000, user_version 0, tables: notes",
     "expected a SQLite file loupe created"},
    {"ledger_list_of_another_applications_database",
     {"ledger", "list", "--ledger", "app.sqlite"},
     "app.sqlite",
     "application_id 0x00000000",
     "expected a SQLite file loupe created"},
    {"objective_hundred_thousand_dotted_header_parts",
     {"plan", "dotted.toml"},
     "dotted.toml",
     ":2:129:",
     "expected at most 64"},
    {"objective_repeats_beyond_the_cap",
     {"plan", "repeats.toml"},
     "repeats.toml:9",
     "check[0].repeats",
     "expected 1 to 10000"},
    {"objective_sweep_beyond_the_cap",
     {"plan", "sweep.toml"},
     "sweep.toml:5",
     "3000000 point(s) x 1 repeat(s)",
     "expected at most 10000 per run"},
    {"objective_probe_name_leaving_the_home",
     {"plan", "escape.toml"},
     "escape.toml:7",
     "check[0].probe",
     "expected a probe name of 1 to 128 characters"},
    {"probe_name_leaving_the_home",
     {"probe", "run", "../../escape", "--home", "home", "--", "{subject}"},
     "probe name '../../escape'",
     "character 1",
     "expected 1 to 128 characters"},
    {"probe_sweep_beyond_the_cap",
     {"probe", "run", "sum_correct", "--set", "N=" + numbers(11), "--set", "M=" + numbers(1000),
      "--home", "home", "--", "{subject}"},
     "--set/--zip",
     "more than 10000 points",
     "expected at most 10000 per run"},
    {"bench_empty_command", {"bench", "--cmd", ""}, "--cmd", "is empty", "give the command"},
    {"bench_bad_threshold",
     {"bench", "--cmd", "true", "--threshold", "2"},
     "--threshold",
     "2",
     "expected a fraction in (0, 1)"},
};

INSTANTIATE_TEST_SUITE_P(Table, BadInputTest, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<BadInput>& info) {
                           return std::string(info.param.name);
                         });

TEST(BadInputTableTest, HasAtLeastThirtyCases) { EXPECT_GE(std::size(kCases), 30u); }

}  // namespace
}  // namespace loupe
