#include "ledger/provenance.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "test_support.hpp"

namespace loupe::ledger {
namespace {

using testing::ScratchDir;

// A repository in `dir` whose one commit holds a.txt = "one\n"; false when git failed.
bool commit_a_txt(const std::filesystem::path& dir) {
  const std::string git =
      "git -C '" + dir.string() + "' -c user.name=t -c user.email=t@example.com ";
  std::ofstream(dir / "a.txt") << "one\n";
  return std::system(
             (git + "init -q && " + git + "add a.txt && " + git + "commit -q -m first").c_str()) ==
         0;
}

TEST(ProvenanceTest, Sha256MatchesTheStandardVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // 56 bytes: the length no longer fits the first padding block.
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(ProvenanceTest, FileHashAndUnreadableFile) {
  ScratchDir dir("hash");
  std::ofstream(dir.path() / "o.toml") << "abc";
  EXPECT_EQ(file_sha256(dir.path() / "o.toml"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  try {
    file_sha256(dir.path() / "missing.toml");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInput);
    EXPECT_EQ(error.message(),
              (dir.path() / "missing.toml").string() + ": cannot be read to hash it");
  }
}

TEST(ProvenanceTest, GitStateOutsideARepositoryIsEmpty) {
  ScratchDir dir("no-git");
  EXPECT_EQ(read_git_state(dir.path()), GitState{});
}

TEST(ProvenanceTest, GitStateRecordsTheCommitAndADirtyTreesDiffHash) {
  ScratchDir dir("git");
  ASSERT_TRUE(commit_a_txt(dir.path()));
  const GitState clean = read_git_state(dir.path());
  EXPECT_EQ(clean.commit.size(), 40u);
  EXPECT_FALSE(clean.dirty);
  EXPECT_EQ(clean.diff_hash, "");

  std::ofstream(dir.path() / "a.txt") << "two\n";
  const GitState dirty = read_git_state(dir.path());
  EXPECT_EQ(dirty.commit, clean.commit);
  EXPECT_TRUE(dirty.dirty);
  EXPECT_EQ(dirty.diff_hash.size(), 64u);
  EXPECT_EQ(dirty.dirty_paths, std::vector<std::string>{"a.txt"});
  std::ofstream(dir.path() / "a.txt") << "three\n";
  EXPECT_NE(read_git_state(dir.path()).diff_hash, dirty.diff_hash);
}

// Reading the state never writes the repository: `git status` and `git diff HEAD` rewrite the
// index when its stat data is stale (here: a.txt touched, its content unchanged), under
// .git/index.lock, which a loupe killed meanwhile left behind in a clone under `make test`.
TEST(ProvenanceTest, ReadingTheStateLeavesTheIndexAsItWas) {
  ScratchDir dir("git-index");
  ASSERT_TRUE(commit_a_txt(dir.path()));
  std::filesystem::last_write_time(
      dir.path() / "a.txt", std::filesystem::file_time_type::clock::now() + std::chrono::hours(24));
  auto index_bytes = [&] {
    std::ifstream in(dir.path() / ".git" / "index", std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string before = index_bytes();
  const GitState state = read_git_state(dir.path());
  EXPECT_EQ(index_bytes(), before);
  EXPECT_FALSE(state.dirty);  // same content: no diff
  EXPECT_TRUE(state.dirty_paths.empty());
  EXPECT_FALSE(std::filesystem::exists(dir.path() / ".git" / "index.lock"));
  // A changed file is still seen, and the index still not written.
  std::ofstream(dir.path() / "a.txt") << "two\n";
  const GitState changed = read_git_state(dir.path());
  EXPECT_TRUE(changed.dirty);
  EXPECT_EQ(changed.dirty_paths, std::vector<std::string>{"a.txt"});
  EXPECT_EQ(index_bytes(), before);
}

TEST(ProvenanceTest, DirtyPathsIncludeUntrackedFilesRelativeToTheRepositoryRoot) {
  ScratchDir dir("git-paths");
  std::filesystem::create_directories(dir.path() / "kda" / "math");
  ASSERT_TRUE(commit_a_txt(dir.path()));
  std::ofstream(dir.path() / "kda" / "math" / "new file.cpp") << "int x;\n";
  // Read from a subfolder: the paths are still relative to the root.
  const GitState state = read_git_state(dir.path() / "kda");
  EXPECT_FALSE(state.dirty);  // untracked files do not change `git diff HEAD`
  EXPECT_EQ(state.dirty_paths, std::vector<std::string>{"kda/math/new file.cpp"});
}

TEST(ProvenanceTest, PorcelainPathsKeepBothSidesOfARename) {
  const std::string porcelain = std::string("R  new.cpp\0old.cpp\0 M kda/a.cpp\0?? z.txt\0", 41);
  EXPECT_EQ(parse_porcelain_paths(porcelain),
            (std::vector<std::string>{"kda/a.cpp", "new.cpp", "old.cpp", "z.txt"}));
  EXPECT_EQ(parse_porcelain_paths(""), std::vector<std::string>{});
}

}  // namespace
}  // namespace loupe::ledger
