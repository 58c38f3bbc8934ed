// example.point_source: a source (no inputs; it says how many items it makes). Visibilities of
// one point source at the phase centre, V = flux_jy at every uvw, sampled at random in a disc of
// radius max_uv and w in [-max_w, max_w]. The observation is emitted first (a `once` output,
// from start()), so that stages that only need it, such as kernels.wproj, run before the first block.
#include <cmath>
#include <numbers>
#include <random>

#include "runtime/payloads/vis.hpp"
#include "runtime/registry.hpp"
#include "runtime/stage_decl.hpp"

namespace point_source {

using namespace uvflow;

inline constexpr Out<VisSetInfo> info{
    .name = "info", .arity = Arity::once, .residency = Residency::host, .doc = "the observation, before any block"};
inline constexpr Out<VisBlock> vis{.name = "vis", .residency = Residency::host, .doc = "blocks of block_size visibilities"};

struct Params {
  std::int64_t blocks = 4;
  std::int64_t block_size = 20000;
  double flux_jy = 1;
  double max_uv = 1000;
  double max_w = 50;
  double freq_hz = 150e6;
  std::int64_t seed = 1;
};

inline const StageDecl<Params> decl{
    .type = "example.point_source",
    .summary = "a point source at the phase centre, random uvw (an example source plugin)",
    .doc = "Block b is a function of (seed, b) only, so blocks may be made in any order.",
    .outputs = {info, vis},
    .params = {{&Params::blocks, {.name = "blocks", .min = 0, .max = 1e6, .doc = "blocks in the stream"}},
               {&Params::block_size, {.name = "block_size", .min = 1, .max = 1e8, .doc = "visibilities per block"}},
               {&Params::flux_jy, {.name = "flux_jy", .unit = "Jy", .min = -1e30, .max = 1e30, .doc = "source flux"}},
               {&Params::max_uv,
                {.name = "max_uv", .unit = "wavelengths", .min = 1, .max = 1e9, .doc = "largest |u|, |v| radius"}},
               {&Params::max_w, {.name = "max_w", .unit = "wavelengths", .min = 0, .max = 1e9, .doc = "largest |w|"}},
               {&Params::freq_hz, {.name = "freq_hz", .unit = "Hz", .min = 1, .max = 1e13, .doc = "frequency"}},
               {&Params::seed, {.name = "seed", .min = 0, .doc = "random seed"}}},
    .concurrency = Concurrency::parallel,
};

class PointSource : public DeclaredStage<decl> {
 public:
  // Multi-parameter checks go here (single values were checked against the declaration).
  void check(const Params& p) override {
    if (p.blocks * p.block_size > 2'000'000'000) throw ParamError("blocks", "blocks * block_size is too large");
  }

  // What is known before the stream: sizes and bounds of the uvw statistics the gridders size from.
  void prepare(PrepareContext&) override {
    const Params& p = params();
    auto obs = std::make_shared<Observation>();
    obs->telescope = "example";
    obs->origin = "example.point_source";
    obs->freq_hz = {p.freq_hz};
    obs->ref_freq_hz = p.freq_hz;
    obs->total_blocks = p.blocks;
    obs->total_visibilities = p.blocks * p.block_size;
    obs->max_abs_w = p.max_w;
    obs->min_abs_w = 0;
    obs->rms_abs_w = p.max_w / std::sqrt(3.0);  // w is uniform in [-max_w, max_w]
    obs->max_abs_uv = p.max_uv;
    obs_ = obs;
  }

  std::int64_t stream_length() const override { return params().blocks; }

  void start(Context& ctx) override {
    auto out = std::make_shared<VisSetInfo>();
    out->obs = obs_;
    ctx.emit(info, out);
  }

  void process(Context& ctx) override {
    const Params& p = params();
    const std::size_t n = std::size_t(p.block_size);
    auto block = std::make_shared<VisBlock>();
    block->obs = obs_;
    block->index = ctx.item();
    block->uu = Array<float>::host(n);
    block->vv = Array<float>::host(n);
    block->ww = Array<float>::host(n);
    block->vis = Array<cfloat>::host(n);
    block->weight = Array<float>::host(n);
    std::mt19937_64 rng(std::uint64_t(p.seed) * 1'000'003 + std::uint64_t(block->index));
    std::uniform_real_distribution<double> unit(0, 1), sym(-1, 1);
    for (std::size_t i = 0; i < n; ++i) {
      const double r = p.max_uv * std::sqrt(unit(rng)), phi = 2 * std::numbers::pi * unit(rng);
      block->uu[i] = float(r * std::cos(phi));
      block->vv[i] = float(r * std::sin(phi));
      block->ww[i] = float(p.max_w * sym(rng));
      block->vis[i] = cfloat(float(p.flux_jy), 0);  // l = m = 0: no phase at any uvw
      block->weight[i] = 1;
    }
    ctx.add_work({.visibilities = double(n)});
    ctx.emit(vis, block);
  }

 private:
  std::shared_ptr<const Observation> obs_;
};

void register_stages(Registry& r) { r.add(decl.spec({cpu_backend<PointSource>()})); }

}  // namespace point_source

UVFLOW_PLUGIN("point_source", point_source::register_stages)
