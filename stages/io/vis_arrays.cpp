#include "stages/io/vis_arrays.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/error.hpp"
#include "runtime/units.hpp"
#include "stages/shared/array_feed.hpp"

namespace uvflow::io_vis_arrays {
namespace {

constexpr std::int64_t kVisibilitiesPerBlock = 1 << 20;

class VisArrays : public DeclaredStage<decl> {
 public:
  void check(const Params& p) override {
    name_ = p.name;
    rows_per_block_ = p.rows_per_block;
  }

  void prepare(PrepareContext& pc) override {
    a_ = array_feed::vis(name_);
    if (!a_) {
      // `uvflow check` of a pipeline meant for a program: nothing to look at yet.
      if (pc.dry_run) return;
      throw InputError("io.vis_arrays '" + pc.id + "': no visibilities were handed in under the name '" + name_ +
                       "' (a program hands them in: uvflow.Pipeline.run(inputs={'" + name_ + "': {...}}) in Python)");
    }
    const std::int64_t channels = std::int64_t(a_->freq_hz.size());
    block_rows_ = rows_per_block_ > 0 ? rows_per_block_ : std::max<std::int64_t>(1, kVisibilitiesPerBlock / std::max<std::int64_t>(1, channels));
    blocks_ = a_->rows == 0 ? 0 : (a_->rows + block_rows_ - 1) / block_rows_;
    if (pc.dry_run) return;
    scan();
  }

  void start(Context& ctx) override {
    auto out = std::make_shared<VisSetInfo>();
    out->obs = obs_;
    ctx.emit(info, out);
  }

  std::int64_t stream_length() const override { return blocks_; }

  void process(Context& ctx) override {
    const std::int64_t first = ctx.item() * block_rows_, rows = std::min(block_rows_, a_->rows - first);
    const std::size_t nc = a_->freq_hz.size(), v0 = std::size_t(first) * nc, n_all = std::size_t(rows) * nc;
    const bool flagged = !a_->flag.empty();
    std::size_t n = n_all;
    if (flagged) n = std::size_t(std::count(a_->flag.data() + v0, a_->flag.data() + v0 + n_all, 0));
    auto b = std::make_shared<VisBlock>();
    b->obs = obs_;
    b->index = ctx.item();
    b->uu = Array<float>::host(n);
    b->vv = Array<float>::host(n);
    b->ww = Array<float>::host(n);
    b->channel = Array<std::int32_t>::host(n);
    // The arrays handed in, where nothing is dropped: views sharing their owner.
    const auto& vis_s = a_->vis.storage();
    if (!flagged)
      b->vis = Array<cfloat>::external(a_->vis.data() + v0, n, Location::host, vis_s);
    else
      b->vis = Array<cfloat>::host(n);
    if (!flagged && !a_->weight.empty())
      b->weight = Array<float>::external(a_->weight.data() + v0, n, Location::host, a_->weight.storage());
    else
      b->weight = Array<float>::host(n);
    std::size_t k = 0;
    for (std::int64_t r = first; r < first + rows; ++r) {
      const double* uvw = a_->uvw.data() + 3 * r;
      for (std::size_t c = 0; c < nc; ++c) {
        const std::size_t i = std::size_t(r) * nc + c;
        if (flagged && a_->flag[i]) continue;
        const double s = per_metre_[c];
        b->uu[k] = float(uvw[0] * s);
        b->vv[k] = float(uvw[1] * s);
        b->ww[k] = float(uvw[2] * s);
        b->channel[k] = std::int32_t(c);
        if (flagged) {
          b->vis[k] = a_->vis[i];
          b->weight[k] = a_->weight.empty() ? 1.0f : a_->weight[i];
        } else if (a_->weight.empty()) {
          b->weight[k] = 1.0f;
        }
        ++k;
      }
    }
    ctx.add_work({.visibilities = double(n)});
    ctx.emit(vis, b);
  }

 private:
  // The uvw statistics over the unflagged visibilities, as the blocks carry them (float), and
  // the values checked: a NaN reaching a grid would spoil every pixel.
  void scan() {
    const std::size_t nc = a_->freq_hz.size();
    per_metre_.clear();
    for (double f : a_->freq_hz) per_metre_.push_back(f / kSpeedOfLight);
    double max_w = 0, min_w = std::numeric_limits<double>::infinity(), sum_w2 = 0, max_uv = 0;
    std::int64_t count = 0;
    for (std::int64_t r = 0; r < a_->rows; ++r) {
      const double* uvw = a_->uvw.data() + 3 * r;
      for (std::size_t c = 0; c < nc; ++c) {
        const std::size_t i = std::size_t(r) * nc + c;
        if (!a_->flag.empty() && a_->flag[i]) continue;
        const cfloat v = a_->vis[i];
        const float wt = a_->weight.empty() ? 1.0f : a_->weight[i];
        if (!std::isfinite(v.real()) || !std::isfinite(v.imag()) || !std::isfinite(wt) ||
            !(std::isfinite(uvw[0]) && std::isfinite(uvw[1]) && std::isfinite(uvw[2])))
          throw InputError("io.vis_arrays '" + name_ + "': row " + std::to_string(r) + ", channel " + std::to_string(c) +
                           ": uvw, vis or weight is not finite and the visibility is not flagged");
        const double s = per_metre_[c], w = std::abs(double(float(uvw[2] * s)));
        ++count;
        max_w = std::max(max_w, w);
        min_w = std::min(min_w, w);
        sum_w2 += w * w;
        max_uv = std::max({max_uv, double(std::abs(float(uvw[0] * s))), double(std::abs(float(uvw[1] * s)))});
      }
    }
    if (count == 0) throw InputError("io.vis_arrays '" + name_ + "': no unflagged visibility was handed in");
    auto obs = std::make_shared<Observation>();
    obs->telescope = a_->telescope;
    obs->origin = a_->origin.empty() ? "arrays '" + name_ + "'" : a_->origin;
    obs->ra_rad = a_->ra_rad;
    obs->dec_rad = a_->dec_rad;
    obs->freq_hz = a_->freq_hz;
    obs->ref_freq_hz = (a_->freq_hz.front() + a_->freq_hz.back()) / 2;  // the band centre, as io.read_ms
    if (nc > 1) obs->channel_width_hz = std::abs(a_->freq_hz[1] - a_->freq_hz[0]);
    obs->total_visibilities = count;
    obs->total_blocks = blocks_;
    obs->max_abs_w = max_w;
    obs->min_abs_w = min_w;
    obs->rms_abs_w = std::sqrt(sum_w2 / double(count));
    obs->max_abs_uv = max_uv;
    obs_ = std::move(obs);
  }

  std::string name_;
  std::int64_t rows_per_block_ = 0, block_rows_ = 1, blocks_ = 0;
  std::shared_ptr<const array_feed::VisArrays> a_;
  std::vector<double> per_metre_;
  std::shared_ptr<const Observation> obs_;
};

}  // namespace

StageSpec spec() { return decl.spec({cpu_backend<VisArrays>()}); }

}  // namespace uvflow::io_vis_arrays
