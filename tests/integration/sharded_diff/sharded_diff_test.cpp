// Sharded runs of a real engine: kda dumps its CP prefill (natural and zigzag) and a TP split of
// its heads rank by rank, and a prefill followed by decode steps step by step; `loupe diff`
// compares each with kda's single-device run, passes the correct ones and names the rank (and
// the logical range) of a planted fault as the top finding.
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "loupe/tensor.hpp"
#include "support/cli_run.hpp"

namespace loupe {
namespace {

namespace fs = std::filesystem;
using test_support::CliRun;
using test_support::run_cli;

// T = 2048 tokens, H = 2 query/key heads, HV = 4 value heads, K = V = 64, slowly decaying gates
// (so a lost state shows far along the sequence).
constexpr int64_t kTokens = 2048;

class ShardedDiff : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("loupe-sharded-diff-" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    kda({"generate", "--shape", "1,2048,2,4,64,64", "--decay", "slow", "--seed", "5", "--out",
         (root_ / "in").string()});
    kda({"kernel", "chunk", "--in", (root_ / "in").string(), "--out", (root_ / "one").string(),
         "--dump", (root_ / "ref").string(), "--threads", "1"});
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }

  static void kda(std::vector<std::string> args) {
    args.insert(args.begin(), KDA_EXECUTABLE);
    const CliRun run = run_cli(args);
    ASSERT_EQ(run.exit_code, 0) << run.err;
  }
  static CliRun diff(std::vector<std::string> args) {
    args.insert(args.begin(), {LOUPE_EXECUTABLE, "diff"});
    args.push_back("--json");
    return run_cli(args);
  }
  static std::string path(const std::string& name) { return (root_ / name).string(); }

  static fs::path root_;
};

fs::path ShardedDiff::root_;

TEST_F(ShardedDiff, CorrectCpShardsPassInBothOrders) {
  for (const std::string order : {"natural", "zigzag"}) {
    kda({"kernel", "cp", "--in", path("in"), "--out", path("cp_" + order), "--shards", "4",
         "--shard-order", order, "--dump-shards", path("cp_dump_" + order), "--threads", "1"});
    const CliRun run = diff({path("cp_dump_" + order), path("ref"), "--name", "o.safetensors:o",
                             "--tol", "rms_ratio=1e-5"});
    ASSERT_EQ(run.exit_code, 0) << order << ": " << run.out << run.err;
    EXPECT_EQ(run.envelope["verdict"], "pass");
    const Json& shards = run.envelope["data"]["tensors"][0]["shards"][0];
    EXPECT_EQ(shards["dims"], order == "zigzag" ? "b t(cp,zigzag) h v" : "b t(cp) h v");
    EXPECT_EQ(shards["parallel"], "cp=4");
    EXPECT_EQ(shards["axes"][0]["piece_begin"].size(), order == "zigzag" ? 9u : 5u);
    EXPECT_EQ(run.envelope["data"]["tensors"][0]["shape"], Json({1, kTokens, 4, 64}));
  }
}

TEST_F(ShardedDiff, AFaultInOneZigzagChunkIsTheTopFindingNamedByRankAndRange) {
  kda({"kernel", "cp", "--in", path("in"), "--out", path("cp_fault_z"), "--shards", "4",
       "--shard-order", "zigzag", "--dump-shards", path("cp_fault_z_dump"), "--fault-rank", "2",
       "--fault-chunk", "1", "--threads", "1"});
  const CliRun run = diff({path("cp_fault_z_dump"), path("ref"), "--name", "o.safetensors:o",
                           "--tol", "rms_ratio=1e-5"});
  ASSERT_EQ(run.exit_code, 1) << run.out << run.err;
  const Json& top = run.envelope["findings"][0];
  EXPECT_EQ(top["id"], "check.diff.rank");
  EXPECT_EQ(top["severity"], "fail");
  // 2W = 8 chunks of 256 tokens; rank 2's second chunk is chunk 2·4 − 1 − 2 = 5.
  EXPECT_NE(top["claim"].get<std::string>().find(
                "CP rank 2 holds 100% of the squared error (fair share 25%): its second zigzag "
                "chunk, t in [1280, 1536); global rank 2"),
            std::string::npos)
      << top["claim"];
  EXPECT_EQ(top["where"]["params"]["cp_rank"], 2);
  const Json& worst = top["where"]["coords"];
  EXPECT_GE(worst["t"].get<int64_t>(), 1280);
  EXPECT_LT(worst["t"].get<int64_t>(), 1536);
}

TEST_F(ShardedDiff, AFaultInOneNaturalRankIsNamed) {
  kda({"kernel", "cp", "--in", path("in"), "--out", path("cp_fault_n"), "--shards", "4",
       "--dump-shards", path("cp_fault_n_dump"), "--fault-rank", "3", "--threads", "1"});
  const CliRun run = diff({path("cp_fault_n_dump"), path("ref"), "--name", "o.safetensors:o",
                           "--tol", "rms_ratio=1e-5"});
  ASSERT_EQ(run.exit_code, 1) << run.out << run.err;
  const Json& top = run.envelope["findings"][0];
  EXPECT_EQ(top["id"], "check.diff.rank");
  EXPECT_NE(top["claim"].get<std::string>().find(
                "CP rank 3 holds 100% of the squared error (fair share 25%): t in [1536, 2048)"),
            std::string::npos)
      << top["claim"];
}

TEST_F(ShardedDiff, TpShardsWithAPartialSumPassAndAFaultyTpRankIsNamed) {
  kda({"kernel", "chunk", "--in", path("in"), "--out", path("tp"), "--tp", "2", "--dump-shards",
       path("tp_dump"), "--threads", "1"});
  // o (h cut over tp), S (h cut) and o_proj (a partial sum over tp) all agree.
  const CliRun pass = diff({path("tp_dump"), path("ref"), "--tol", "rms_ratio=1e-5"});
  ASSERT_EQ(pass.exit_code, 0) << pass.out << pass.err;
  EXPECT_EQ(pass.envelope["data"]["pairing"]["compared"].size(), 3u);
  for (const Json& tensor : pass.envelope["data"]["tensors"]) {
    if (tensor["name"] == "o_proj.safetensors:o_proj") {
      EXPECT_EQ(tensor["shards"][0]["partial"], Json({"tp"}));
    }
  }

  kda({"kernel", "chunk", "--in", path("in"), "--out", path("tp_fault"), "--tp", "2",
       "--dump-shards", path("tp_fault_dump"), "--fault-rank", "1", "--threads", "1"});
  const CliRun fail = diff(
      {path("tp_fault_dump"), path("ref"), "--name", "o.safetensors:o", "--tol", "rms_ratio=1e-5"});
  ASSERT_EQ(fail.exit_code, 1) << fail.out << fail.err;
  const Json& top = fail.envelope["findings"][0];
  EXPECT_EQ(top["id"], "check.diff.rank");
  EXPECT_NE(top["claim"].get<std::string>().find(
                "TP rank 1 holds 100% of the squared error (fair share 50%): h in [2, 4)"),
            std::string::npos)
      << top["claim"];
  // The partial sum fails too, but no single rank can be blamed for a sum: no rank finding.
  const CliRun partial = diff({path("tp_fault_dump"), path("ref"), "--name",
                               "o_proj.safetensors:o_proj", "--tol", "rms_ratio=1e-5"});
  ASSERT_EQ(partial.exit_code, 1) << partial.out << partial.err;
  EXPECT_EQ(partial.envelope["findings"][0]["id"], "check.diff.mismatch");
}

// Slices tokens [begin, end) of a (1, T, ...) input.
Tensor token_slice(const Tensor& tensor, int64_t begin, int64_t end) {
  std::vector<int64_t> shape = tensor.shape();
  const int64_t token_bytes = static_cast<int64_t>(tensor.nbytes()) / shape[1];
  shape[1] = end - begin;
  Tensor out(tensor.dtype(), shape);
  std::copy_n(tensor.bytes() + begin * token_bytes, (end - begin) * token_bytes,
              out.mutable_bytes());
  return out;
}

TEST_F(ShardedDiff, PrefillPlusDecodeStepsLineUpWithOneForward) {
  // The engine prefills 2040 tokens, then decodes 8 single-token steps, each from the state the
  // step before left; `drop_at` makes one step start from a zero state instead.
  auto run_steps = [&](const std::string& name, int drop_at) {
    const std::vector<int64_t> bounds = {0, 2040, 2041, 2042, 2043, 2044, 2045, 2046, 2047, 2048};
    for (size_t step = 0; step + 1 < bounds.size(); ++step) {
      const fs::path in = root_ / (name + "_in") / std::to_string(step);
      fs::create_directories(in);
      for (const char* input : {"q", "k", "v", "g", "beta"}) {
        write_npy(in / (std::string(input) + ".npy"),
                  token_slice(read_npy(root_ / "in" / (std::string(input) + ".npy")), bounds[step],
                              bounds[step + 1]));
      }
      const fs::path previous = root_ / (name + "_out") / std::to_string(step - 1) / "S.npy";
      if (step > 0 && static_cast<int>(step) != drop_at) fs::copy_file(previous, in / "h0.npy");
      kda({"kernel", "chunk", "--in", in.string(), "--out",
           (root_ / (name + "_out") / std::to_string(step)).string(), "--dump",
           (root_ / name / ("step-" + std::to_string(step))).string(), "--dump-step",
           std::to_string(step), "--threads", "1"});
    }
  };
  run_steps("steps", -1);
  // o and o_proj line up within tolerance; S is the reference's only, and an unmatched tensor
  // fails a diff that names none (issue 19), so the exit is 1 for that alone.
  const CliRun pass = diff({path("steps"), path("ref"), "--tol", "rms_ratio=1e-5"});
  ASSERT_EQ(pass.exit_code, 1) << pass.out << pass.err;
  EXPECT_EQ(pass.envelope["data"]["pairing"]["only_in_b"], Json({"S.safetensors:S"}));
  EXPECT_EQ(pass.envelope["data"]["worst"], Json::array());
  const Json& tensors = pass.envelope["data"]["tensors"];
  ASSERT_EQ(tensors.size(), 2u);
  EXPECT_EQ(tensors[0]["token_alignment"]["layout"], "concatenated");
  EXPECT_EQ(tensors[0]["token_alignment"]["steps_a"], 9);
  EXPECT_EQ(tensors[0]["shape"], Json({1, kTokens, 4, 64}));

  run_steps("steps_fault", 5);  // decode step 5 (token 2044) lost its state
  const CliRun fail = diff(
      {path("steps_fault"), path("ref"), "--name", "o.safetensors:o", "--tol", "rms_ratio=1e-5"});
  ASSERT_EQ(fail.exit_code, 1) << fail.out << fail.err;
  const Json& top = fail.envelope["findings"][0];
  EXPECT_EQ(top["id"], "check.diff.step");
  EXPECT_NE(top["claim"].get<std::string>().find(
                "the first token past tolerance is t=2044, from step 5 (6 of 9 steps; a decode "
                "step); that step and the ones after it hold 100% of the squared error; the "
                "steps before it are within tolerance"),
            std::string::npos)
      << top["claim"];
  EXPECT_EQ(top["where"]["params"]["step"], 5);
  EXPECT_GE(top["where"]["coords"]["t"].get<int64_t>(), 2044);
}

TEST_F(ShardedDiff, BadShardsExitTwoNamingRankAndAxis) {
  kda({"kernel", "cp", "--in", path("in"), "--out", path("cp_bad"), "--shards", "4",
       "--shard-order", "zigzag", "--dump-shards", path("cp_bad_dump"), "--threads", "1"});
  kda({"kernel", "chunk", "--in", path("in"), "--out", path("tp_bad"), "--tp", "2", "--dump-shards",
       path("tp_bad_dump"), "--threads", "1"});
  // Rank 1 holds a TP shard: all 2048 tokens instead of its two zigzag chunks.
  fs::copy_file(path("tp_bad_dump") + "/rank-1/o.safetensors",
                path("cp_bad_dump") + "/rank-1/o.safetensors",
                fs::copy_options::overwrite_existing);
  const CliRun shape = diff({path("cp_bad_dump"), path("ref"), "--name", "o.safetensors:o"});
  EXPECT_EQ(shape.exit_code, 2);
  EXPECT_NE(shape.envelope["error"]["message"].get<std::string>().find(
                "rank 1 (" + path("cp_bad_dump") +
                "/rank-1/o.safetensors:o): zigzag axis 't' has extent 2048, but CP rank 0 has "
                "512; expected equal extents on every rank"),
            std::string::npos)
      << shape.out;

  // A dims spec that does not parse: the token and what was expected.
  const CliRun spec =
      diff({path("tp_bad_dump"), path("ref"), "--dims", "b t h(tp,zigag) v", "--parallel", "tp=2"});
  EXPECT_EQ(spec.exit_code, 2);
  EXPECT_EQ(spec.envelope["error"]["message"],
            "--dims 'b t h(tp,zigag) v': token 3 'h(tp,zigag)': modifier 2 'zigag' is unknown; "
            "expected tp, cp, ep, sp, dp, natural, zigzag or partial");

  // Groups that make another number of ranks than there are rank directories.
  const CliRun groups = diff({path("tp_bad_dump"), path("ref"), "--parallel", "tp=4"});
  EXPECT_EQ(groups.exit_code, 2);
  EXPECT_NE(groups.envelope["error"]["message"].get<std::string>().find(
                "2 rank-<r>/ directories, but groups 'tp=4' make 4 ranks"),
            std::string::npos)
      << groups.out;

  // A missing rank directory.
  fs::remove_all(path("tp_bad_dump") + "/rank-0");
  const CliRun missing = diff({path("tp_bad_dump"), path("ref")});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.envelope["error"]["message"].get<std::string>().find(
                "rank-0/ is missing (found rank-1/); expected rank-0/, rank-1/, ... without a gap"),
            std::string::npos)
      << missing.out;

  // Regression: rank-01/ beside rank-1/ read as the same rank and one silently replaced the other.
  fs::copy(path("tp_bad_dump") + "/rank-1", path("tp_bad_dump") + "/rank-0");
  fs::copy(path("tp_bad_dump") + "/rank-1", path("tp_bad_dump") + "/rank-01");
  const CliRun twice = diff({path("tp_bad_dump"), path("ref")});
  EXPECT_EQ(twice.exit_code, 2);
  EXPECT_NE(twice.envelope["error"]["message"].get<std::string>().find(
                "rank-01/ and rank-1/ are both rank-1; expected one directory per number"),
            std::string::npos)
      << twice.out;
}

}  // namespace
}  // namespace loupe
