#include "graph/ranks.hpp"

#include <vector>

namespace uvflow {

Plan plan_for_rank(const Plan& plan, int rank) {
  if (rank == 0) return plan;
  Plan out = plan;
  out.stages.clear();
  std::vector<int> index(plan.stages.size(), -1);  // old -> new, -1: left out
  for (std::size_t i = 0; i < plan.stages.size(); ++i) {
    const StageInstance& st = plan.stages[i];
    bool root_only = false;
    for (auto& l : st.inputs)
      root_only = root_only || index[std::size_t(l.from)] < 0 || plan.stages[std::size_t(l.from)].spec->output_on_root;
    if (root_only) continue;
    index[i] = int(out.stages.size());
    out.stages.push_back(st);
    for (auto& l : out.stages.back().inputs) l.from = index[std::size_t(l.from)];
  }
  return out;
}

}  // namespace uvflow
