#include "stages/io/read_ms.hpp"

#include <spdlog/spdlog.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <mutex>
#include <numbers>
#include <sstream>

#include "runtime/error.hpp"
#include "runtime/dist.hpp"
#include "runtime/units.hpp"
#include "stages/shared/abs_w_histogram.hpp"
#include "stages/shared/share.hpp"
#include "stages/io/ms_tables.hpp"

namespace uvflow::io_read_ms {
namespace {

// rows_per_block 0: about as many visibilities per block as io.simulate's el56-82 blocks.
constexpr std::int64_t kVisibilitiesPerBlock = 1 << 20;
constexpr std::int64_t kRowGrain = 4096;  // rows per parallel task

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// "0-31,40" as inclusive ranges; "" (all channels) as none.
std::vector<std::pair<int, int>> parse_channels(const std::string& text) {
  std::vector<std::pair<int, int>> out;
  std::istringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    int a = 0, b = 0;
    char dash = 0, rest = 0;
    const int got = std::sscanf(item.c_str(), " %d %c %d %c", &a, &dash, &b, &rest);
    if (got == 1 && a >= 0) out.push_back({a, a});
    else if (got == 3 && dash == '-' && 0 <= a && a <= b) out.push_back({a, b});
    else
      throw ParamError("channels", "expected channel numbers and ranges such as \"0-31,40\" (from 0, first <= last), got '" +
                                       item + "' in '" + text + "'");
  }
  return out;
}

// A Stokes parameter (or one correlation) as value = ca a + cb b of two correlations of the MS
// (b unused for one), with WSClean's definitions: I = (XX + YY)/2 = (RR + LL)/2, Q = (XX - YY)/2 =
// (RL + LR)/2, U = (XY + YX)/2 = (RL - LR)/2i, V = (XY - YX)/2i = (RR - LL)/2.
struct Recipe {
  std::string a, b;
  cfloat ca = 1, cb = 0;
};

std::vector<Recipe> recipes(const std::string& stokes) {
  const cfloat h(0.5f, 0), i(0, 0.5f);
  if (stokes == "I") return {{"XX", "YY", h, h}, {"RR", "LL", h, h}};
  if (stokes == "Q") return {{"XX", "YY", h, -h}, {"RL", "LR", h, h}};
  if (stokes == "U") return {{"XY", "YX", h, h}, {"RL", "LR", -i, i}};
  if (stokes == "V") return {{"XY", "YX", -i, i}, {"RR", "LL", h, -h}};
  return {{stokes, "", 1, 0}};
}

struct UvwStats {
  std::int64_t count = 0;
  double max_abs_w = 0, min_abs_w = std::numeric_limits<double>::infinity(), sum_w2 = 0, max_abs_uv = 0;
  double first_time = std::numeric_limits<double>::infinity();
  AbsWHistogram abs_w;
  std::int64_t bad_row = std::numeric_limits<std::int64_t>::max();  // the first row that is bad data
  std::string why;
  void bad(std::int64_t row, std::string what) {
    if (row < bad_row) bad_row = row, why = std::move(what);
  }
  void merge(const UvwStats& o) {
    abs_w.merge(o.abs_w);
    count += o.count;
    max_abs_w = std::max(max_abs_w, o.max_abs_w);
    min_abs_w = std::min(min_abs_w, o.min_abs_w);
    sum_w2 += o.sum_w2;
    max_abs_uv = std::max(max_abs_uv, o.max_abs_uv);
    first_time = std::min(first_time, o.first_time);
    if (o.bad_row < bad_row) bad_row = o.bad_row, why = o.why;
  }
};

class ReadMs : public DeclaredStage<decl> {
 public:
  void check(const Params& p) override {
    path_ = p.path.string();
    if (path_.empty()) throw ParamError("path", "must not be empty");
    data_column_ = p.data_column;
    field_choice_ = int(p.field);
    channels_text_ = p.channels;
    channel_ranges_ = parse_channels(channels_text_);
    stokes_ = p.stokes;
    rows_per_block_ = p.rows_per_block;
    share_rows_ = p.share == "rows";
  }

  void prepare(PrepareContext& pc) override {
    ms_ = std::make_unique<ms::MsReader>(path_);
    const ms::MsInfo& info = ms_->info();
    check_column();
    choose_field();
    choose_channels();
    choose_correlations();
    spectrum_ = info.weight_spectrum;
    ms_->select(data_column_, chan0_, span_, corr0_, corr_step_, ncorr_, spectrum_);
    block_rows_ = rows_per_block_ > 0 ? rows_per_block_
                                      : std::max<std::int64_t>(1, kVisibilitiesPerBlock / std::int64_t(sel_.size()));
    if (block_rows_ * std::int64_t(sel_.size()) > std::numeric_limits<std::int32_t>::max())
      throw InputError(path_ + ": rows_per_block " + std::to_string(block_rows_) + " x " + std::to_string(sel_.size()) +
                       " channels is more visibilities per block than downstream stages index (32 bits)");
    if (pc.dry_run) return;
    scan_once();
  }

  std::shared_ptr<const Observation> observation() const { return obs_; }

  // The observation is known before the first block: kernels.wproj can start at once.
  void start(Context& ctx) override {
    auto out = std::make_shared<VisSetInfo>();
    out->obs = obs_;
    ctx.emit(info, out);
  }

  std::int64_t stream_length() const override { return std::int64_t(blocks_.size()); }

  void process(Context& ctx) override {
    const Block& blk = blocks_[std::size_t(ctx.item())];
    ms_->read(blk.first_row, blk.rows, true, chunk_);
    auto out = make_block(ctx.item());
    ctx.add_work({.visibilities = double(out->size())});
    ctx.emit(vis, out);
  }

  void finish(Context&) override {
    if (non_finite_ > 0)
      spdlog::warn("io.read_ms: {}: dropped {} unflagged visibilities with non-finite values in {} (treated as flagged)",
                   path_, non_finite_.load(), data_column_);
  }

 private:
  struct Block {
    std::int64_t first_row, rows;
  };

  void check_column() const {
    const auto& cols = ms_->info().columns;
    if (std::find(cols.begin(), cols.end(), data_column_) == cols.end())
      throw InputError(path_ + ": the main table has no column " + data_column_ + " (data_column); its columns are " +
                       join(cols));
  }

  void choose_field() {
    const auto& fields = ms_->info().fields;
    auto list = [&] {
      std::vector<std::string> v;
      for (std::size_t f = 0; f < fields.size(); ++f) {
        std::ostringstream s;
        s.precision(6);
        s << f << " '" << fields[f].name << "' (RA " << std::fixed << fields[f].ra_rad * kRadToDeg << ", Dec "
          << fields[f].dec_rad * kRadToDeg << " deg)";
        v.push_back(s.str());
      }
      return join(v);
    };
    if (fields.empty()) throw InputError(path_ + ": the FIELD table is empty");
    if (field_choice_ < 0 && fields.size() > 1)
      throw InputError(path_ + ": FIELD has " + std::to_string(fields.size()) + " fields; choose one with the field parameter: " +
                       list());
    field_ = std::max(field_choice_, 0);
    if (std::size_t(field_) >= fields.size())
      throw InputError(path_ + ": there is no field " + std::to_string(field_) + "; FIELD has " + list());
  }

  void choose_channels() {
    const auto& freq = ms_->info().chan_freq_hz;
    const int n = int(freq.size());
    std::vector<bool> chosen(std::size_t(n), channel_ranges_.empty());
    for (auto [a, b] : channel_ranges_) {
      if (b >= n)
        throw InputError(path_ + ": there is no channel " + std::to_string(b) + " (channels: '" + channels_text_ +
                         "'); SPECTRAL_WINDOW has " + std::to_string(n) + " channels, 0-" + std::to_string(n - 1));
      for (int c = a; c <= b; ++c) chosen[std::size_t(c)] = true;
    }
    std::vector<int> list;
    for (int c = 0; c < n; ++c)
      if (chosen[std::size_t(c)]) list.push_back(c);
    if (list.empty()) throw InputError(path_ + ": SPECTRAL_WINDOW has no channels");
    chan0_ = list.front();
    span_ = list.back() - list.front() + 1;
    sel_.clear();
    per_metre_.clear();
    freq_hz_.clear();
    for (int c : list) {
      sel_.push_back(c - chan0_);
      per_metre_.push_back(freq[std::size_t(c)] / kSpeedOfLight);
      freq_hz_.push_back(freq[std::size_t(c)]);
    }
  }

  void choose_correlations() {
    const auto& corr = ms_->info().correlations;
    auto index = [&](const std::string& name) {
      return int(std::find(corr.begin(), corr.end(), name) - corr.begin());
    };
    std::vector<std::string> wanted;
    for (const Recipe& r : recipes(stokes_)) {
      int a = index(r.a), b = r.b.empty() ? -1 : index(r.b);
      wanted.push_back(r.b.empty() ? r.a : r.a + " and " + r.b);
      if (a == int(corr.size()) || b == int(corr.size())) continue;
      ca_ = r.ca;
      cb_ = r.cb;
      if (b < 0) {
        corr0_ = a, corr_step_ = 1, ncorr_ = 1;
      } else {
        if (b < a) std::swap(a, b), std::swap(ca_, cb_);  // read in table order
        corr0_ = a, corr_step_ = b - a, ncorr_ = 2;
      }
      return;
    }
    std::string need = wanted.front();
    for (std::size_t k = 1; k < wanted.size(); ++k) need += ", or " + wanted[k];
    throw InputError(path_ + ": stokes " + stokes_ + " needs correlations " + need +
                     "; POLARIZATION CORR_TYPE has " + join(corr));
  }

  // Whether visibility (row r, selected channel j) is unflagged in every correlation it uses.
  bool unflagged(std::size_t r, std::size_t j) const {
    const bool* f = chunk_.flag.begin() + (r * std::size_t(span_) + std::size_t(sel_[j])) * std::size_t(ncorr_);
    return !f[0] && (ncorr_ == 1 || !f[1]);
  }

  bool row_selected(std::size_t r) const { return chunk_.field[r] == field_ && !chunk_.flag_row[r]; }

  // scan()'s result for a selection of an MS, kept for the process: choose: auto plans each of its
  // options with this stage's estimate, which prepares it, and the run prepares it again; UVW and the
  // flags are read once for all of them. Keyed by the selection and the size and modification time
  // of each file of the table and its subtables, so that a changed MS is scanned again.
  struct Scanned {
    std::vector<Block> blocks;
    std::shared_ptr<const Observation> obs;
  };
  std::string scan_key() const {
    std::ostringstream key;
    key << path_ << '|' << data_column_ << '|' << field_ << '|' << chan0_ << '|' << span_;
    for (int c : sel_) key << ',' << c;
    key << '|' << stokes_ << '|' << block_rows_ << '|' << share_rows_ << '|' << dist::rank() << '/' << dist::size();
    std::error_code ec;
    for (const auto& f : std::filesystem::recursive_directory_iterator(path_, ec))
      if (f.is_regular_file(ec) && f.path().filename() != "table.lock")  // a reader's lock is no change
        key << '|' << f.path().lexically_relative(path_).string() << ':' << f.file_size(ec) << ':'
            << f.last_write_time(ec).time_since_epoch().count();
    return key.str();
  }
  // The last selection scanned is kept (an automatic choice prepares the same selection in a row):
  // a long-lived process reading many Measurement Sets holds one scan, not one per selection.
  void scan_once() {
    static std::mutex mutex;
    static std::string last_key;
    static Scanned last;
    const std::string key = scan_key();
    {
      std::lock_guard lock(mutex);
      if (key == last_key) {
        blocks_ = last.blocks;
        obs_ = last.obs;
        return;
      }
    }
    scan();
    std::lock_guard lock(mutex);
    last_key = key;
    last = {blocks_, obs_};
  }

  // One pass over UVW, TIME, the row indices and the flags (no data): validates the rows, finds
  // the blocks that hold data and the statistics of what they hold.
  void scan() {
    const ms::MsInfo& info = ms_->info();
    const int antennas = int(info.antennas.size());
    UvwStats total;
    blocks_.clear();
    const Share share(share_rows_);
    for (std::int64_t first = 0; first < info.rows; first += block_rows_) {
      if (!share.mine(first / block_rows_)) continue;
      const std::int64_t n = std::min(block_rows_, info.rows - first);
      ms_->read(first, n, false, chunk_);
      const UvwStats st = tbb::parallel_deterministic_reduce(
          tbb::blocked_range<std::size_t>(0, std::size_t(n), kRowGrain), UvwStats{},
          [&](const tbb::blocked_range<std::size_t>& range, UvwStats acc) {
            for (std::size_t r = range.begin(); r < range.end(); ++r) {
              const std::int64_t row = first + std::int64_t(r);
              const int a1 = chunk_.antenna1[r], a2 = chunk_.antenna2[r];
              if (chunk_.data_desc[r] != 0) acc.bad(row, "DATA_DESC_ID is " + std::to_string(chunk_.data_desc[r]) +
                                                             ", DATA_DESCRIPTION has one row");
              if (antennas > 0 && (a1 < 0 || a1 >= antennas || a2 < 0 || a2 >= antennas))
                acc.bad(row, "ANTENNA1, ANTENNA2 are " + std::to_string(a1) + ", " + std::to_string(a2) + "; ANTENNA has " +
                                 std::to_string(antennas) + " rows");
              if (!row_selected(r)) continue;
              const double* uvw = &chunk_.uvw[3 * r];
              bool any = false;
              for (std::size_t j = 0; j < sel_.size(); ++j) {
                if (!unflagged(r, j)) continue;
                any = true;
                const double s = per_metre_[j];
                const double w = std::abs(double(float(uvw[2] * s)));
                acc.count++;
                acc.max_abs_w = std::max(acc.max_abs_w, w);
                acc.min_abs_w = std::min(acc.min_abs_w, w);
                acc.sum_w2 += w * w;
                acc.abs_w.add(w);
                acc.max_abs_uv = std::max({acc.max_abs_uv, double(std::abs(float(uvw[0] * s))),
                                           double(std::abs(float(uvw[1] * s)))});
              }
              if (!any) continue;
              if (!(std::isfinite(uvw[0]) && std::isfinite(uvw[1]) && std::isfinite(uvw[2])))
                acc.bad(row, "UVW is not finite in an unflagged row");
              if (!std::isfinite(chunk_.time[r])) acc.bad(row, "TIME is not finite in an unflagged row");
              acc.first_time = std::min(acc.first_time, chunk_.time[r]);
            }
            return acc;
          },
          [](UvwStats a, const UvwStats& b) {
            a.merge(b);
            return a;
          });
      if (st.bad_row != std::numeric_limits<std::int64_t>::max())
        throw InputError(path_ + ": main table row " + std::to_string(st.bad_row) + ": " + st.why);
      if (st.count > 0) blocks_.push_back({first, n});
      total.merge(st);
    }
    std::int64_t blocks = std::int64_t(blocks_.size());
    if (share.split()) merge_ranks(total, blocks);
    if (total.count == 0)
      throw InputError(path_ + ": nothing to read: FLAG and FLAG_ROW leave no visibility in field " + std::to_string(field_) +
                       ", channels " + (channels_text_.empty() ? "all" : "'" + channels_text_ + "'") + ", stokes " +
                       stokes_ + " (" + std::to_string(info.rows) + " rows)");
    make_observation(total, blocks);
  }

  // The statistics of the whole MS from every rank's share (a bad row has ended the job already).
  static void merge_ranks(UvwStats& st, std::int64_t& blocks) {
    std::int64_t counts[2] = {st.count, blocks};
    dist::all_reduce(counts, counts, 2, dist::Op::sum);
    double high[2] = {st.max_abs_w, st.max_abs_uv}, low[2] = {st.min_abs_w, st.first_time};
    dist::all_reduce(high, high, 2, dist::Op::max);
    dist::all_reduce(low, low, 2, dist::Op::min);
    dist::all_reduce(&st.sum_w2, &st.sum_w2, 1, dist::Op::sum);
    auto& bins = st.abs_w.counts();
    dist::all_reduce(bins.data(), bins.data(), bins.size(), dist::Op::sum);
    st.count = counts[0], blocks = counts[1];
    st.max_abs_w = high[0], st.max_abs_uv = high[1], st.min_abs_w = low[0], st.first_time = low[1];
  }

  void make_observation(const UvwStats& st, std::int64_t blocks) {
    const ms::MsInfo& info = ms_->info();
    auto obs = std::make_shared<Observation>();
    obs->telescope = info.telescope;
    const ms::Field& f = info.fields[std::size_t(field_)];
    obs->origin = "Measurement Set " + path_ + ": field " + std::to_string(field_) + " '" + f.name + "', " +
                  data_column_ + ", stokes " + stokes_ + ", " + std::to_string(sel_.size()) + " of " +
                  std::to_string(info.chan_freq_hz.size()) + " channels";
    obs->ra_rad = f.ra_rad;
    obs->dec_rad = f.dec_rad;
    obs->freq_hz = freq_hz_;
    obs->ref_freq_hz = (freq_hz_.front() + freq_hz_.back()) / 2;  // the band centre, as WSClean's CRVAL3
    obs->date_obs = ms::iso8601(st.first_time);
    obs->total_visibilities = st.count;
    obs->total_blocks = blocks;
    obs->max_abs_w = st.max_abs_w;
    obs->min_abs_w = st.min_abs_w;
    obs->rms_abs_w = std::sqrt(st.sum_w2 / double(st.count));
    obs->max_abs_uv = st.max_abs_uv;
    obs->abs_w_quantiles = st.abs_w.quantiles(64);
    for (const ms::Antenna& a : info.antennas) obs->antennas.push_back({a.name, a.x, a.y, a.z, a.dish_diameter_m});
    obs->integration_s = info.interval_s;
    obs->channel_width_hz = std::abs(info.chan_width_hz[std::size_t(chan0_ + sel_.front())]);
    obs_ = std::move(obs);
  }

  // The chunk's selected, unflagged, finite visibilities as a block: counted per row, then
  // filled in parallel at each row's offset.
  std::shared_ptr<VisBlock> make_block(std::int64_t index) {
    const std::size_t rows = std::size_t(chunk_.rows), nsel = sel_.size(), nc = std::size_t(ncorr_);
    const std::size_t span = std::size_t(span_);
    auto value_at = [&](std::size_t r, std::size_t j) -> const cfloat* { return &chunk_.data[(r * span + sel_[j]) * nc]; };
    auto finite = [](cfloat v) { return std::isfinite(v.real()) && std::isfinite(v.imag()); };
    auto keep = [&](std::size_t r, std::size_t j) {
      if (!unflagged(r, j)) return false;
      const cfloat* v = value_at(r, j);
      return finite(v[0]) && (nc == 1 || finite(v[1]));
    };
    std::vector<std::int64_t> offset(rows + 1, 0);
    std::atomic<std::int64_t> dropped{0};
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, rows, kRowGrain), [&](const tbb::blocked_range<std::size_t>& range) {
      std::int64_t bad = 0;
      for (std::size_t r = range.begin(); r < range.end(); ++r) {
        std::int64_t k = 0;
        if (row_selected(r))
          for (std::size_t j = 0; j < nsel; ++j) {
            const bool ok = keep(r, j);
            k += ok;
            bad += !ok && unflagged(r, j);
          }
        offset[r + 1] = k;
      }
      dropped += bad;
    });
    non_finite_ += dropped;
    for (std::size_t r = 0; r < rows; ++r) offset[r + 1] += offset[r];
    const std::size_t n = std::size_t(offset[rows]);

    auto b = std::make_shared<VisBlock>();
    b->obs = obs_;
    b->index = index;
    b->uu = Array<float>::host(n);
    b->vv = Array<float>::host(n);
    b->ww = Array<float>::host(n);
    b->vis = Array<cfloat>::host(n);
    b->weight = Array<float>::host(n);
    b->antenna1 = Array<std::int32_t>::host(n);
    b->antenna2 = Array<std::int32_t>::host(n);
    b->channel = Array<std::int32_t>::host(n);
    b->time = Array<double>::host(n);
    VisBlock& out = *b;
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, rows, kRowGrain), [&](const tbb::blocked_range<std::size_t>& range) {
      for (std::size_t r = range.begin(); r < range.end(); ++r) {
        std::size_t k = std::size_t(offset[r]);
        if (k == std::size_t(offset[r + 1])) continue;
        const double* uvw = &chunk_.uvw[3 * r];
        for (std::size_t j = 0; j < nsel; ++j) {
          if (!keep(r, j)) continue;
          const cfloat* v = value_at(r, j);
          const float* w = spectrum_ ? &chunk_.weight[(r * span + sel_[j]) * nc] : &chunk_.weight[r * nc];
          const double s = per_metre_[j];
          out.uu[k] = float(uvw[0] * s);
          out.vv[k] = float(uvw[1] * s);
          out.ww[k] = float(uvw[2] * s);
          out.vis[k] = nc == 1 ? v[0] : ca_ * v[0] + cb_ * v[1];
          out.weight[k] = nc == 1 ? w[0] : 4 * std::min(w[0], w[1]);
          out.antenna1[k] = chunk_.antenna1[r];
          out.antenna2[k] = chunk_.antenna2[r];
          out.channel[k] = std::int32_t(j);
          out.time[k] = chunk_.time[r];
          ++k;
        }
      }
    });
    return b;
  }

  std::string path_, data_column_, channels_text_, stokes_;
  int field_choice_ = -1, field_ = 0;
  std::vector<std::pair<int, int>> channel_ranges_;
  std::int64_t rows_per_block_ = 0, block_rows_ = 0;  // the parameter; the rows of a block
  bool share_rows_ = false;                            // the `share` parameter

  std::unique_ptr<ms::MsReader> ms_;
  int chan0_ = 0, span_ = 0;           // the channels read: [chan0_, chan0_ + span_)
  std::vector<int> sel_;               // selected channels, relative to chan0_
  std::vector<double> per_metre_;      // per selected channel: wavelengths per metre
  std::vector<double> freq_hz_;        // per selected channel
  int corr0_ = 0, corr_step_ = 1, ncorr_ = 1;  // the correlations read
  cfloat ca_ = 1, cb_ = 0;             // value = ca_ a + cb_ b
  bool spectrum_ = false;              // weights from WEIGHT_SPECTRUM (else WEIGHT)
  std::vector<Block> blocks_;          // row runs with data, one per item
  std::shared_ptr<const Observation> obs_;
  ms::Chunk chunk_;                    // the columns of the current block, reused
  std::atomic<std::int64_t> non_finite_{0};
};

}  // namespace

// The estimate (choose: auto) is the observation, from prepare()'s pass over UVW and the flags (made
// once: scan_once()); the reading itself is outside every choice.
StageSpec spec() {
  return decl.spec({cpu_backend<ReadMs>()}, [](const Params& p, const PortShapes&, const EstimateContext&) {
    ReadMs s;
    s.check(p);
    PrepareContext pc;
    s.prepare(pc);
    Estimate e;
    e.outputs[std::string(info.name)].obs = e.outputs[std::string(vis.name)].obs = s.observation();
    return e;
  });
}

}  // namespace uvflow::io_read_ms
