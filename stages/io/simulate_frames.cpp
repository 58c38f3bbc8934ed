#include "stages/io/simulate_frames.hpp"

#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "runtime/payloads/image.hpp"
#include "stages/shared/share.hpp"

namespace uvflow::io_simulate_frames {
namespace {

// A 32-bit integer hash with good avalanche (Wellons' lowbias32); 32-bit multiplies vectorise
// on AVX2, so noise costs about as much as writing the frame.
inline std::uint32_t mix32(std::uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

class SimulateFrames : public DeclaredStage<decl> {
 public:
  void check(const Params& p) override {
    nx_ = int(p.width);
    ny_ = int(p.height);
    count_ = p.count;
    seed_ = std::uint64_t(p.seed);
    level_ = float(p.background);
    sources_ = int(p.sources);
    noise_ = float(p.noise);
    distinct_ = p.distinct;
    share_frames_ = p.share == "frames";
  }

  void prepare(PrepareContext& pc) override {
    pinned_ = pc.pinned(frames.name);
    share_ = Share(share_frames_);
    if (pc.dry_run) return;
    for (std::int64_t i = 0; i < std::min(distinct_, count_); ++i) made_.push_back(make(i));
  }

  std::int64_t stream_length() const override { return share_.count(count_); }

  void process(Context& ctx) override {
    const std::int64_t index = share_.global(ctx.item());
    if (made_.empty()) {
      ctx.emit(frames, make(index));
      return;
    }
    // A copy of the payload sharing the pixels: nothing is made or copied per frame.
    auto img = std::make_shared<Image>(*made_[std::size_t(index % distinct_)]);
    img->index = index;
    ctx.emit(frames, img);
  }

 private:
  bool share_frames_ = false;  // the `share` parameter
  Share share_;                // this rank's frames
  std::shared_ptr<Image> make(std::int64_t index) const {
    std::seed_seq seq{std::uint32_t(seed_), std::uint32_t(seed_ >> 32), std::uint32_t(index),
                      std::uint32_t(std::uint64_t(index) >> 32)};
    std::mt19937_64 rng(seq);
    std::uniform_real_distribution<double> u01(0, 1);
    const std::uint32_t key = std::uint32_t(rng());

    // Separable background: level * (1 + gx(x)) * (1 + gy(y)), a few percent of slow variation.
    auto profile = [&](int n) {
      const double a1 = 0.15 * u01(rng), p1 = u01(rng), a2 = 0.05 * u01(rng), p2 = u01(rng);
      std::vector<float> g(n);
      for (int i = 0; i < n; ++i) {
        const double t = double(i) / n;
        g[i] = float(1 + a1 * std::sin(2 * M_PI * (t + p1)) + a2 * std::sin(2 * M_PI * (3 * t + p2)));
      }
      return g;
    };
    const std::vector<float> gx = profile(nx_), gy = profile(ny_);

    auto img = std::make_shared<Image>();
    img->index = index;
    img->nx = nx_;
    img->ny = ny_;
    img->pixels = Array<float>::host(std::size_t(nx_) * ny_, pinned_);
    float* px = img->pixels.data();
    // Irwin-Hall(4) has variance 1/3: scale to the requested standard deviation.
    const float scale = noise_ * std::sqrt(3.0f) / 65536.0f;
    const int nx = nx_;
    tbb::parallel_for(tbb::blocked_range<int>(0, ny_, 16), [&](const tbb::blocked_range<int>& r) {
      for (int y = r.begin(); y < r.end(); ++y) {
        const std::uint32_t row = mix32(key ^ mix32(std::uint32_t(y) * 0x9e3779b9U));
        const float base = level_ * gy[y];
        float* out = px + std::size_t(y) * nx;
        for (int x = 0; x < nx; ++x) {
          const std::uint32_t a = mix32(row ^ std::uint32_t(2 * x)), b = mix32(row ^ std::uint32_t(2 * x + 1));
          const float sum = float(a & 0xffff) + float(a >> 16) + float(b & 0xffff) + float(b >> 16);
          out[x] = base * gx[x] + (sum - 2 * 65536.0f) * scale;
        }
      }
    });

    // Point sources: Gaussian spots of sigma 1 pixel, clipped at the frame edges.
    constexpr int R = 3;
    for (int s = 0; s < sources_; ++s) {
      const double cx = u01(rng) * nx_, cy = u01(rng) * ny_;
      const double flux = level_ * std::pow(10.0, 2 * u01(rng));
      const int x0 = int(cx), y0 = int(cy);
      for (int y = std::max(0, y0 - R); y <= std::min(ny_ - 1, y0 + R); ++y)
        for (int x = std::max(0, x0 - R); x <= std::min(nx_ - 1, x0 + R); ++x) {
          const double dx = x + 0.5 - cx, dy = y + 0.5 - cy;
          px[std::size_t(y) * nx_ + x] += float(flux / (2 * M_PI) * std::exp(-0.5 * (dx * dx + dy * dy)));
        }
    }
    return img;
  }

  int nx_ = 0, ny_ = 0, sources_ = 0;
  std::int64_t count_ = 0, distinct_ = 0;
  std::vector<std::shared_ptr<const Image>> made_;  // distinct > 0: the frames the stream repeats
  std::uint64_t seed_ = 0;
  float level_ = 0, noise_ = 0;
  bool pinned_ = false;
};

}  // namespace

StageSpec spec() { return decl.spec({cpu_backend<SimulateFrames>()}); }

}  // namespace uvflow::io_simulate_frames
