#include "stages/vis/subtract.hpp"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <string>

#include "runtime/error.hpp"
#include "stages/shared/vis_checks.hpp"

namespace uvflow::vis_subtract {
namespace {

// Throws unless `a` and `b` hold equal values (both empty passes: the array is not carried).
template <class T>
void require_same(const Array<T>& a, const Array<T>& b, const char* name, const VisBlock& d) {
  if (a.empty() || b.empty()) return;
  for (std::size_t k = 0; k < a.size(); ++k)
    if (a[k] != b[k])
      throw InputError("vis.subtract: block " + std::to_string(d.index) + ": visibility " + std::to_string(k) +
                       " has " + name + " " + std::to_string(a[k]) + " in data and " + std::to_string(b[k]) +
                       " in model: the model must be predicted for the same visibilities, in the same order");
}

class Subtract : public DeclaredStage<decl> {
 public:
  void process(Context& ctx) override {
    auto d = ctx.in(data);
    auto m = ctx.in(model);
    check_same_host_arrays(*d, *m);
    require_same(d->uu, m->uu, "uu", *d);
    require_same(d->vv, m->vv, "vv", *d);
    require_same(d->ww, m->ww, "ww", *d);
    auto out = std::make_shared<VisBlock>(*d);  // shares every array but vis
    out->vis = Array<cfloat>::host(d->size());
    const cfloat *a = d->vis.host_data(), *b = m->vis.host_data();
    cfloat* r = out->vis.data();
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, d->size(), 1 << 16), [&](const auto& range) {
      for (std::size_t k = range.begin(); k < range.end(); ++k) r[k] = a[k] - b[k];
    });
    ctx.add_work({.visibilities = double(d->size())});
    ctx.emit(residual, out);
  }
};

}  // namespace

void check_same_host_arrays(const VisBlock& d, const VisBlock& m) {
  check_arrays(d);
  check_arrays(m);
  if (d.size() != m.size())
    throw InputError("vis.subtract: block " + std::to_string(d.index) + " has " + std::to_string(d.size()) +
                     " visibilities in data and " + std::to_string(m.size()) + " in model (block " + std::to_string(m.index) +
                     ")");
  require_same(d.antenna1, m.antenna1, "antenna1", d);
  require_same(d.antenna2, m.antenna2, "antenna2", d);
  require_same(d.time, m.time, "time", d);
  require_same(d.channel, m.channel, "channel", d);
}

StageSpec spec() { return decl.spec({cpu_backend<Subtract>(), UVFLOW_CUDA_BACKEND(make_cuda)}); }

}  // namespace uvflow::vis_subtract
