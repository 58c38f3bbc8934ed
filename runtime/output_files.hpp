// Output files written to temporaries and moved into place only when the work that writes them
// has succeeded (Context::output_file), so a failed or interrupted run leaves no half-written file.
// A pipeline run (graph/executor) and the one-stage harness share it.
#pragma once

#include <filesystem>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace uvflow {

class OutputFiles {
 public:
  // `tag` names the temporaries: .NAME.<tag>-<pid>.tmp next to the final file.
  explicit OutputFiles(std::string tag) : tag_(std::move(tag)) {}
  // The temporary to write instead of `final_path` (its directory is created). Throws when another
  // output already goes to `final_path`. Thread-safe.
  std::filesystem::path temp_for(const std::filesystem::path& final_path);
  // Moves every temporary into place (replacing what is there, a Measurement Set directory too)
  // and returns the final paths, in the order they were asked for.
  std::vector<std::filesystem::path> commit();
  // Removes every temporary not committed.
  void rollback();

 private:
  std::string tag_;
  std::mutex m_;
  std::vector<std::pair<std::filesystem::path, std::filesystem::path>> files_;  // temp, final
};

}  // namespace uvflow
