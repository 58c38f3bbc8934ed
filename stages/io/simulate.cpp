#include "stages/io/simulate.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numbers>
#include <numeric>
#include <random>
#include <sstream>

#include "runtime/error.hpp"
#include "runtime/units.hpp"
#include "stages/shared/abs_w_histogram.hpp"
#include "stages/shared/share.hpp"

namespace uvflow::io_simulate {
namespace {

constexpr double kLatitudeDeg = -26.82472208;     // SKA1-Low reference position
constexpr double kLongitudeDeg = 116.7644482;
constexpr double kHeightM = 300;                  // above the WGS84 ellipsoid (RASCIL's SKA1-Low site)
constexpr double kStationDiameterM = 38;          // an SKA1-Low station
constexpr double kSiderealDegPerDay = 360.98564736629;  // Earth rotation, degrees per solar (UT1) day
constexpr std::int64_t kMjdOfUnixEpoch = 40587;
constexpr int kGridSide = 16;                     // default sky: kGridSide^2 sources
constexpr int kHalf = kGridSide / 2;              // grid columns with l > 0
constexpr std::size_t kChunk = 128;               // visibilities one task sums the sky for at once

struct Preset {
  const char* name;
  int stations, dumps, dumps_per_block;
  double dec_deg, el_start_deg, el_end_deg;
};

// One declination for every preset: 7.82 deg north of the zenith at transit (elevation 82.18),
// so 30->56 and 56->82 are rising, 82->70 setting just after transit.
constexpr double kPresetDecDeg = -19;
constexpr Preset kPresets[] = {
    {"tiny", 64, 8, 4, kPresetDecDeg, 56, 82},
    {"small", 256, 24, 6, kPresetDecDeg, 56, 82},
    {"synthetic", 208, 100, 25, kPresetDecDeg, 30, 56},
    {"el30-56", 512, 240, 8, kPresetDecDeg, 30, 56},
    {"el56-82", 512, 240, 8, kPresetDecDeg, 56, 82},
    {"el82-70", 512, 240, 8, kPresetDecDeg, 82, 70},
};

const Preset& find_preset(const std::string& name) {
  for (auto& p : kPresets)
    if (name == p.name) return p;
  throw ParamError("preset", "unknown preset '" + name + "'");
}

// Hour angle (radians) at which a source at declination `dec` stands at elevation `el`: east of
// the meridian (H < 0) when rising, west when setting; NaN where that elevation is never reached.
double hour_angle(double el, double dec, bool rising) {
  const double lat = kLatitudeDeg * kDegToRad;
  double c = (std::sin(el) - std::sin(lat) * std::sin(dec)) / (std::cos(lat) * std::cos(dec));
  if (std::abs(c) > 1 && std::abs(c) < 1 + 1e-12) c = std::copysign(1.0, c);  // transit, rounded
  if (!(std::abs(c) <= 1)) return std::numeric_limits<double>::quiet_NaN();
  return rising ? -std::acos(c) : std::acos(c);
}

// cos and sin of 2 pi x for x in turns, branch-free so that loops over it vectorise (with
// nearbyint: GCC vectorises no floor without -fno-trapping-math). Turns make the reduction exact:
// x = q/4 + t with |t| <= 1/8, then fdlibm's kernel polynomials (error below 1e-16 for
// |a| <= pi/4) give cos and sin of a = 2 pi t, rotated by q quarter turns. Every multiply-add is an
// explicit fma so that vector and scalar code round alike: a visibility's value does not depend on
// where a block or a task boundary falls.
inline void cis_turns(double x, double& cos_out, double& sin_out) {
  constexpr double S1 = -1.66666666666666324348e-01, S2 = 8.33333333332248946124e-03,
                   S3 = -1.98412698298579493134e-04, S4 = 2.75573137070700676789e-06,
                   S5 = -2.50507602534068634195e-08, S6 = 1.58969099521155010221e-10;
  constexpr double C1 = 4.16666666666666019037e-02, C2 = -1.38888888888741095749e-03,
                   C3 = 2.48015872894767294178e-05, C4 = -2.75573143513906633035e-07,
                   C5 = 2.08757232129817482790e-09, C6 = -1.13596475577881948265e-11;
  const double q = std::nearbyint(4 * x);
  const double a = (2 * std::numbers::pi) * (x - 0.25 * q);
  const double z = a * a;
  const double ps = std::fma(z, std::fma(z, std::fma(z, std::fma(z, std::fma(z, S6, S5), S4), S3), S2), S1);
  const double pc = std::fma(z, std::fma(z, std::fma(z, std::fma(z, std::fma(z, C6, C5), C4), C3), C2), C1);
  const double s = std::fma(a * z, ps, a);
  const double c = std::fma(z * z, pc, std::fma(-0.5, z, 1.0));
  const double r = q - 4 * std::nearbyint(0.25 * q);  // q mod 4, as -2, -1, 0, 1 or 2
  // The rotation blends arithmetically: GCC turns selects between computed values into branches
  // (no vectorising) where one output is unused.
  const double odd = std::abs(r) == 1 ? 1.0 : 0.0;
  const bool half = std::abs(r) == 2;
  const double c1 = std::fma(odd, s - c, c), s1 = std::fma(odd, c - s, s);
  cos_out = c1 * (((r == 1) | half) ? -1.0 : 1.0);
  sin_out = s1 * (((r == -1) | half) ? -1.0 : 1.0);
}

// n - 1 = sqrt(1 - l^2 - m^2) - 1 without cancellation.
double n_minus_1(double l, double m) {
  const double r2 = l * l + m * m;
  return -r2 / (1 + std::sqrt(1 - r2));
}

struct Station {
  double east, north, up;
};

std::filesystem::path find_layout(const std::string& name) {
  const std::filesystem::path p(name);
  if (p.is_absolute() || std::filesystem::exists(p)) return p;
  const auto in_source = std::filesystem::path(UVFLOW_SOURCE_DIR) / p;
  if (std::filesystem::exists(in_source)) return in_source;
  throw InputError("station layout '" + name + "' not found in the working directory (" +
                   std::filesystem::current_path().string() + ") nor in the uvflow source tree (" +
                   UVFLOW_SOURCE_DIR + ")");
}

// One station a line: east north up in metres; '#' starts a comment, commas count as spaces.
std::vector<Station> read_layout(const std::filesystem::path& path) {
  std::ifstream f(path);
  if (!f) throw InputError("cannot open station layout '" + path.string() + "'");
  std::vector<Station> out;
  std::string line;
  for (int number = 1; std::getline(f, line); ++number) {
    line = line.substr(0, line.find('#'));
    std::replace(line.begin(), line.end(), ',', ' ');
    std::istringstream in(line);
    Station s;
    std::string rest;
    if (in >> s.east >> s.north >> s.up && !(in >> rest)) {
      out.push_back(s);
      continue;
    }
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank
    throw InputError(path.string() + ":" + std::to_string(number) +
                     ": expected three numbers (east north up, metres), got '" + line + "'");
  }
  return out;
}

// Layout-file indices of the n stations nearest the array centre (horizontal distance), in file order.
std::vector<std::size_t> nearest_stations(const std::vector<Station>& all, std::size_t n) {
  std::vector<std::size_t> order(all.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return std::hypot(all[a].east, all[a].north) < std::hypot(all[b].east, all[b].north);
  });
  order.resize(n);
  std::sort(order.begin(), order.end());
  return order;
}

// Greenwich mean sidereal time in radians at `mjd` (UT1, taken as UTC: they differ by < 0.9 s),
// the IAU 1982 expression (Meeus, Astronomical Algorithms, eq. 12.4).
double gmst(double mjd) {
  const double d = mjd - 51544.5, t = d / 36525;  // from J2000.0
  const double deg = 280.46061837 + kSiderealDegPerDay * d + t * t * (0.000387933 - t / 38710000);
  return std::fmod(deg, 360.0) * kDegToRad;
}

// ISO 8601 (UTC, milliseconds) of a time in MJD seconds.
std::string iso8601(double mjd_s) {
  const auto ms = std::llround(mjd_s * 1e3) - kMjdOfUnixEpoch * 86'400'000LL;
  const std::chrono::sys_time<std::chrono::milliseconds> t{std::chrono::milliseconds(ms)};
  const auto day = std::chrono::floor<std::chrono::days>(t);
  const std::chrono::year_month_day ymd{day};
  const std::chrono::hh_mm_ss hms{t - day};
  char buf[40];
  std::snprintf(buf, sizeof buf, "%04d-%02u-%02uT%02d:%02d:%02d.%03d", int(ymd.year()), unsigned(ymd.month()),
                unsigned(ymd.day()), int(hms.hours().count()), int(hms.minutes().count()),
                int(hms.seconds().count()), int(hms.subseconds().count()));
  return buf;
}

// WGS84 geocentric (ITRF) position of a point `east`, `north`, `up` metres from the site.
Observation::Antenna itrf(const Station& s) {
  const double lat = kLatitudeDeg * kDegToRad, lon = kLongitudeDeg * kDegToRad;
  const double a = 6378137.0, f = 1 / 298.257223563, e2 = f * (2 - f);
  const double sl = std::sin(lat), cl = std::cos(lat), so = std::sin(lon), co = std::cos(lon);
  const double n = a / std::sqrt(1 - e2 * sl * sl);
  Observation::Antenna out;
  out.x = (n + kHeightM) * cl * co - so * s.east - sl * co * s.north + cl * co * s.up;
  out.y = (n + kHeightM) * cl * so + co * s.east - sl * so * s.north + cl * so * s.up;
  out.z = (n * (1 - e2) + kHeightM) * sl + cl * s.north + sl * s.up;
  out.dish_diameter_m = kStationDiameterM;
  return out;
}

struct UvwStats {
  double max_abs_w = 0, min_abs_w = std::numeric_limits<double>::infinity(), sum_w2 = 0, max_abs_uv = 0;
  AbsWHistogram abs_w;
  void merge(const UvwStats& o) {
    abs_w.merge(o.abs_w);
    max_abs_w = std::max(max_abs_w, o.max_abs_w);
    min_abs_w = std::min(min_abs_w, o.min_abs_w);
    sum_w2 += o.sum_w2;
    max_abs_uv = std::max(max_abs_uv, o.max_abs_uv);
  }
};

class Simulate : public DeclaredStage<decl> {
 public:
  void check(const Params& p) override {
    const Preset& preset = find_preset(p.preset);
    preset_ = preset.name;
    layout_ = p.layout.string();
    auto or_preset = [&](std::int64_t value, int preset_value) { return value > 0 ? int(value) : preset_value; };
    stations_ = or_preset(p.stations, preset.stations);
    dumps_ = or_preset(p.dumps, preset.dumps);
    dumps_per_block_ = std::min(or_preset(p.dumps_per_block, preset.dumps_per_block), dumps_);
    if (stations_ < 2) throw ParamError("stations", "a baseline needs at least 2 stations");
    baselines_ = std::int64_t(stations_) * (stations_ - 1) / 2;
    channels_ = int(p.channels);
    blocks_ = (dumps_ + dumps_per_block_ - 1) / dumps_per_block_;
    if (baselines_ * channels_ * dumps_per_block_ > std::numeric_limits<std::int32_t>::max())
      throw ParamError("dumps_per_block", std::to_string(baselines_ * channels_ * dumps_per_block_) +
                                              " visibilities per block: downstream stages index blocks with 32 bits");
    freq_hz_ = p.freq_hz;
    channel_width_hz_ = p.channel_width_hz;
    configure_date(p.date);
    ra_ = p.ra_deg * kDegToRad;
    dec_ = p.dec_deg.value_or(preset.dec_deg) * kDegToRad;
    el_start_ = p.el_start_deg.value_or(preset.el_start_deg) * kDegToRad;
    el_end_ = p.el_end_deg.value_or(preset.el_end_deg) * kDegToRad;
    const bool rising = el_start_ < el_end_;
    h_start_ = hour_angle(el_start_, dec_, rising);
    h_end_ = hour_angle(el_end_, dec_, rising);
    auto check_reached = [&](const char* name, double el, double h) {
      if (!std::isnan(h)) return;
      const double lat = kLatitudeDeg * kDegToRad;
      std::ostringstream why;
      why << "the phase centre never stands at elevation " << el / kDegToRad << " deg: at declination "
          << dec_ / kDegToRad << " deg and latitude " << kLatitudeDeg << " deg its elevation ranges over ["
          << (std::abs(lat + dec_) - std::numbers::pi / 2) / kDegToRad << ", "
          << (std::numbers::pi / 2 - std::abs(lat - dec_)) / kDegToRad << "] deg";
      throw ParamError(name, why.str());
    };
    check_reached("el_start_deg", el_start_, h_start_);
    check_reached("el_end_deg", el_end_, h_end_);
    seed_ = std::uint64_t(p.seed);
    noise_jy_ = p.noise_jy;
    precompute_ = p.precompute;
    share_rows_ = p.share == "rows";
    configure_sky(p);
  }

  // Every station of the layout file, which must have as many as are asked for.
  std::vector<Station> layout() const {
    const auto path = find_layout(layout_);
    auto all = read_layout(path);
    if (all.size() < std::size_t(stations_))
      throw InputError("station layout '" + path.string() + "' has " + std::to_string(all.size()) +
                       " stations, " + std::to_string(stations_) + " asked for");
    return all;
  }

  void prepare(PrepareContext& pc) override {
    const auto all = layout();
    if (pc.dry_run) return;
    pinned_ = pc.pinned(vis.name);
    share_ = Share(share_rows_);
    observe(all);
    if (precompute_) {
      const auto t0 = std::chrono::steady_clock::now();
      for (std::int64_t b = 0; b < share_.count(blocks_); ++b) precomputed_.push_back(make_block(share_.global(b)));
      spdlog::info("io.simulate: precomputed {} visibilities in {} blocks in {:.2f} s", obs_->total_visibilities, blocks_,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  }

  // The chosen stations, their baselines and the dumps' hour angles; the observation with its uvw
  // statistics (a pass over every visibility's uvw, without the sky).
  std::shared_ptr<const Observation> observe(const std::vector<Station>& all) {
    std::vector<Station> chosen;
    antennas_.clear();
    for (std::size_t i : nearest_stations(all, stations_)) {
      chosen.push_back(all[i]);
      antennas_.push_back(itrf(all[i]));
      antennas_.back().name = std::string("S").append(std::to_string(i));  // the layout-file line, from 0
    }
    make_baselines(chosen);
    make_hour_angles();
    make_observation();
    return obs_;
  }

  // The observation is known before the first block: kernels.wproj can start at once.
  void start(Context& ctx) override {
    auto out = std::make_shared<VisSetInfo>();
    out->obs = obs_;
    ctx.emit(info, out);
  }

  std::int64_t stream_length() const override { return share_.count(blocks_); }

  void process(Context& ctx) override {
    const std::int64_t index = share_.global(ctx.item());
    // Precomputed blocks are handed over, not kept: memory falls as the stream drains.
    auto block = precomputed_.empty() ? make_block(index) : std::move(precomputed_[std::size_t(ctx.item())]);
    ctx.add_work({.visibilities = double(block->size())});  // "updates" are gridding kernel points: none here
    ctx.emit(vis, block);
  }

 private:
  std::shared_ptr<VisBlock> make_block(std::int64_t index) const {
    const std::int64_t first_dump = index * dumps_per_block_;
    const std::int64_t dumps = std::min<std::int64_t>(dumps_per_block_, dumps_ - first_dump);
    const std::size_t n = std::size_t(dumps * baselines_ * channels_);
    const std::int64_t first = first_dump * baselines_ * channels_;

    auto block = std::make_shared<VisBlock>();
    block->obs = obs_;
    block->index = index;
    block->uu = Array<float>::host(n, pinned_);
    block->vv = Array<float>::host(n, pinned_);
    block->ww = Array<float>::host(n, pinned_);
    block->vis = Array<cfloat>::host(n, pinned_);
    block->weight = Array<float>::host(n, pinned_);
    float *uu = block->uu.data(), *vv = block->vv.data(), *ww = block->ww.data(), *weight = block->weight.data();
    cfloat* vis = block->vis.data();
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n, kChunk), [&](const tbb::blocked_range<std::size_t>& r) {
      for (std::size_t k = r.begin(); k < r.end(); k += kChunk) {
        const std::size_t m = std::min(kChunk, r.end() - k);
        uvw(first + std::int64_t(k), m, uu + k, vv + k, ww + k);
        sum_sky(uu + k, vv + k, ww + k, m, vis + k);
        std::fill(weight + k, weight + k + m, 1.0f);
      }
    });
    if (noise_jy_ > 0) add_noise(first_dump, dumps, vis);
    label_rows(first_dump, dumps, *block);
    return block;
  }

  void configure_sky(const Params& p) {
    const auto& records = p.sky;
    grid_ = records.empty();
    src_l_.clear();
    src_m_.clear();
    src_c_.clear();
    src_flux_.clear();
    if (grid_) {
      // Offset by half a spacing, so that no source sits on the phase centre: the columns with
      // l > 0 sit at (i + 1/2) spacing, i < kHalf, mirrored to l < 0.
      const double spacing = p.sky_spacing_deg * kDegToRad;
      for (int i = 0; i < kHalf; ++i) grid_l_[i] = (i + 0.5) * spacing;
      grid_pairs_.clear();
      for (int i = 0; i < kHalf; ++i)
        for (int j = i; j < kHalf; ++j)
          grid_pairs_.push_back({i, j, n_minus_1(grid_l_[i], grid_l_[j]), i == j ? 2.0 : 4.0});
      return;
    }
    for (std::size_t i = 0; i < records.size(); ++i) {
      auto field = [&](const char* name) {
        auto it = records[i].find(name);
        if (it == records[i].end())
          throw ParamError("sky", "source " + std::to_string(i) + " has no field '" + name + "'");
        return it->second;
      };
      const double l = field("l_deg") * kDegToRad, m = field("m_deg") * kDegToRad;
      if (!(l * l + m * m < 1))
        throw ParamError("sky", "source " + std::to_string(i) + " lies beyond the horizon (l^2 + m^2 >= 1)");
      src_l_.push_back(l);
      src_m_.push_back(m);
      src_c_.push_back(n_minus_1(l, m));
      src_flux_.push_back(field("flux_jy"));
    }
  }

  // The UTC day the observation starts on, as an MJD.
  void configure_date(const std::string& date) {
    int y = 0;
    unsigned m = 0, d = 0;
    char rest = 0;
    const bool parsed = std::sscanf(date.c_str(), "%d-%u-%u%c", &y, &m, &d, &rest) == 3;
    const std::chrono::year_month_day ymd{std::chrono::year(y), std::chrono::month(m), std::chrono::day(d)};
    if (!parsed || !ymd.ok()) throw ParamError("date", "expected a date YYYY-MM-DD, got '" + date + "'");
    date_mjd_ = double(std::chrono::sys_days(ymd).time_since_epoch().count() + kMjdOfUnixEpoch);
  }

  std::size_t sources() const { return grid_ ? std::size_t(kGridSide) * kGridSide : src_flux_.size(); }

  // Baseline vectors antenna2 - antenna1 in wavelengths, in the equatorial frame of the array
  // (X to the meridian on the equator, Y east, Z to the celestial pole).
  void make_baselines(const std::vector<Station>& st) {
    const double lat = kLatitudeDeg * kDegToRad, wavelength = kSpeedOfLight / freq_hz_;
    std::vector<double> x(st.size()), y(st.size()), z(st.size());
    for (std::size_t a = 0; a < st.size(); ++a) {
      x[a] = (-std::sin(lat) * st[a].north + std::cos(lat) * st[a].up) / wavelength;
      y[a] = st[a].east / wavelength;
      z[a] = (std::cos(lat) * st[a].north + std::sin(lat) * st[a].up) / wavelength;
    }
    bx_.clear();
    by_.clear();
    bz_.clear();
    a1_.clear();
    a2_.clear();
    for (std::size_t a1 = 0; a1 < st.size(); ++a1)
      for (std::size_t a2 = a1 + 1; a2 < st.size(); ++a2) {
        bx_.push_back(x[a2] - x[a1]);
        by_.push_back(y[a2] - y[a1]);
        bz_.push_back(z[a2] - z[a1]);
        a1_.push_back(std::int32_t(a1));
        a2_.push_back(std::int32_t(a2));
      }
    // Channel c at freq_hz + c channel_width_hz: its uvw are channel 0's scaled by the frequency ratio.
    freq_ratio_.resize(channels_);
    for (int c = 0; c < channels_; ++c) freq_ratio_[c] = (freq_hz_ + c * channel_width_hz_) / freq_hz_;
  }

  // Dumps evenly spaced in hour angle (so in time) from h_start_ to h_end_, at the UTC times when
  // the phase centre stands at those hour angles: the first on or after 0h of `date`.
  void make_hour_angles() {
    sin_h_.resize(dumps_);
    cos_h_.resize(dumps_);
    time_s_.resize(dumps_);
    const double rotation_per_day = kSiderealDegPerDay * kDegToRad;
    const double lst = gmst(date_mjd_) + kLongitudeDeg * kDegToRad, turn = 2 * std::numbers::pi;
    const double to_start = std::fmod(std::fmod(ra_ + h_start_ - lst, turn) + turn, turn);
    for (int d = 0; d < dumps_; ++d) {
      const double h = dumps_ == 1 ? h_start_ : h_start_ + (h_end_ - h_start_) * d / (dumps_ - 1);
      sin_h_[d] = std::sin(h);
      cos_h_[d] = std::cos(h);
      time_s_[d] = (date_mjd_ + (to_start + h - h_start_) / rotation_per_day) * 86400;
    }
    integration_s_ = dumps_ > 1 ? (time_s_[1] - time_s_[0]) : 0;
  }

  // Each visibility's antenna pair, time and channel, in the block's order [dump][baseline][channel].
  void label_rows(std::int64_t first_dump, std::int64_t dumps, VisBlock& b) const {
    const std::size_t n = b.size();
    b.antenna1 = Array<std::int32_t>::host(n);
    b.antenna2 = Array<std::int32_t>::host(n);
    b.channel = Array<std::int32_t>::host(n);
    b.time = Array<double>::host(n);
    tbb::parallel_for(std::int64_t(0), dumps, [&](std::int64_t d) {
      std::size_t k = std::size_t(d * baselines_ * channels_);
      const double t = time_s_[first_dump + d];
      for (std::int64_t bl = 0; bl < baselines_; ++bl)
        for (int c = 0; c < channels_; ++c, ++k) {
          b.antenna1[k] = a1_[bl];
          b.antenna2[k] = a2_[bl];
          b.channel[k] = c;
          b.time[k] = t;
        }
    });
  }

  // uvw of visibilities [first, first + n) of the whole observation, in its order
  // [dump][baseline][channel], rounded to float as stored.
  void uvw(std::int64_t first, std::size_t n, float* uu, float* vv, float* ww) const {
    const double sd = std::sin(dec_), cd = std::cos(dec_);
    const std::int64_t row = first / channels_;  // dump * baselines_ + baseline
    std::int64_t dump = row / baselines_, b = row % baselines_;
    int c = int(first % channels_);
    for (std::size_t k = 0; k < n; c = 0) {
      const double sh = sin_h_[dump], ch = cos_h_[dump];
      const double toward_h = std::fma(ch, bx_[b], -sh * by_[b]);  // component towards (H, dec 0)
      const double u = std::fma(sh, bx_[b], ch * by_[b]);
      const double v = std::fma(-sd, toward_h, cd * bz_[b]);
      const double w = std::fma(cd, toward_h, sd * bz_[b]);
      for (; c < channels_ && k < n; ++c, ++k) {
        uu[k] = float(u * freq_ratio_[c]);
        vv[k] = float(v * freq_ratio_[c]);
        ww[k] = float(w * freq_ratio_[c]);
      }
      if (++b == baselines_) b = 0, ++dump;
    }
  }

  // V = sum_s S_s exp(2 pi i (u l_s + v m_s + w (n_s - 1))) for n <= kChunk visibilities, from
  // the stored (float) uvw so the data are exactly the model at the coordinates they carry.
  void sum_sky(const float* uu, const float* vv, const float* ww, std::size_t n, cfloat* vis) const {
    alignas(64) double u[kChunk], v[kChunk], w[kChunk], re[kChunk], im[kChunk];
    for (std::size_t k = 0; k < n; ++k) {
      u[k] = uu[k];
      v[k] = vv[k];
      w[k] = ww[k];
      re[k] = im[k] = 0;
    }
    if (grid_)
      add_grid(u, v, w, n, re, im);
    else
      add_sources(u, v, w, n, re, im);
    for (std::size_t k = 0; k < n; ++k) vis[k] = cfloat(float(re[k]), float(im[k]));
  }

  // Sources outer, visibilities inner: the inner loop is elementwise and vectorises.
  void add_sources(const double* u, const double* v, const double* w, std::size_t n, double* re, double* im) const {
    for (std::size_t s = 0; s < src_flux_.size(); ++s) {
      const double l = src_l_[s], m = src_m_[s], c = src_c_[s], flux = src_flux_[s];
      for (std::size_t k = 0; k < n; ++k) {
        double cos_p, sin_p;
        cis_turns(std::fma(u[k], l, std::fma(v[k], m, w[k] * c)), cos_p, sin_p);
        re[k] = std::fma(flux, cos_p, re[k]);
        im[k] = std::fma(flux, sin_p, im[k]);
      }
    }
  }

  // The default grid, exactly, in fewer exponentials: the four 1 Jy sources at (+-l_i, +-l_j)
  // share n, so together they give 4 cos(2 pi u l_i) cos(2 pi v l_j) exp(2 pi i w (n_ij - 1)), and
  // n_ij = n_ji. Per visibility: kHalf (kHalf + 1) / 2 = 36 exponentials and 2 kHalf cosines
  // instead of kGridSide^2 = 256 exponentials.
  void add_grid(const double* u, const double* v, const double* w, std::size_t n, double* re, double* im) const {
    alignas(64) double cos_u[kHalf][kChunk], cos_v[kHalf][kChunk];
    for (int i = 0; i < kHalf; ++i) {
      const double l = grid_l_[i];
      for (std::size_t k = 0; k < n; ++k) {
        double unused;
        cis_turns(u[k] * l, cos_u[i][k], unused);
        cis_turns(v[k] * l, cos_v[i][k], unused);
      }
    }
    for (const GridPair& p : grid_pairs_) {
      const double *cu_i = cos_u[p.i], *cu_j = cos_u[p.j], *cv_i = cos_v[p.i], *cv_j = cos_v[p.j];
      const double c = p.c, weight = p.weight;
      for (std::size_t k = 0; k < n; ++k) {
        const double g = weight * std::fma(cu_i[k], cv_j[k], cu_j[k] * cv_i[k]);
        double cos_p, sin_p;
        cis_turns(w[k] * c, cos_p, sin_p);
        re[k] = std::fma(g, cos_p, re[k]);
        im[k] = std::fma(g, sin_p, im[k]);
      }
    }
  }

  // Thermal noise from one generator per dump, seeded by (seed, dump): the same whatever the
  // threading and the block size.
  void add_noise(std::int64_t first_dump, std::int64_t dumps, cfloat* vis) const {
    tbb::parallel_for(std::int64_t(0), dumps, [&](std::int64_t d) {
      const std::uint64_t dump = std::uint64_t(first_dump + d);
      std::seed_seq seq{std::uint32_t(seed_), std::uint32_t(seed_ >> 32), std::uint32_t(dump),
                        std::uint32_t(dump >> 32)};
      std::mt19937_64 gen(seq);
      std::normal_distribution<double> normal(0.0, noise_jy_);
      cfloat* out = vis + d * baselines_ * channels_;
      for (std::int64_t b = 0; b < baselines_ * channels_; ++b) {
        const double re = normal(gen);
        const double im = normal(gen);
        out[b] += cfloat(float(re), float(im));
      }
    });
  }

  void make_observation() {
    const std::int64_t total = std::int64_t(dumps_) * baselines_ * channels_;
    // Deterministic reduction: the same statistics (and so the same w-planes) on every run.
    const UvwStats st = tbb::parallel_deterministic_reduce(
        tbb::blocked_range<std::int64_t>(0, total, 64 * kChunk), UvwStats{},
        [&](const tbb::blocked_range<std::int64_t>& r, UvwStats acc) {
          float uu[kChunk], vv[kChunk], ww[kChunk];
          for (std::int64_t k = r.begin(); k < r.end(); k += std::int64_t(kChunk)) {
            const std::size_t m = std::min<std::size_t>(kChunk, std::size_t(r.end() - k));
            uvw(k, m, uu, vv, ww);
            for (std::size_t i = 0; i < m; ++i) {
              const double w = std::abs(ww[i]);
              acc.max_abs_w = std::max(acc.max_abs_w, w);
              acc.min_abs_w = std::min(acc.min_abs_w, w);
              acc.sum_w2 += w * w;
              acc.abs_w.add(w);
              acc.max_abs_uv = std::max({acc.max_abs_uv, double(std::abs(uu[i])), double(std::abs(vv[i]))});
            }
          }
          return acc;
        },
        [](UvwStats a, const UvwStats& b) {
          a.merge(b);
          return a;
        });
    auto obs = std::make_shared<Observation>();
    obs->telescope = "SKA1-Low";
    std::ostringstream origin;
    origin << "io.simulate preset " << preset_ << ": " << stations_ << " stations x " << dumps_
           << " dumps, elevation " << el_start_ / kDegToRad << " -> " << el_end_ / kDegToRad << " deg at declination "
           << dec_ / kDegToRad << " deg, " << sources() << " sources";
    obs->origin = origin.str();
    obs->ra_rad = ra_;
    obs->dec_rad = dec_;
    obs->freq_hz.clear();
    for (int c = 0; c < channels_; ++c) obs->freq_hz.push_back(freq_hz_ + c * channel_width_hz_);
    obs->ref_freq_hz = (obs->freq_hz.front() + obs->freq_hz.back()) / 2;  // the band centre
    obs->date_obs = iso8601(time_s_.front());
    obs->antennas = antennas_;
    obs->integration_s = integration_s_;
    obs->channel_width_hz = channel_width_hz_;
    obs->total_visibilities = total;
    obs->total_blocks = blocks_;
    obs->max_abs_w = st.max_abs_w;
    obs->min_abs_w = st.min_abs_w;
    obs->rms_abs_w = std::sqrt(st.sum_w2 / double(total));
    obs->max_abs_uv = st.max_abs_uv;
    obs->abs_w_quantiles = st.abs_w.quantiles(64);
    obs_ = std::move(obs);
  }

  std::string preset_, layout_;
  int stations_ = 0, dumps_ = 0, dumps_per_block_ = 0, blocks_ = 0;
  bool share_rows_ = false;  // the `share` parameter
  Share share_;              // this rank's blocks
  std::int64_t baselines_ = 0;
  double freq_hz_ = 0, ra_ = 0, dec_ = 0, el_start_ = 0, el_end_ = 0, h_start_ = 0, h_end_ = 0;
  int channels_ = 1;
  double channel_width_hz_ = 0, date_mjd_ = 0, integration_s_ = 0;
  std::uint64_t seed_ = 0;
  double noise_jy_ = 0;
  // The sky: the default grid (grid_) or the listed sources.
  struct GridPair {
    int i, j;       // grid_l_ indices, i <= j
    double c;       // n - 1 at (l_i, l_j)
    double weight;  // 4 sources per pair, 2 on the diagonal (counted twice by the symmetric product)
  };
  bool grid_ = true;
  double grid_l_[kHalf] = {};
  std::vector<GridPair> grid_pairs_;
  std::vector<double> src_l_, src_m_, src_c_, src_flux_;  // direction cosines, n - 1, Jy
  bool pinned_ = false;
  bool precompute_ = false;
  std::vector<std::shared_ptr<VisBlock>> precomputed_;
  std::vector<double> bx_, by_, bz_;  // per baseline, wavelengths
  std::vector<double> sin_h_, cos_h_, time_s_;  // per dump; time_s_ in MJD seconds (UTC)
  std::vector<std::int32_t> a1_, a2_;             // per baseline
  std::vector<double> freq_ratio_;                // per channel: f_c / freq_hz
  std::vector<Observation::Antenna> antennas_;
  std::shared_ptr<const Observation> obs_;
};

}  // namespace

// The estimate (choose: auto) is the observation, which the stages after it estimate from; the
// simulation itself is outside every choice.
StageSpec spec() {
  return decl.spec({cpu_backend<Simulate>()}, [](const Params& p, const PortShapes&, const EstimateContext&) {
    Simulate s;
    s.check(p);
    Estimate e;
    e.outputs[std::string(info.name)].obs = e.outputs[std::string(vis.name)].obs =
        s.observe(s.layout());
    return e;
  });
}

}  // namespace uvflow::io_simulate
