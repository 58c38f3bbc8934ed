#include "graph/progress.hpp"

#include <unistd.h>

#include <cstdio>
#include <iomanip>
#include <sstream>

namespace uvflow {

ProgressLine::ProgressLine(bool requested) : draw_(requested && isatty(2)) {}

void ProgressLine::update(double since_start, const std::vector<std::unique_ptr<StageNode>>& nodes) {
  if (!draw_ || seconds_between(last_draw_, Clock::now()) <= 0.5) return;
  last_draw_ = Clock::now();
  std::ostringstream s;
  s << "\r[" << std::fixed << std::setprecision(1) << since_start << " s]";
  for (auto& n : nodes)
    if (n->is_source() && n->progress_total() > 0)
      s << " " << n->inst().id << " " << n->progress_done() << "/" << n->progress_total();
  for (auto& n : nodes)
    if (!n->is_source()) {
      auto m = n->metrics();
      if (m.items_in > 0 && !n->finished()) s << " | " << n->inst().id << " " << m.items_in;
    }
  std::string line = s.str().substr(0, 160);
  std::fprintf(stderr, "%s\033[K", line.c_str());
  drew_ = true;
}

void ProgressLine::clear() {
  if (drew_) std::fprintf(stderr, "\r\033[K");
}

}  // namespace uvflow
