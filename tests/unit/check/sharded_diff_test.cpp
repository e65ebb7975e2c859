// run_diff on rank-<r>/ and step-<s>/ directories: where the dims and groups come from, which
// findings lead, replicas, a sharded B, first divergence over ordered sharded dumps.
#include <filesystem>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "check/diff.hpp"
#include "core/json.hpp"
#include "loupe/error.hpp"
#include "support/scratch_dir.hpp"

namespace loupe::check {
namespace {

namespace fs = std::filesystem;

// (T, 2) float32 with row t holding (t, -t), plus `offset` on rows [bad_begin, bad_end).
Tensor rows(int64_t first, int64_t count, float offset = 0, int64_t bad_begin = 0,
            int64_t bad_end = 0) {
  Tensor tensor(DType::kF32, {count, 2});
  auto data = tensor.mutable_data<float>();
  for (int64_t row = 0; row < count; ++row) {
    const float value = static_cast<float>(first + row);
    const float shift = first + row >= bad_begin && first + row < bad_end ? offset : 0.0f;
    data[2 * row] = value + shift;
    data[2 * row + 1] = -value;
  }
  return tensor;
}

class ShardedRunDiff : public ::testing::Test {
 protected:
  ShardedRunDiff() : scratch_("sharded-run-diff") {}
  fs::path dir(const std::string& name) {
    const fs::path path = scratch_.path() / name;
    fs::create_directories(path);
    return path;
  }
  // A natural cp=2 cut of rows 0..7 under A/rank-<r>/x.safetensors with metadata.
  void write_cp2(const std::string& side, std::map<std::string, std::string> extra = {},
                 float offset = 0) {
    for (int rank = 0; rank < 2; ++rank) {
      std::map<std::string, std::string> metadata = {{"loupe.dims", "t(cp) d"},
                                                     {"loupe.parallel", "cp=2"}};
      for (const auto& [key, value] : extra) metadata[key] = value;
      write_safetensors(dir(side + "/rank-" + std::to_string(rank)) / "x.safetensors",
                        {{"x", rows(4 * rank, 4, offset, 5, 6)}}, metadata);
    }
  }
  DiffRequest request(const std::string& a, const std::string& b) {
    DiffRequest out;
    out.a = scratch_.path() / a;
    out.b = scratch_.path() / b;
    out.bounds = {parse_bound("rms_ratio=1e-6")};
    return out;
  }

  test_support::ScratchDir scratch_;
};

TEST_F(ShardedRunDiff, MetadataSaysHowAndTheRankFindingLeads) {
  write_cp2("a", {}, 1.0f);  // row 5 wrong: cp rank 1
  write_safetensors(dir("b") / "x.safetensors", {{"x", rows(0, 8)}});
  const DiffRequest req = request("a", "b");
  const DiffResult result = run_diff(req);
  ASSERT_EQ(result.comparisons.size(), 1u);
  EXPECT_EQ(result.comparisons[0].axes, (std::vector<std::string>{"t", "d"}));
  ASSERT_EQ(result.shards[0].size(), 1u);
  EXPECT_EQ(result.shards[0][0].side, "A");
  EXPECT_TRUE(result.shards[0][0].attribution.concentrated);
  const Json envelope = Json::parse(render_diff_json(result, req));
  EXPECT_EQ(envelope["findings"][0]["id"], "check.diff.rank");
  EXPECT_EQ(envelope["findings"][0]["claim"],
            "'x.safetensors:x' (A unsharded from cp=2): CP rank 1 holds 100% of the squared "
            "error (fair share 50%): t in [4, 8); global rank 1");
  EXPECT_EQ(envelope["findings"][1]["id"], "check.diff.mismatch");
  EXPECT_EQ(envelope["data"]["tensors"][0]["shards"][0]["axes"][0]["piece_begin"], Json({0, 4, 8}));
  const std::string summary = render_diff_summary(result, req);
  EXPECT_NE(summary.find("    A unsharded (cp=2, dims 't(cp) d'): CP rank 1 holds 100%"),
            std::string::npos)
      << summary;
}

TEST_F(ShardedRunDiff, CommandLineDimsWinAndNameEqualsSpecWinsOverTheGeneralOne) {
  // Metadata claims zigzag; the command line says natural, for this tensor by name.
  write_cp2("a", {{"loupe.dims", "t(cp,zigzag) d"}});
  write_safetensors(dir("b") / "x.safetensors", {{"x", rows(0, 8)}});
  DiffRequest req = request("a", "b");
  EXPECT_TRUE(run_diff(req).any_bound_failed);  // read as zigzag: rows out of place
  req.dims = {"t(cp,zigzag) d", "x.safetensors:x=t(cp) d"};
  const DiffResult result = run_diff(req);
  EXPECT_FALSE(result.any_bound_failed);
  EXPECT_EQ(result.shards[0][0].layout.dims.text, "t(cp) d");
}

TEST_F(ShardedRunDiff, GroupRanksInMetadataOverrideTheLayout) {
  // Directory rank-0 holds cp rank 1's rows and rank-1 holds cp rank 0's, as the files say.
  for (int rank = 0; rank < 2; ++rank) {
    const int cp_rank = 1 - rank;
    write_safetensors(dir("a/rank-" + std::to_string(rank)) / "x.safetensors",
                      {{"x", rows(4 * cp_rank, 4)}},
                      {{"loupe.dims", "t(cp) d"},
                       {"loupe.parallel", "cp=2"},
                       {"loupe.rank.cp", std::to_string(cp_rank)}});
  }
  write_safetensors(dir("b") / "x.safetensors", {{"x", rows(0, 8)}});
  EXPECT_FALSE(run_diff(request("a", "b")).any_bound_failed);
}

TEST_F(ShardedRunDiff, AShardedBWithItsOwnGroupsAndAReplicaThatDiffers) {
  // A: .npy shards over cp=2. B: .npy shards over tp=2 x cp=4 (t is not cut by tp, so tp's ranks
  // hold copies); B's rank 3 (tp 1, cp 1) holds a copy that differs from rank 2's.
  for (int rank = 0; rank < 2; ++rank) {
    write_npy(dir("a/rank-" + std::to_string(rank)) / "x.npy", rows(4 * rank, 4));
  }
  for (int rank = 0; rank < 8; ++rank) {
    const int cp = rank / 2;
    write_npy(dir("b/rank-" + std::to_string(rank)) / "x.npy",
              rows(2 * cp, 2, rank == 3 ? 0.5f : 0.0f, 0, 100));
  }
  DiffRequest req = request("a", "b");
  req.dims = {"t(cp) d"};
  req.parallel = "cp=2";
  req.parallel_b = "tp=2,cp=4";
  const DiffResult result = run_diff(req);
  EXPECT_FALSE(result.any_bound_failed);  // B's logical tensor is built from tp rank 0
  ASSERT_EQ(result.shards[0].size(), 2u);
  EXPECT_EQ(result.shards[0][1].side, "B");
  ASSERT_EQ(result.shards[0][1].replica_mismatches.size(), 1u);
  EXPECT_EQ(result.shards[0][1].replica_mismatches[0].rank, 3);
  EXPECT_EQ(result.shards[0][1].replica_mismatches[0].reference_rank, 2);
  EXPECT_EQ(result.shards[0][1].replica_mismatches[0].differing, 2);
  const Json envelope = Json::parse(render_diff_json(result, req));
  bool replica_found = false;
  for (const Json& finding : envelope["findings"]) {
    if (finding["id"] != "check.diff.replica") continue;
    replica_found = true;
    EXPECT_EQ(finding["severity"], "warn");
    EXPECT_NE(finding["claim"].get<std::string>().find(
                  "TP replica on rank 3 differs from rank 2's copy in 2 elements"),
              std::string::npos);
  }
  EXPECT_TRUE(replica_found);
}

TEST_F(ShardedRunDiff, FirstDivergenceOverOrderedShardedDumps) {
  // Two layers per rank; layer_1 diverges on cp rank 0 only.
  for (int rank = 0; rank < 2; ++rank) {
    write_npy(dir("a/rank-" + std::to_string(rank)) / "layer_0.npy", rows(4 * rank, 4));
    write_npy(dir("a/rank-" + std::to_string(rank)) / "layer_1.npy", rows(4 * rank, 4, 2.0f, 1, 2));
  }
  write_npy(dir("b") / "layer_0.npy", rows(0, 8));
  write_npy(dir("b") / "layer_1.npy", rows(0, 8));
  DiffRequest req = request("a", "b");
  req.dims = {"t(cp) d"};
  req.parallel = "cp=2";
  const DiffResult result = run_diff(req);
  EXPECT_EQ(result.order, "natural");
  ASSERT_TRUE(result.first_divergence);
  EXPECT_EQ(result.comparisons[*result.first_divergence].name, "layer_1.npy");
  EXPECT_EQ(result.shards[*result.first_divergence][0].attribution.axes[0].top_rank, 0);
}

TEST_F(ShardedRunDiff, RulesDecideEveryUnshardedTensorAndTheRankStillNamesTheFault) {
  // As above, with threshold rules in place of --tol: every tensor matches a rule, the first
  // failing one is the faulty layer, and its rank attribution is kept.
  for (int rank = 0; rank < 2; ++rank) {
    write_npy(dir("a/rank-" + std::to_string(rank)) / "layer_0.npy", rows(4 * rank, 4));
    write_npy(dir("a/rank-" + std::to_string(rank)) / "layer_1.npy", rows(4 * rank, 4, 2.0f, 1, 2));
  }
  write_npy(dir("b") / "layer_0.npy", rows(0, 8));
  write_npy(dir("b") / "layer_1.npy", rows(0, 8));
  DiffRequest req = request("a", "b");
  req.bounds.clear();
  req.rules = parse_rules(
      "[[rule]]\nname = 'layers'\nmatch = '^layer_'\nwhen = ['rel <= 1e-6', 'max_abs <= 0.5']\n",
      "rules.toml");
  req.dims = {"t(cp) d"};
  req.parallel = "cp=2";
  const DiffResult result = run_diff(req);
  ASSERT_EQ(result.rule_index.size(), 2u);
  EXPECT_EQ(result.rule_index[0], 0u);
  EXPECT_EQ(result.rule_index[1], 0u);
  EXPECT_EQ(result.diverged, (std::vector<bool>{false, true}));
  ASSERT_TRUE(result.first_divergence);
  EXPECT_EQ(result.comparisons[*result.first_divergence].name, "layer_1.npy");
  EXPECT_EQ(result.shards[*result.first_divergence][0].attribution.axes[0].top_rank, 0);
  const std::string summary = render_diff_summary(result, req);
  // The sentence names each metric by its own name (rel is cos_dist) and keeps the rank line.
  EXPECT_NE(summary.find("    rule 'layers' (rules.toml:1) decided: cos_dist 0.00704 > 1.00e-06; "
                         "max_abs 2 > 0.5\n    A unsharded (cp=2, dims 't(cp) d'): CP rank 0 holds "
                         "100% of the squared error"),
            std::string::npos)
      << summary;
}

TEST_F(ShardedRunDiff, MissingDimsOrGroupsAreUsageErrors) {
  for (int rank = 0; rank < 2; ++rank) {
    write_npy(dir("a/rank-" + std::to_string(rank)) / "x.npy", rows(4 * rank, 4));
  }
  write_npy(dir("b") / "x.npy", rows(0, 8));
  DiffRequest req = request("a", "b");
  try {
    run_diff(req);
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUsage);
    EXPECT_NE(error.message().find("'x.npy' is sharded over rank-<r>/ directories, but no dims "
                                   "spec says how"),
              std::string::npos)
        << error.message();
  }
  req.dims = {"t(cp) d"};
  try {
    run_diff(req);
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUsage);
    EXPECT_NE(error.message().find("'x.npy' is sharded over 2 ranks, but nothing gives the run's "
                                   "groups"),
              std::string::npos)
        << error.message();
  }
}

TEST_F(ShardedRunDiff, OneRankDirectoryWithoutGroupsIsReadAsItIs) {
  write_npy(dir("a/rank-0") / "x.npy", rows(0, 8));
  write_npy(dir("b") / "x.npy", rows(0, 8));
  const DiffResult result = run_diff(request("a", "b"));
  EXPECT_FALSE(result.any_bound_failed);
  EXPECT_TRUE(result.shards[0].empty());
}

}  // namespace
}  // namespace loupe::check
