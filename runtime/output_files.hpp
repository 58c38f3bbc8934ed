// Output files written to temporaries and moved into place only when the work that writes them
// has succeeded (Context::output_file), so a failed or interrupted run leaves no half-written file.
// A pipeline run (graph/executor) and the one-stage harness share it.
//
// Each output gets a private folder next to its final path, .NAME.<tag>-<host>-<pid>-<random>.tmp,
// made with mkdir (exclusive, mode 0700): the writer writes NAME inside it, where nobody else can
// plant a file or a symbolic link, and a rename within the same file system moves it into place.
// Folders of that pattern whose process is gone (same host, dead pid: a killed run) are removed
// the first time a run writes to their folder.
#pragma once

#include <filesystem>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace uvflow {

class OutputFiles {
 public:
  // `tag` names the temporaries (uvflow for runs, harness for the unit tests' harness).
  explicit OutputFiles(std::string tag) : tag_(std::move(tag)) {}
  ~OutputFiles() { rollback(); }  // whatever was not committed (a run that threw) goes
  // The path to write instead of `final_path` (its folder is created). Throws InputError when
  // `final_path` is an existing folder other than a casacore table (which a Measurement Set
  // writer replaces) or another output already goes there, and std::runtime_error naming
  // `final_path` and the cause (permission denied, no space left on device) when the temporary
  // cannot be made. Thread-safe.
  std::filesystem::path temp_for(const std::filesystem::path& final_path);
  // Moves every temporary into place (replacing what is there, a Measurement Set directory too)
  // and returns the final paths, in the order they were asked for. All or nothing: when one
  // cannot be moved, those already moved are put back as they were (the previous files kept
  // aside until the end) and it throws, naming the path and the cause.
  std::vector<std::filesystem::path> commit();
  // The final paths of the outputs not yet committed, in the order they were asked for.
  std::vector<std::filesystem::path> finals();
  // Removes every temporary not committed.
  void rollback();

  // Writes `text` to the temporary `temp` of `final_path` (created exclusively); failures throw
  // OutputError naming `final_path` and the cause.
  static void write_text(const std::filesystem::path& temp, const std::filesystem::path& final_path,
                         const std::string& text);
  // Temporaries of killed runs in `dir` (pattern above, same host, dead pid) removed; their count.
  static int remove_stale(const std::filesystem::path& dir);

 private:
  struct File {
    std::filesystem::path box, final_path;  // the private folder, and where NAME inside it goes
    std::filesystem::path temp() const { return box / final_path.filename(); }
    std::filesystem::path aside() const { return box / (final_path.filename().string() + ".previous"); }
  };
  std::string tag_;
  std::mutex m_;
  std::vector<File> files_;
  std::set<std::filesystem::path> cleaned_;  // folders already checked for stale temporaries
};

}  // namespace uvflow
