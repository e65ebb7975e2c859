#include "check/diff.hpp"

#include <filesystem>
#include <fstream>
#include <string>

#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "core/json.hpp"
#include "loupe/error.hpp"

namespace loupe::check {
namespace {

namespace fs = std::filesystem;

class DiffTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("loupe_diff_test_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_ / "a");
    fs::create_directories(root_ / "b");
  }
  void TearDown() override { fs::remove_all(root_); }

  static Tensor filled(float value, int64_t count = 4) {
    Tensor tensor(DType::kF32, {count});
    for (float& element : tensor.mutable_data<float>()) element = value;
    return tensor;
  }
  void write(const std::string& side, const std::string& name, const Tensor& tensor) {
    write_npy(root_ / side / name, tensor);
  }
  void write_text(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }
  DiffRequest request() const {
    DiffRequest out;
    out.a = root_ / "a";
    out.b = root_ / "b";
    return out;
  }
  static std::vector<std::string> names(const DiffResult& result) {
    std::vector<std::string> out;
    for (const auto& comparison : result.comparisons) out.push_back(comparison.name);
    return out;
  }

  fs::path root_;
};

TEST_F(DiffTest, ManifestOrderDecidesTheFirstDivergence) {
  // Manifest order: z_first, m_second, a_third. m_second diverges a little, a_third a lot.
  for (const char* name : {"z_first.npy", "m_second.npy", "a_third.npy"}) {
    write("b", name, filled(1.0f));
  }
  write("a", "z_first.npy", filled(1.0f));
  write("a", "m_second.npy", filled(1.001f));
  write("a", "a_third.npy", filled(2.0f));
  write_text(root_ / "a" / "manifest.txt",
             "# layers in order\nz_first.npy\nm_second\n\na_third.npy\n");
  const DiffResult result = run_diff(request());
  EXPECT_EQ(result.order, "manifest.txt");
  EXPECT_EQ(names(result),
            (std::vector<std::string>{"z_first.npy", "m_second.npy", "a_third.npy"}));
  ASSERT_TRUE(result.first_divergence);
  EXPECT_EQ(*result.first_divergence, 1u);
  EXPECT_EQ(result.worst, (std::vector<size_t>{2, 1}));
  const std::string summary = render_diff_summary(result, request());
  EXPECT_NE(summary.find("first divergence: m_second.npy (#2 of 3)"), std::string::npos);
  EXPECT_NE(summary.find("worst: a_third.npy (#3 of 3)"), std::string::npos);
  EXPECT_LT(summary.find("first divergence:"), summary.find("worst:"));
}

TEST_F(DiffTest, NumberedNamesSortNaturally) {
  for (const char* name : {"layer_10.npy", "layer_2.npy", "layer_1.npy"}) {
    write("a", name, filled(3.0f));
    write("b", name, filled(1.0f));
  }
  const DiffResult result = run_diff(request());
  EXPECT_EQ(result.order, "natural");
  EXPECT_EQ(names(result),
            (std::vector<std::string>{"layer_1.npy", "layer_2.npy", "layer_10.npy"}));
  EXPECT_EQ(*result.first_divergence, 0u);
}

TEST_F(DiffTest, UnnumberedNamesWithoutManifestHaveNoFirstDivergence) {
  write("a", "alpha.npy", filled(3.0f));
  write("b", "alpha.npy", filled(1.0f));
  write("a", "beta.npy", filled(3.0f));
  write("b", "beta.npy", filled(1.0f));
  const DiffResult result = run_diff(request());
  EXPECT_EQ(result.order, "unordered");
  EXPECT_FALSE(result.first_divergence);
  EXPECT_EQ(result.worst.size(), 2u);
}

TEST_F(DiffTest, OneSidedAndNonTensorFilesAreReportedAndCounted) {
  write("a", "layer_0.npy", filled(1.0f));
  write("b", "layer_0.npy", filled(1.0f));
  write("a", "layer_1.npy", filled(1.0f));
  write("b", "layer_2.npy", filled(1.0f));
  write("b", "layer_3.npy", filled(1.0f));
  write_text(root_ / "a" / "notes.txt", "not a tensor");
  const DiffResult result = run_diff(request());
  EXPECT_EQ(names(result), (std::vector<std::string>{"layer_0.npy"}));
  EXPECT_EQ(result.only_in_a, (std::vector<std::string>{"layer_1.npy"}));
  EXPECT_EQ(result.only_in_b, (std::vector<std::string>{"layer_2.npy", "layer_3.npy"}));
  EXPECT_EQ(result.not_tensor, (std::vector<std::string>{"A/notes.txt"}));
  EXPECT_EQ(result.stats.count(Stat::diff_tensor_only_in_a), 1);
  EXPECT_EQ(result.stats.count(Stat::diff_tensor_only_in_b), 2);
  EXPECT_EQ(result.stats.count(Stat::diff_file_not_tensor), 1);
  const std::string summary = render_diff_summary(result, request());
  EXPECT_NE(summary.find("only in A (1): layer_1.npy\n"), std::string::npos);
  EXPECT_NE(summary.find("only in B (2): layer_2.npy, layer_3.npy\n"), std::string::npos);
  EXPECT_NE(summary.find("not tensors (1): A/notes.txt\n"), std::string::npos);
}

TEST_F(DiffTest, SafetensorsPairByNameInFileOrderAndNameSelectsOne) {
  write_safetensors(root_ / "a.safetensors",
                    {{"w_late", filled(1.0f)}, {"w_early", filled(2.0f)}, {"extra", filled(1.0f)}});
  write_safetensors(root_ / "b.safetensors", {{"w_late", filled(1.0f)}, {"w_early", filled(1.0f)}});
  DiffRequest req;
  req.a = root_ / "a.safetensors";
  req.b = root_ / "b.safetensors";
  const DiffResult result = run_diff(req);
  EXPECT_EQ(result.order, "safetensors");
  EXPECT_EQ(names(result), (std::vector<std::string>{"w_late", "w_early"}));
  EXPECT_EQ(result.only_in_a, (std::vector<std::string>{"extra"}));
  EXPECT_EQ(*result.first_divergence, 1u);
  req.name = "w_late";
  EXPECT_EQ(names(run_diff(req)), (std::vector<std::string>{"w_late"}));
  req.name = "nope";
  try {
    run_diff(req);
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUsage);
    EXPECT_EQ(error.message(),
              "--name nope: no tensor of that name in A or B; names: w_late, w_early, extra");
  }
}

TEST_F(DiffTest, TwoNpyFilesPairWhateverTheirNames) {
  write("a", "x.npy", filled(1.0f));
  write("b", "y.npy", filled(1.0f));
  DiffRequest req;
  req.a = root_ / "a" / "x.npy";
  req.b = root_ / "b" / "y.npy";
  const DiffResult result = run_diff(req);
  EXPECT_EQ(names(result), (std::vector<std::string>{"x.npy"}));
  EXPECT_EQ(result.order, "single");
  EXPECT_TRUE(result.worst.empty());
}

TEST_F(DiffTest, ShapeMismatchNamesBothFiles) {
  write("a", "layer_0.npy", filled(1.0f, 4));
  write("b", "layer_0.npy", filled(1.0f, 5));
  try {
    run_diff(request());
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInput);
    EXPECT_EQ(error.message(), "comparing 'layer_0.npy' (A: " + (root_ / "a/layer_0.npy").string() +
                                   ", B: " + (root_ / "b/layer_0.npy").string() +
                                   "): shapes differ: A is [4], B is [5]; expected the same shape");
  }
}

TEST_F(DiffTest, FileAgainstDirectoryIsAUsageError) {
  write("a", "x.npy", filled(1.0f));
  DiffRequest req;
  req.a = root_ / "a" / "x.npy";
  req.b = root_ / "b";
  try {
    run_diff(req);
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUsage);
  }
}

TEST_F(DiffTest, FiveHundredTensorsKeepTheSummaryShort) {
  for (int index = 0; index < 500; ++index) {
    const std::string name = "layer_" + std::to_string(index) + ".npy";
    write("a", name, filled(1.0f + 0.01f * static_cast<float>(index + 1)));
    write("b", name, filled(1.0f));
  }
  const DiffResult result = run_diff(request());
  EXPECT_EQ(result.comparisons.size(), 500u);
  EXPECT_EQ(*result.first_divergence, 0u);
  EXPECT_EQ(result.worst.front(), 499u);
  const std::string summary = render_diff_summary(result, request());
  EXPECT_NE(summary.find("  +495 more; use --json or --name\n"), std::string::npos);
  EXPECT_LT(summary.size(), 4000u);  // ~4 characters a token: well under 2,000 tokens

  const Json envelope = Json::parse(render_diff_json(result, request()));
  EXPECT_EQ(envelope["kind"], "diff");
  EXPECT_EQ(envelope["verdict"], "fail");
  EXPECT_EQ(envelope["truncated"], true);
  EXPECT_EQ(envelope["data"]["tensors"].size(), 500u);
  EXPECT_EQ(envelope["data"]["first_divergence"], "layer_0.npy");
  EXPECT_EQ(envelope["data"]["findings_omitted"], 495);
  EXPECT_EQ(envelope["findings"][0]["id"], "check.diff.mismatch");
  EXPECT_EQ(envelope["findings"][0]["claim"].get<std::string>().substr(0, 47),
            "first divergence (#1 of 500 in natural order): ");
}

TEST_F(DiffTest, BoundsDecideTheExitCode) {
  write("a", "layer_0.npy", filled(1.001f));
  write("b", "layer_0.npy", filled(1.0f));
  DiffRequest req = request();
  req.bounds = {parse_bound("max_abs=1e-2")};
  EXPECT_EQ(diff_exit_code(run_diff(req), req), 0);
  req.bounds.push_back(parse_bound("rms_ratio=1e-4"));
  const DiffResult result = run_diff(req);
  EXPECT_EQ(diff_exit_code(result, req), 1);
  const Json envelope = Json::parse(render_diff_json(result, req));
  EXPECT_EQ(envelope["verdict"], "fail");
  EXPECT_EQ(envelope["data"]["tensors"][0]["bounds"][1]["pass"], false);
}

// Issue 19: without --tol a diff used to exit 0 whatever it found.
TEST_F(DiffTest, DefaultTolerancesFailWithoutTolUnlessReportOnly) {
  write("a", "layer_0.npy", filled(1.001f));     // past float32's atol 1e-5 + rtol 1.3e-6
  write("a", "layer_1.npy", filled(1.000001f));  // within it
  write("b", "layer_0.npy", filled(1.0f));
  write("b", "layer_1.npy", filled(1.0f));
  DiffRequest req = request();
  DiffResult result = run_diff(req);
  EXPECT_EQ(diff_exit_code(result, req), 1);
  EXPECT_EQ(diff_failures(result, req), (std::vector<std::string>{"1 of 2 past tolerance"}));
  EXPECT_NE(render_diff_summary(result, req).find("verdict: fail (1 of 2 past tolerance)\n"),
            std::string::npos);
  EXPECT_EQ(Json::parse(render_diff_json(result, req))["verdict"], "fail");

  req.report_only = true;
  result = run_diff(req);
  EXPECT_EQ(diff_exit_code(result, req), 0);
  EXPECT_NE(render_diff_summary(result, req).find("verdict: none (--report-only)\n"),
            std::string::npos);
  EXPECT_EQ(Json::parse(render_diff_json(result, req))["verdict"], "none");

  fs::remove(root_ / "a" / "layer_0.npy");
  fs::remove(root_ / "b" / "layer_0.npy");
  req.report_only = false;
  EXPECT_EQ(diff_exit_code(run_diff(req), req), 0);
}

TEST_F(DiffTest, TheListingFollowsLinksAndTellsFilesFromDirectoriesByTheirType) {
  // A link to a tensor is a tensor (the listing stats a link, following it); a directory named
  // like a tensor, a dangling link and a FIFO are not tensors; the extension's case is ignored.
  write("a", "layer_0.npy", filled(1.0f));
  write("b", "layer_0.npy", filled(1.0f));
  write_npy(root_ / "elsewhere.npy", filled(2.0f));
  fs::create_symlink(root_ / "elsewhere.npy", root_ / "a" / "layer_1.NPY");
  write("b", "layer_1.NPY", filled(2.0f));
  fs::create_directories(root_ / "a" / "layer_2.npy");
  fs::create_symlink(root_ / "missing.npy", root_ / "a" / "layer_3.npy");
  ASSERT_EQ(::mkfifo((root_ / "b" / "layer_4.npy").c_str(), 0600), 0);
  const DiffResult result = run_diff(request());
  EXPECT_EQ(names(result), (std::vector<std::string>{"layer_0.npy", "layer_1.NPY"}));
  EXPECT_FALSE(result.first_divergence);
  EXPECT_EQ(result.not_tensor,
            (std::vector<std::string>{"A/layer_2.npy", "A/layer_3.npy", "B/layer_4.npy"}));
}

TEST_F(DiffTest, NothingComparedFailsNamingBothSides) {
  DiffRequest req = request();
  DiffResult result = run_diff(req);  // two empty directories
  EXPECT_EQ(diff_exit_code(result, req), 1);
  EXPECT_EQ(diff_failures(result, req), (std::vector<std::string>{"nothing compared"}));
  EXPECT_NE(render_diff_summary(result, req)
                .find("nothing compared: A holds 0 tensors and B 0 with no name in common\n"),
            std::string::npos);
  const Json envelope = Json::parse(render_diff_json(result, req));
  EXPECT_EQ(envelope["verdict"], "fail");
  EXPECT_EQ(envelope["findings"][0]["id"], "check.diff.nothing_compared");
  EXPECT_EQ(envelope["findings"][0]["severity"], "fail");
}

TEST_F(DiffTest, UnmatchedNamesFailUnlessOneIsNamed) {
  write("a", "layer_0.npy", filled(1.0f));
  write("a", "layer_1.npy", filled(1.0f));
  write("b", "layer_0.npy", filled(1.0f));
  write("b", "layer_2.npy", filled(1.0f));
  DiffRequest req = request();
  DiffResult result = run_diff(req);
  EXPECT_EQ(diff_failures(result, req),
            (std::vector<std::string>{"2 unmatched (only in A: 1, only in B: 1)"}));
  EXPECT_NE(render_diff_summary(result, req)
                .find("only in A (1): layer_1.npy\nonly in B (1): layer_2.npy\n"),
            std::string::npos);
  const Json envelope = Json::parse(render_diff_json(result, req));
  EXPECT_EQ(envelope["verdict"], "fail");
  req.name = "layer_0.npy";
  result = run_diff(req);
  EXPECT_EQ(diff_exit_code(result, req), 0);
  req.name = "layer_1.npy";  // named, but on one side only: nothing compared
  result = run_diff(req);
  EXPECT_EQ(
      diff_failures(result, req),
      (std::vector<std::string>{"nothing compared", "1 unmatched (only in A: 1, only in B: 0)"}));
}

TEST(NaturalOrderTest, DigitRunsCompareByValue) {
  EXPECT_TRUE(natural_less("layer_2", "layer_10"));
  EXPECT_FALSE(natural_less("layer_10", "layer_2"));
  EXPECT_TRUE(natural_less("layer_02", "layer_10"));
  EXPECT_TRUE(natural_less("a", "b"));
  EXPECT_TRUE(natural_less("x1", "x1a"));
  EXPECT_FALSE(natural_less("x1", "x1"));
}

}  // namespace
}  // namespace loupe::check
