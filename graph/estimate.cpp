#include "graph/estimate.hpp"

#include <algorithm>
#include <map>
#include <thread>

#include "runtime/error.hpp"

namespace uvflow {

std::vector<StageCost> estimate_stages(const Plan& plan) {
  const int threads = plan.run.threads > 0 ? plan.run.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<PortShapes> shapes(plan.stages.size());
  std::vector<StageCost> costs;
  for (std::size_t i = 0; i < plan.stages.size(); ++i) {
    const StageInstance& st = plan.stages[i];
    PortShapes in;
    for (const auto& l : st.inputs) in[l.port] = shapes[std::size_t(l.from)].at(l.from_port);
    StageCost c{st.id, false, {}};
    if (st.spec->estimate) {
      try {
        c.est = st.spec->estimate(st.params, in, {st.backend, threads});
        c.estimated = true;
      } catch (const std::exception& e) {
        throw InputError("stage '" + st.id + "' (" + st.spec->type + "): " + e.what());
      }
    }
    // What an output carries beyond its shape: the estimate's word, else the observation of any
    // input and the kernel facts of an input of the same type (a transfer, a pass-through).
    for (const auto& [port, info] : st.outputs) {
      PortShape s = info.shape;
      if (auto e = c.est.outputs.find(port); e != c.est.outputs.end()) {
        s.obs = e->second.obs;
        s.kernel = e->second.kernel;
      }
      for (const auto& l : st.inputs) {
        const PortShape& x = in[l.port];
        if (!s.obs) s.obs = x.obs;
        if (!s.kernel && plan.stages[std::size_t(l.from)].outputs.at(l.from_port).type == info.type) s.kernel = x.kernel;
      }
      shapes[i][port] = std::move(s);
    }
    costs.push_back(std::move(c));
  }
  return costs;
}

}  // namespace uvflow
