#include "stages/io/read_seeds.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <vector>

#include "runtime/error.hpp"
#include "runtime/payloads/kernel_stack_builder.hpp"
#include "stages/io/seeds_format.hpp"

namespace uvflow::io_read_seeds {

int image_size_for(std::int64_t image_size, int grid_size) {
  if (image_size > 0) return int(image_size);
  return std::max(2, 2 * int(std::lround(grid_size / 1.2 / 2)));
}

namespace {

std::int64_t blocks_of(std::int64_t n, std::int64_t block_size) { return (n + block_size - 1) / block_size; }

GridGeometry geometry(const seeds_format::Layout& l, std::int64_t image_size) {
  return {.image_size = image_size_for(image_size, l.grid_size), .grid_size = l.grid_size, .cell_rad = l.cell_size_rad};
}

class ReadSeeds : public DeclaredStage<decl> {
 public:
  void prepare(PrepareContext& pc) override {
    const Params& p = params();
    layout_ = seeds_format::read_layout(p.path);
    geom_ = geometry(layout_, p.image_size);
    if (geom_.image_size > layout_.grid_size)
      throw InputError("seeds file '" + p.path.string() + "': grid_size = " + std::to_string(layout_.grid_size) +
                       " is smaller than the image_size " + std::to_string(geom_.image_size) + " asked for");
    if (pc.dry_run) return;
    reader_.emplace(p.path);
    pinned_ = pc.pinned(vis.name);
    layouts_ = {.rows = p.layouts == "rows" || p.layouts == "all",
                .gpu = p.layouts == "gpu" || p.layouts == "all",
                .pinned = pc.pinned(kernels.name)};
  }

  std::int64_t stream_length() const override { return blocks_of(layout_.num_vis, params().block_size); }

  // The observation and the kernels are known before the first block: the sort can start at once.
  void start(Context& ctx) override {
    auto out = std::make_shared<VisSetInfo>();
    out->obs = obs_ = observation();
    ctx.emit(info, out);
    ctx.emit(kernels, kernel_stack());
  }

  void process(Context& ctx) override {
    const std::int64_t first = ctx.item() * params().block_size;
    const std::size_t n = std::size_t(std::min(params().block_size, layout_.num_vis - first));
    auto b = std::make_shared<VisBlock>();
    b->obs = obs_;
    b->index = ctx.item();
    b->uu = read_floats(layout_.uu_at(), first, n, "uu");
    b->vv = read_floats(layout_.vv_at(), first, n, "vv");
    b->ww = read_floats(layout_.ww_at(), first, n, "ww");
    b->weight = read_floats(layout_.weight_at(), first, n, "weight");
    b->vis = Array<cfloat>::host(n, pinned_);
    reader_->read(layout_.vis_at() + 8 * first, b->vis.data(), 8 * n, "vis");
    ctx.add_work({.visibilities = double(n)});
    ctx.emit(vis, b);
  }

 private:
  Array<float> read_floats(std::int64_t at, std::int64_t first, std::size_t n, const char* what) {
    auto a = Array<float>::host(n, pinned_);
    reader_->read(at + 4 * first, a.data(), 4 * n, what);
    return a;
  }

  // One pass over uu, vv and ww, a block at a time, for the statistics kernels.wproj and the
  // weighting stages read.
  std::shared_ptr<const Observation> observation() {
    auto obs = std::make_shared<Observation>();
    obs->origin = "seeds file " + params().path.string();
    const std::int64_t n = layout_.num_vis, step = params().block_size;
    obs->total_visibilities = n;
    obs->total_blocks = blocks_of(n, step);
    double max_w = 0, min_w = n > 0 ? INFINITY : 0, sum_w2 = 0, max_uv = 0;
    std::vector<float> u, v, w;
    for (std::int64_t first = 0; first < n; first += step) {
      const std::size_t m = std::size_t(std::min(step, n - first));
      u.resize(m), v.resize(m), w.resize(m);
      reader_->read(layout_.uu_at() + 4 * first, u.data(), 4 * m, "uu");
      reader_->read(layout_.vv_at() + 4 * first, v.data(), 4 * m, "vv");
      reader_->read(layout_.ww_at() + 4 * first, w.data(), 4 * m, "ww");
      for (std::size_t i = 0; i < m; ++i) {
        const double aw = std::abs(double(w[i]));
        max_w = std::max(max_w, aw);
        min_w = std::min(min_w, aw);
        sum_w2 += aw * aw;
        max_uv = std::max({max_uv, std::abs(double(u[i])), std::abs(double(v[i]))});
      }
    }
    obs->max_abs_w = max_w;
    obs->min_abs_w = min_w;
    obs->rms_abs_w = n > 0 ? std::sqrt(sum_w2 / double(n)) : 0;
    obs->max_abs_uv = max_uv;
    return obs;
  }

  // The file's kernels, plane by plane: each plane's top-left S x S square is its compacted quarter.
  std::shared_ptr<KernelStack> kernel_stack() {
    const auto& l = layout_;
    const int planes = l.planes(), c = l.conv_size_half;
    QuarterKernels k{.geom = geom_,
                     .oversample = l.oversample,
                     .w_scale = l.w_scale,
                     .max_w = l.w_scale > 0 ? double(planes - 1) * (planes - 1) / l.w_scale : 0,
                     .conv_size = 2 * (c + 1),  // WPROJ.md keeps the quarter [0, conv_size/2 - 1)
                     .support = std::vector<int>(l.support.begin(), l.support.end()),
                     .normalise = false};
    std::vector<cfloat> plane(std::size_t(c) * c);
    for (int p = 0; p < planes; ++p) {
      reader_->read(l.kernels_at + std::int64_t(p) * c * c * 8, plane.data(), plane.size() * 8, "kernels");
      const int S = kernel_half_size(l.oversample, l.support[p]);
      auto& q = k.quarter.emplace_back(std::size_t(S) * S);
      for (int iy = 0; iy < S; ++iy)
        std::copy_n(plane.begin() + std::ptrdiff_t(iy) * c, S, q.begin() + std::ptrdiff_t(iy) * S);
    }
    return make_kernel_stack(k, layouts_);  // read_layout and prepare() checked what it checks
  }

  seeds_format::Layout layout_;
  GridGeometry geom_;
  std::optional<seeds_format::Reader> reader_;
  std::shared_ptr<const Observation> obs_;
  KernelLayouts layouts_;
  bool pinned_ = false;
};

}  // namespace

PortShapes describe_outputs(const Params& p, const PortShapes&) {
  try {
    const auto l = seeds_format::read_layout(p.path);
    return {{std::string(kernels.name), PortShape{.grid = geometry(l, p.image_size)}},
            {std::string(vis.name), PortShape{.items = blocks_of(l.num_vis, p.block_size)}}};
  } catch (const InputError&) {
    return {};  // prepare() reads the file again and reports what is wrong with it
  }
}

StageSpec spec() { return decl.spec({cpu_backend<ReadSeeds>()}); }

}  // namespace uvflow::io_read_seeds
