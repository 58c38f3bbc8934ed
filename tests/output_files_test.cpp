// runtime/output_files: all of a run's outputs committed together or none, temporaries in private
// folders that a planted link cannot redirect, and the temporaries of killed runs removed.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "runtime/error.hpp"
#include "runtime/output_files.hpp"
#include "tests/support/temp_dir.hpp"

using namespace uvflow;
namespace fs = std::filesystem;

namespace {

std::string read(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::vector<std::string> hidden(const fs::path& dir) {
  std::vector<std::string> v;
  for (auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string()[0] == '.') v.push_back(e.path().filename().string());
  return v;
}

}  // namespace

// The second output cannot be moved into place (its path became a folder during the run): the
// first, already moved, is put back as it was, and no temporary is left.
TEST(OutputFiles, CommitIsAllOrNothing) {
  test::TempDir dir;
  dir.write("a.txt", "old a");
  OutputFiles files("test");
  std::ofstream(files.temp_for(dir / "a.txt")) << "new a";
  std::ofstream(files.temp_for(dir / "b.txt")) << "new b";
  std::ofstream(files.temp_for(dir / "c.txt")) << "new c";
  fs::create_directory(dir / "b.txt");
  try {
    files.commit();
    FAIL() << "expected an OutputError";
  } catch (const OutputError& e) {
    EXPECT_NE(std::string(e.what()).find((dir / "b.txt").string()), std::string::npos) << e.what();
  }
  EXPECT_EQ(read(dir / "a.txt"), "old a");
  EXPECT_TRUE(fs::is_directory(dir / "b.txt"));
  EXPECT_FALSE(fs::exists(dir / "c.txt"));
  EXPECT_EQ(hidden(dir.path()), std::vector<std::string>{});
}

// A Measurement Set is a folder: it replaces the previous one, which comes back if the commit fails.
TEST(OutputFiles, FolderOutputReplacesAndRollsBack) {
  test::TempDir dir;
  fs::create_directory(dir / "x.ms");
  dir.write("x.ms/table.dat", "old");
  {
    OutputFiles files("test");
    auto t = files.temp_for(dir / "x.ms");
    fs::create_directory(t);
    std::ofstream(t / "table.dat") << "new";
    std::ofstream(files.temp_for(dir / "y.txt")) << "y";
    fs::create_directory(dir / "y.txt");  // makes the second move fail
    EXPECT_THROW(files.commit(), OutputError);
  }
  EXPECT_EQ(read(dir / "x.ms/table.dat"), "old");
  OutputFiles files("test");
  auto t = files.temp_for(dir / "x.ms");
  fs::create_directory(t);
  std::ofstream(t / "table.dat") << "new";
  files.commit();
  EXPECT_EQ(read(dir / "x.ms/table.dat"), "new");
  EXPECT_EQ(hidden(dir.path()), std::vector<std::string>{});
}

// A file output whose path is an existing folder is refused when the writer asks for it, with
// nothing created.
TEST(OutputFiles, ExistingFolderIsRefused) {
  test::TempDir dir;
  fs::create_directory(dir / "out.fits");
  OutputFiles files("test");
  try {
    files.temp_for(dir / "out.fits");
    FAIL() << "expected an OutputError";
  } catch (const OutputError& e) {
    EXPECT_NE(std::string(e.what()).find("is an existing folder"), std::string::npos) << e.what();
  }
  EXPECT_EQ(hidden(dir.path()), std::vector<std::string>{});
}

// The temporary is in a folder of its own, mode 0700, made with mkdir (which fails rather than
// follow a link), under an unpredictable name.
TEST(OutputFiles, TemporaryIsInAPrivateFolder) {
  test::TempDir dir;
  OutputFiles files("test");
  auto t1 = files.temp_for(dir / "a.png");
  auto t2 = files.temp_for(dir / "b.png");
  EXPECT_EQ(t1.filename(), "a.png");
  const auto box = t1.parent_path();
  EXPECT_EQ(box.parent_path(), dir.path());
  EXPECT_EQ(fs::status(box).permissions() & fs::perms::all, fs::perms::owner_all);
  EXPECT_FALSE(fs::is_symlink(fs::symlink_status(box)));
  // Different random parts, not just different names.
  auto tail = [](const fs::path& b) { return b.filename().string().substr(b.filename().string().rfind('-')); };
  EXPECT_NE(tail(box), tail(t2.parent_path()));
}

// A run killed with SIGKILL leaves its temporaries; the next one writing to that folder removes
// them, and leaves those of a live process alone.
TEST(OutputFiles, TemporariesOfKilledRunsAreRemoved) {
  test::TempDir dir;
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    OutputFiles files("uvflow");
    std::ofstream(files.temp_for(dir / "big.fits")) << "half";
    raise(SIGKILL);
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));
  ASSERT_EQ(hidden(dir.path()).size(), 1u);
  OutputFiles live("other");  // this process's: alive
  live.temp_for(dir / "live.fits");
  const auto live_box = hidden(dir.path());
  EXPECT_EQ(live_box.size(), 1u) << "the dead run's temporary is removed by the first run that writes there";
  OutputFiles next("uvflow");
  next.temp_for(dir / "next.fits");
  EXPECT_EQ(hidden(dir.path()).size(), 2u) << "a live process's temporary stays";
  EXPECT_EQ(OutputFiles::remove_stale(dir.path()), 0);
}
