// `loupe diff` end to end: exit codes and output of the real executable.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/json.hpp"
#include "loupe/tensor.hpp"

namespace loupe {
namespace {

namespace fs = std::filesystem;

struct CliRun {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string read_all(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream buffer;
  buffer << file.rdbuf();
  return buffer.str();
}

class DiffCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("loupe_diff_cli_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  fs::path path(const std::string& name) const { return root_ / name; }

  CliRun loupe(const std::string& arguments) const {
    const std::string command = std::string(LOUPE_EXECUTABLE) + " " + arguments + " >" +
                                path("stdout").string() + " 2>" + path("stderr").string();
    const int status = std::system(command.c_str());
    CliRun run;
    run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    run.out = read_all(path("stdout"));
    run.err = read_all(path("stderr"));
    return run;
  }

  fs::path write(const std::string& name, std::vector<float> values) const {
    Tensor tensor(DType::kF32, {static_cast<int64_t>(values.size())});
    std::copy(values.begin(), values.end(), tensor.mutable_data<float>().begin());
    write_npy(path(name), tensor);
    return path(name);
  }

  fs::path root_;
};

TEST_F(DiffCliTest, TruncatedNpyExits2NamingTheSideAndTheFile) {
  const fs::path a = write("a.npy", std::vector<float>(100, 1.0f));
  const fs::path b = write("b.npy", std::vector<float>(100, 1.0f));
  fs::resize_file(a, fs::file_size(a) - 50);
  const CliRun run = loupe("diff " + a.string() + " " + b.string());
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_EQ(run.out, "");
  EXPECT_EQ(run.err.rfind("loupe: reading A: ", 0), 0u) << run.err;
  EXPECT_NE(run.err.find(a.string()), std::string::npos) << run.err;
}

TEST_F(DiffCliTest, TruncatedNpyWithJsonIsOneErrorEnvelope) {
  const fs::path a = write("a.npy", std::vector<float>(100, 1.0f));
  const fs::path b = write("b.npy", std::vector<float>(100, 1.0f));
  fs::resize_file(b, fs::file_size(b) - 4);
  const CliRun run = loupe("diff " + a.string() + " " + b.string() + " --json");
  EXPECT_EQ(run.exit_code, 2);
  const Json envelope = Json::parse(run.out);
  EXPECT_EQ(envelope["kind"], "diff");
  EXPECT_EQ(envelope["verdict"], "error");
  EXPECT_EQ(envelope["error"]["code"], "input");
  const std::string message = envelope["error"]["message"];
  EXPECT_EQ(message.rfind("reading B: ", 0), 0u) << message;
  EXPECT_NE(message.find(b.string()), std::string::npos) << message;
}

TEST_F(DiffCliTest, DifferentShapesExit2WithBothShapes) {
  const fs::path a = write("a.npy", {1, 2, 3, 4});
  const fs::path b = write("b.npy", {1, 2, 3, 4, 5});
  const CliRun run = loupe("diff " + a.string() + " " + b.string());
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_EQ(run.err, "loupe: comparing 'a.npy' (A: " + a.string() + ", B: " + b.string() +
                         "): shapes differ: A is [4], B is [5]; expected the same shape\n"
                         "hint: compare tensors of one shape (reshape or slice one side first)\n");
}

TEST_F(DiffCliTest, BoolAgainstFloatExits2) {
  Tensor mask(DType::kBool, {4});
  write_npy(path("mask.npy"), mask);
  const fs::path b = write("b.npy", {1, 2, 3, 4});
  const CliRun run = loupe("diff " + path("mask.npy").string() + " " + b.string());
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.err.find("cannot compare bool with float32: bool compares only with bool"),
            std::string::npos)
      << run.err;
}

TEST_F(DiffCliTest, MissingFileExits2) {
  const fs::path b = write("b.npy", {1});
  const CliRun run = loupe("diff " + path("nope.npy").string() + " " + b.string());
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_EQ(
      run.err.rfind("loupe: A (" + path("nope.npy").string() + "): no such file or directory\n", 0),
      0u)
      << run.err;
}

TEST_F(DiffCliTest, MalformedSafetensorsExits2NamingTheFile) {
  std::ofstream(path("bad.safetensors"), std::ios::binary) << std::string("\xff\xff\xff\xff", 4);
  write_safetensors(path("good.safetensors"), {{"w", Tensor(DType::kF32, {2})}});
  const CliRun run =
      loupe("diff " + path("good.safetensors").string() + " " + path("bad.safetensors").string());
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_EQ(run.err.rfind("loupe: reading B: ", 0), 0u) << run.err;
  EXPECT_NE(run.err.find(path("bad.safetensors").string()), std::string::npos) << run.err;
}

TEST_F(DiffCliTest, UnknownFileKindExits2) {
  std::ofstream(path("a.csv")) << "1,2\n";
  const CliRun run = loupe("diff " + path("a.csv").string() + " " + path("a.csv").string());
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.err.find("found a file ending in '.csv'; expected a .npy file, a .safetensors "
                         "file or a directory"),
            std::string::npos)
      << run.err;
}

TEST_F(DiffCliTest, UnknownMetricExits2ListingTheValidOnes) {
  const fs::path a = write("a.npy", {1});
  const CliRun run = loupe("diff " + a.string() + " " + a.string() + " --tol rmse=1");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_EQ(
      run.err,
      "loupe: --tol rmse=1: unknown metric 'rmse'; valid metrics: max_abs, max_rel, "
      "rms_ratio, cos_dist, ulp_max, ulp_p99, mismatch_count, mismatch_frac, "
      "nonfinite_mismatch, oracle_ratio, cosine, mean_abs, abs_p50, abs_p90, abs_p99, abs_p999, "
      "a_mean, a_abs_mean, a_std, a_min, a_max, b_mean, b_abs_mean, b_std, b_min, b_max, "
      "downcast_max_abs, downcast_rms_ratio, downcast_mismatch_count (aliases: rel=cos_dist "
      "rel_diff=cos_dist max_abs_diff=max_abs mean_abs_diff=mean_abs)\nhint: see "
      "docs/formats.md, \"Comparison metrics\"\n");
}

TEST_F(DiffCliTest, ToleranceBoundsExit0WhenTheyHoldAnd1WhenOneFails) {
  const fs::path a = write("a.npy", {1.0f, 2.0f, 3.5f});
  const fs::path b = write("b.npy", {1.0f, 2.0f, 3.0f});
  const std::string pair = "diff " + a.string() + " " + b.string();
  CliRun run = loupe(pair);
  EXPECT_EQ(run.exit_code, 1);  // past float32's default tolerance
  EXPECT_NE(run.out.find("verdict: fail (1 of 1 past tolerance)\n"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("max_abs 0.5 at d0=2"), std::string::npos) << run.out;

  run = loupe(pair + " --report-only");
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_NE(run.out.find("verdict: none (--report-only)\n"), std::string::npos) << run.out;

  run = loupe(pair + " --tol max_abs=0.5 --tol mismatch_count=1");
  EXPECT_EQ(run.exit_code, 0) << run.out;
  EXPECT_NE(run.out.find("verdict: pass\n"), std::string::npos) << run.out;

  run = loupe(pair + " --tol max_abs=0.5 --tol max_rel=0.1");
  EXPECT_EQ(run.exit_code, 1) << run.out;
  EXPECT_NE(run.out.find("bound failed: max_rel 0.167 > 0.1\n"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("verdict: fail (1 of 1 past tolerance)\n"), std::string::npos) << run.out;
}

TEST_F(DiffCliTest, JsonIsExactlyOneEnvelope) {
  const fs::path a = write("a.npy", {1.0f, 2.0f, 3.5f});
  const fs::path b = write("b.npy", {1.0f, 2.0f, 3.0f});
  const CliRun run =
      loupe("diff " + a.string() + " " + b.string() + " --json --axes T --tol max_abs=0.1");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(run.err, "");
  ASSERT_EQ(std::count(run.out.begin(), run.out.end(), '\n'), 1) << run.out;
  const Json envelope = Json::parse(run.out);
  std::vector<std::string> keys;
  for (auto it = envelope.begin(); it != envelope.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"loupe", "kind", "verdict", "findings", "data", "error",
                                            "truncated", "stats"}));
  EXPECT_EQ(envelope["loupe"], 1);
  EXPECT_EQ(envelope["verdict"], "fail");
  EXPECT_TRUE(envelope["error"].is_null());
  ASSERT_EQ(envelope["findings"].size(), 1u);
  EXPECT_EQ(envelope["findings"][0]["id"], "check.diff.mismatch");
  EXPECT_EQ(envelope["findings"][0]["where"]["coords"]["T"], 2);
  EXPECT_EQ(envelope["findings"][0]["evidence"]["metrics"]["max_abs"], 0.5);
  EXPECT_EQ(envelope["data"]["tensors"][0]["name"], "a.npy");
  EXPECT_EQ(envelope["data"]["tensors"][0]["metrics"]["mismatch_count"], 1);
}

TEST_F(DiffCliTest, ExamplePairNamesTheFirstDivergentLayerAndTheDriftingHead) {
  const std::string generate =
      std::string(DIFF_PAIR_EXAMPLE) + " " + path("pair").string() + " 1024 >/dev/null";
  ASSERT_EQ(std::system(generate.c_str()), 0);
  const CliRun run = loupe("diff " + path("pair/candidate_bf16").string() + " " +
                           path("pair/reference_fp32").string() + " --oracle " +
                           path("pair/oracle_fp64").string() + " --axes T,H,V --along T");
  EXPECT_EQ(run.exit_code, 1) << run.err;  // the bf16 state is past float32's tolerance
  EXPECT_NE(run.out.find("order: manifest.txt\n"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("first divergence: layer_04_scan.npy (#5 of 6) [1024, 4, 16]\n"),
            std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find(" H=1 V="), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("error growing along T: ×"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("H=1 holds "), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("× B's own error against the oracle"), std::string::npos) << run.out;
}

// Issue 19: two empty directories, or a .npy against a safetensors file with no name in common,
// used to print "0 compared ... verdict: pass" and exit 0.
TEST_F(DiffCliTest, NothingComparedExits1NamingWhatWasUnmatched) {
  fs::create_directories(path("empty_a"));
  fs::create_directories(path("empty_b"));
  CliRun run = loupe("diff " + path("empty_a").string() + " " + path("empty_b").string());
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  EXPECT_NE(run.out.find("verdict: fail (nothing compared)\n"), std::string::npos) << run.out;

  fs::create_directories(path("npy_side"));
  fs::create_directories(path("st_side"));
  write("npy_side/layer_0.npy", {1, 2});
  write_safetensors(path("st_side/weights.safetensors"), {{"w", Tensor(DType::kF32, {2})}});
  run = loupe("diff " + path("npy_side").string() + " " + path("st_side").string() + " --json");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  const Json envelope = Json::parse(run.out);
  EXPECT_EQ(envelope["verdict"], "fail");
  EXPECT_EQ(envelope["findings"][0]["id"], "check.diff.nothing_compared");
  EXPECT_EQ(envelope["data"]["pairing"]["only_in_a"][0], "layer_0.npy");
  EXPECT_EQ(envelope["data"]["pairing"]["only_in_b"][0], "weights.safetensors:w");

  run = loupe("diff " + path("npy_side").string() + " " + path("st_side").string() +
              " --report-only");
  EXPECT_EQ(run.exit_code, 0) << run.out;
}

TEST_F(DiffCliTest, RtolAtolAndEqualNanSetTheElementwiseRule) {
  const fs::path a = write("a.npy", {1.0f, 2.0f, 3.5f});
  const fs::path b = write("b.npy", {1.0f, 2.0f, 3.0f});
  const std::string pair = "diff " + a.string() + " " + b.string();
  CliRun run = loupe(pair + " --rtol 0.2 --atol 0");  // 0.5 <= 0 + 0.2 * 3
  EXPECT_EQ(run.exit_code, 0) << run.out;
  EXPECT_NE(run.out.find("(atol+rtol*|B| with rtol 0.2, atol 0)"), std::string::npos) << run.out;
  run = loupe(pair + " --rtol 0.1 --atol 0.1");  // 0.5 > 0.1 + 0.3
  EXPECT_EQ(run.exit_code, 1) << run.out;
  run = loupe(pair + " --atol 1");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_EQ(run.err.rfind("loupe: --atol given without --rtol; expected both or neither\n", 0), 0u)
      << run.err;
  run = loupe(pair + " --rtol -1 --atol 0");
  EXPECT_EQ(run.exit_code, 2);

  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const fs::path c = write("c.npy", {nan, inf, -inf});
  const fs::path d = write("d.npy", {nan, inf, -inf});
  run = loupe("diff " + c.string() + " " + d.string());
  EXPECT_EQ(run.exit_code, 1) << run.out;  // NaN vs NaN; the infinities agree
  EXPECT_NE(run.out.find("1 of 3 outside atol+rtol*|B| (1 hold NaN/Inf)"), std::string::npos)
      << run.out;
  run = loupe("diff " + c.string() + " " + d.string() + " --equal-nan --json");
  EXPECT_EQ(run.exit_code, 0) << run.out;
  const Json envelope = Json::parse(run.out);
  EXPECT_EQ(envelope["data"]["tensors"][0]["tolerance"]["equal_nan"], true);
  EXPECT_EQ(envelope["data"]["tensors"][0]["metrics"]["nonfinite_equal"], 3);
}

TEST_F(DiffCliTest, AlongGivesThePerTokenTableAndWhereTheErrorStartsAndJumps) {
  // Tokens 0-4 agree; token 5 is off by 1e-3 (past float32's tolerance), token 6 by 0.1.
  const fs::path a = write("a.npy", {1, 1, 1, 1, 1, 1.001f, 1.1f, 1.1f});
  const fs::path b = write("b.npy", std::vector<float>(8, 1.0f));
  const std::string pair = "diff " + a.string() + " " + b.string() + " --axes T --along T";
  CliRun run = loupe(pair);
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.out.find("    error starts at T=5 (first position past tolerance); jumps ×100 at "
                         "T=6\n"),
            std::string::npos)
      << run.out;
  run = loupe(pair + " --json");
  const Json envelope = Json::parse(run.out);
  const Json& positions = envelope["data"]["tensors"][0]["per_position"];
  EXPECT_EQ(positions["axis"], "T");
  EXPECT_EQ(positions["mismatches"], Json({0, 0, 0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(positions["error"].size(), 8u);
  EXPECT_EQ(positions["start"], 5);
  EXPECT_EQ(positions["jump"], 6);
  bool onset = false;
  for (const Json& finding : envelope["findings"]) {
    if (finding["id"] != "check.diff.onset") continue;
    onset = true;
    EXPECT_EQ(finding["where"]["coords"]["T"], 5);
    EXPECT_EQ(finding["severity"], "warn");
  }
  EXPECT_TRUE(onset) << run.out;
}

TEST_F(DiffCliTest, TorchSaveFilesPointToThePythonPackage) {
  std::ofstream(path("a.pt")) << "not read";
  std::ofstream(path("b.pt")) << "not read";
  const CliRun run = loupe("diff " + path("a.pt").string() + " " + path("b.pt").string());
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_EQ(
      run.err.rfind("loupe: A (" + path("a.pt").string() +
                        "): a torch.save file; expected a "
                        ".npy file, a .safetensors file or a directory\nhint: compare .pt files "
                        "through the Python package",
                    0),
      0u)
      << run.err;
}

class DiffRulesCliTest : public DiffCliTest {
 protected:
  // A and B directories: layer_1 equal, layer_2 off by 0.5 in one element, logits off by 1e-3.
  void write_dumps() {
    fs::create_directories(path("A"));
    fs::create_directories(path("B"));
    write("A/layer_1.npy", {1, 2, 3});
    write("B/layer_1.npy", {1, 2, 3});
    write("A/layer_2.npy", {1, 2, 3.5f});
    write("B/layer_2.npy", {1, 2, 3});
    write("A/logits_3.npy", {1.001f, 2});
    write("B/logits_3.npy", {1, 2});
  }
  fs::path rules(const std::string& text) const {
    std::ofstream(path("rules.toml")) << text;
    return path("rules.toml");
  }
  std::string dirs() const { return "diff " + path("A").string() + " " + path("B").string(); }
};

TEST_F(DiffRulesCliTest, EachTensorIsDecidedByTheFirstRuleMatchingItsName) {
  write_dumps();
  const fs::path file = rules(
      "[[rule]]\nname = \"logits\"\nmatch = '^logits'\nwhen = [\"rel <= 1e-3\"]\n"
      "[[rule]]\nname = \"layers\"\nmatch = 'layer_'\nwhen = [\"max_abs <= 0.1\", \"mean_abs < "
      "1\"]\n");
  CliRun run = loupe(dirs() + " --rules " + file.string());
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  EXPECT_NE(run.out.find("3 compared, 1 past tolerance (rules " + file.string() +
                         " (2 rules)); order: natural\n"),
            std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find("first divergence: layer_2.npy (#2 of 3)"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("    rule 'layers' (" + file.string() +
                         ":5) decided: max_abs 0.5 > 0.1; mean_abs 0.167 < 1\n"),
            std::string::npos)
      << run.out;
  EXPECT_EQ(run.out.find("bound failed"), std::string::npos) << run.out;  // the rule says it

  run = loupe(dirs() + " --rules " + file.string() + " --json");
  const Json envelope = Json::parse(run.out);
  const Json& tensors = envelope["data"]["tensors"];
  ASSERT_EQ(tensors.size(), 3u);
  EXPECT_EQ(tensors[0]["rule"]["name"], "layers");
  EXPECT_EQ(tensors[0]["diverged"], false);
  EXPECT_EQ(tensors[1]["rule"]["name"], "layers");
  EXPECT_EQ(tensors[1]["rule"]["line"], 5);
  EXPECT_EQ(tensors[1]["bounds"][0]["op"], "<=");
  EXPECT_EQ(tensors[1]["bounds"][0]["pass"], false);
  EXPECT_EQ(tensors[2]["rule"]["name"], "logits");
  EXPECT_EQ(tensors[2]["diverged"], false);  // rel (cos_dist) of 1e-3 off in one of two: ~1e-7
  EXPECT_EQ(envelope["data"]["rules"]["rules"].size(), 2u);
}

TEST_F(DiffRulesCliTest, ATensorNoRuleMatchesExits2NamingIt) {
  write_dumps();
  const fs::path file = rules("[[rule]]\nmatch = 'layer_'\nwhen = [\"max_abs <= 1\"]\n");
  const CliRun run = loupe(dirs() + " --rules " + file.string());
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_EQ(run.err.rfind("loupe: tensor 'logits_3.npy' matches no rule in " + file.string() +
                              " (1 rules); expected every compared tensor to match one\n",
                          0),
            0u)
      << run.err;
  const CliRun both = loupe(dirs() + " --rules " + file.string() + " --tol max_abs=1");
  EXPECT_EQ(both.exit_code, 2);
  const CliRun bad = loupe(dirs() + " --rules " +
                           rules("[[rule]]\nmatch = 'x'\nwhen = [\"rms <= 1\"]\n").string());
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("rules.toml:3: rule[0].when: predicate 'rms <= 1'"), std::string::npos)
      << bad.err;
}

TEST_F(DiffRulesCliTest, JsonlStreamsOneLinePerTensorThenTheSummary) {
  write_dumps();
  const CliRun run = loupe(dirs() + " --jsonl");
  EXPECT_EQ(run.exit_code, 1);
  std::istringstream lines(run.out);
  std::vector<Json> parsed;
  for (std::string line; std::getline(lines, line);) parsed.push_back(Json::parse(line));
  ASSERT_EQ(parsed.size(), 4u) << run.out;
  for (size_t index = 0; index < 3; ++index) {
    EXPECT_EQ(parsed[index]["kind"], "diff.tensor");
    EXPECT_EQ(parsed[index]["index"], index);
  }
  EXPECT_EQ(parsed[0]["name"], "layer_1.npy");
  EXPECT_EQ(parsed[1]["diverged"], true);
  EXPECT_EQ(parsed[3]["kind"], "diff");
  EXPECT_EQ(parsed[3]["verdict"], "fail");
  EXPECT_EQ(parsed[3]["data"]["tensors_streamed"], 3);
  EXPECT_FALSE(parsed[3]["data"].contains("tensors"));
  EXPECT_EQ(parsed[3]["data"]["first_divergence"], "layer_2.npy");
  EXPECT_EQ(loupe(dirs() + " --jsonl --json").exit_code, 2);
}

}  // namespace
}  // namespace loupe
