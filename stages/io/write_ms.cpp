#include "stages/io/write_ms.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <limits>
#include <optional>
#include <unordered_map>

#include "runtime/error.hpp"
#include "runtime/units.hpp"
#include "stages/io/ms_tables.hpp"

namespace uvflow::io_write_ms {
namespace {

constexpr std::size_t kRowGrain = 1024;        // rows per parallel task

std::vector<std::string> correlation_names(const std::string& choice) {
  if (choice == "linear4") return {"XX", "XY", "YX", "YY"};
  if (choice == "linear2") return {"XX", "YY"};
  if (choice == "circular4") return {"RR", "RL", "LR", "LL"};
  return {"RR", "LL"};
}

// A uniform number in [0, 1) that depends on (seed, key) only (splitmix64's mixer): the random
// flags do not depend on block boundaries or threads.
double uniform(std::uint64_t seed, std::uint64_t key) {
  std::uint64_t z = key + (seed + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return double(z >> 11) * 0x1.0p-53;
}

// casacore cannot report a full disk: its storage managers flush again in their destructors while
// the first error unwinds, and that second exception ends the process. So each write first checks
// the free space beside the temporary copy: twice what it adds, plus room for the tiles the
// storage managers allocate ahead (a new set with a few rows takes about 5 MiB).
constexpr std::uintmax_t kTileSpare = 16u << 20;

void ensure_space(const std::string& tmp, const std::string& shown, std::uintmax_t bytes, const std::string& what) {
  std::error_code ec;
  const auto space = std::filesystem::space(std::filesystem::path(tmp).parent_path(), ec);
  if (ec) return;  // unknown: the write itself will tell
  const std::uintmax_t need = 2 * bytes + kTileSpare;
  auto mib = [](std::uintmax_t b) { return std::to_string((b + (1u << 19)) >> 20) + " MiB"; };
  if (space.available < need)
    throw OutputError("cannot write " + shown + ": No space left on device (" + mib(space.available) + " free; " + what +
                      " needs about " + mib(need) + ")");
}

// casacore's messages name the table it was given, the run's temporary copy: name the user's path.
template <class F>
void naming_user_path(const std::string& tmp, const std::string& shown, F&& write) {
  auto renamed = [&](std::string m) {
    for (const std::string& t : {std::filesystem::absolute(tmp).string(), tmp})
      for (std::size_t at; (at = m.find(t)) != std::string::npos;) m.replace(at, t.size(), shown);
    return m;
  };
  try {
    write();
  } catch (const InputError& e) {
    throw InputError(renamed(e.what()));
  } catch (const OutputError& e) {
    throw OutputError(renamed(e.what()));
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(renamed(e.what()));
  }
}

// Writes blocks into one column of an existing Measurement Set. The set is never changed while
// the run goes on: its copy at the run's temporary path (hard links to the files that writing the
// column leaves alone, copies of the others) is written, and replaces it when the run succeeds.
class ColumnUpdate {
 public:
  ColumnUpdate(std::string path, std::string column, bool add)
      : path_(std::move(path)), column_(std::move(column)), add_(add) {}

  // Everything that can be known up front; the rows' keys too unless `dry_run`.
  void check(bool dry_run) {
    namespace fs = std::filesystem;
    if (!fs::exists(path_))
      throw InputError(path_ + " does not exist: io.write_ms with column " + column_ +
                       " writes into an existing Measurement Set");
    for (const fs::path& p : {fs::path(path_), fs::path(path_) / "table.dat"})
      if (fs::exists(p) && !writable(p))
        throw InputError(path_ + " is read-only (no write permission on " + p.string() + "): cannot write column " +
                         column_);
    target_ = ms::inspect_column(path_, column_, add_, !dry_run);
    index_rows();
  }

  // The copy, with the column ready (added if it was missing).
  void open(Context& ctx) {
    tmp_ = ctx.output_file(path_).string();
    ensure_space(tmp_, path_, cell_bytes(target_.rows), "a copy of column " + column_);
    link_copy(path_, tmp_, true);
    naming_user_path(tmp_, path_, [&] {
      ms::prepare_column(tmp_, column_, int(target_.correlations.size()), int(target_.chan_freq_hz.size()));
    });
    opened_ = true;
  }
  bool opened() const { return opened_; }

  void write(const VisBlock& b, const Observation& obs) {
    const std::size_t n = b.size();
    if (n == 0) return;
    map_channels(obs);
    const std::string where = "io.write_ms: block " + std::to_string(b.index) + ": ";
    std::vector<std::int64_t> row(n);
    for (std::size_t k = 0; k < n; ++k) {
      auto it = rows_.find(Key{b.time[k], b.antenna1[k], b.antenna2[k]});
      const std::string what = "visibility " + std::to_string(k) + " (antennas " + std::to_string(b.antenna1[k]) + ", " +
                               std::to_string(b.antenna2[k]) + ", TIME " + std::to_string(b.time[k]) + ")";
      if (it == rows_.end())
        throw InputError(where + what + " has no row of that time and antenna pair in " + path_ +
                         ": the visibilities must come from this Measurement Set (io.read_ms)");
      if (it->second < 0)
        throw InputError(where + what + " matches several rows of " + path_ +
                         " (the same time and antenna pair): cannot tell which to write");
      row[k] = it->second;
    }
    // The rows in runs (gaps of a few rows are read and written back unchanged), each read,
    // filled and written in one go.
    std::vector<std::size_t> order(n);
    for (std::size_t k = 0; k < n; ++k) order[k] = k;
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t c) { return row[a] < row[c]; });
    const std::size_t nchan = target_.chan_freq_hz.size(), ncorr = target_.correlations.size();
    std::vector<cfloat> cells;
    for (std::size_t i = 0; i < n;) {
      std::size_t j = i + 1;
      while (j < n && row[order[j]] - row[order[j - 1]] <= kRowGap) ++j;
      const std::int64_t first = row[order[i]], count = row[order[j - 1]] - first + 1;
      naming_user_path(tmp_, path_, [&] { ms::get_cells(tmp_, column_, first, count, cells); });
      for (std::size_t q = i; q < j; ++q) {
        const std::size_t k = order[q];
        cfloat* cell = &cells[(std::size_t(row[k] - first) * nchan + std::size_t(channel_[std::size_t(b.channel[k])])) * ncorr];
        for (std::size_t p = 0; p < ncorr; ++p) cell[p] = parallel_[p] ? b.vis[k] : cfloat(0);
      }
      naming_user_path(tmp_, path_, [&] { ms::put_cells(tmp_, column_, first, count, cells); });
      i = j;
    }
  }

 private:
  static constexpr std::int64_t kRowGap = 64;

  std::uintmax_t cell_bytes(std::int64_t rows) const {
    return std::uintmax_t(rows) * target_.chan_freq_hz.size() * target_.correlations.size() * sizeof(cfloat);
  }

  struct Key {
    double time;
    std::int32_t a1, a2;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const {
      std::uint64_t h = std::bit_cast<std::uint64_t>(k.time);
      h ^= (std::uint64_t(std::uint32_t(k.a1)) << 32 | std::uint32_t(k.a2)) + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
      return std::size_t(h);
    }
  };

  static bool writable(const std::filesystem::path& p) {
    // Root may write anything: a set whose owner took every write permission away counts as
    // read-only all the same.
    struct stat st {};
    return ::access(p.c_str(), W_OK) == 0 && ::stat(p.c_str(), &st) == 0 && (st.st_mode & (S_IWUSR | S_IWGRP | S_IWOTH));
  }

  // Row of each (TIME, ANTENNA1, ANTENNA2); -1 where several rows share one.
  void index_rows() {
    rows_.clear();
    rows_.reserve(target_.time.size());
    for (std::size_t r = 0; r < target_.time.size(); ++r) {
      auto [it, fresh] = rows_.try_emplace(Key{target_.time[r], target_.antenna1[r], target_.antenna2[r]}, std::int64_t(r));
      if (!fresh) it->second = -1;
    }
    target_.time = {};
    target_.antenna1 = {};
    target_.antenna2 = {};
    parallel_.clear();
    for (const std::string& c : target_.correlations)
      parallel_.push_back(c == "I" || (c.size() == 2 && c[0] == c[1]));  // XX, YY, RR, LL carry I
  }

  // The set's channel of each of the observation's frequencies.
  void map_channels(const Observation& obs) {
    if (mapped_ == &obs) return;
    channel_.clear();
    const auto& f = target_.chan_freq_hz;
    for (std::size_t c = 0; c < obs.freq_hz.size(); ++c) {
      auto near = [&](double x) { return std::fabs(x - obs.freq_hz[c]) <= 1e-9 * std::fabs(obs.freq_hz[c]); };
      auto it = std::find_if(f.begin(), f.end(), near);
      if (it == f.end())
        throw InputError("io.write_ms: channel " + std::to_string(c) + " of the visibilities is at " +
                         std::to_string(obs.freq_hz[c]) + " Hz, which is no channel of " + path_ + "'s spectral window");
      channel_.push_back(int(it - f.begin()));
    }
    mapped_ = &obs;
  }

  // A copy of the table at `from`: regular files hard-linked, except those that opening the main
  // table for update and writing the column rewrite (its table.dat, table.info, the lock files,
  // the column's storage manager files), which are copied so that the original stays as it was.
  void link_copy(const std::filesystem::path& from, const std::filesystem::path& to, bool main) const {
    namespace fs = std::filesystem;
    fs::create_directory(to);
    for (const fs::directory_entry& e : fs::directory_iterator(from)) {
      const std::string name = e.path().filename().string();
      const fs::path dst = to / name;
      if (e.is_symlink()) {
        fs::copy_symlink(e.path(), dst);
      } else if (e.is_directory()) {
        link_copy(e.path(), dst, false);
      } else {
        const std::string& mf = target_.manager_file;
        const bool column_file =
            !mf.empty() && name.rfind(mf, 0) == 0 && (name.size() == mf.size() || !std::isdigit(name[mf.size()]));
        std::error_code ec;
        if (name == "table.lock" || (main && (name == "table.dat" || name == "table.info" || column_file)))
          fs::copy_file(e.path(), dst);
        else if (fs::create_hard_link(e.path(), dst, ec); ec)
          fs::copy_file(e.path(), dst);  // a file system without hard links
      }
    }
  }

  std::string path_, column_;
  bool add_ = false, opened_ = false;
  std::string tmp_;
  ms::ColumnTarget target_;
  std::unordered_map<Key, std::int64_t, KeyHash> rows_;
  std::vector<bool> parallel_;
  std::vector<int> channel_;  // per channel of the observation
  const Observation* mapped_ = nullptr;
};

class WriteMs : public DeclaredStage<decl> {
 public:
  void check(const Params& p) override {
    path_ = p.path.string();
    if (path_.empty()) throw ParamError("path", "must not be empty");
    correlations_ = correlation_names(p.correlations);
    weight_spectrum_ = p.weight_spectrum;
    flag_fraction_ = p.flag_fraction;
    flag_row_fraction_ = p.flag_row_fraction;
    flag_seed_ = std::uint64_t(p.flag_seed);
    overwrite_ = p.overwrite;
    if (!p.column.empty()) {
      if (p.overwrite) throw ParamError("overwrite", "replaces a whole Measurement Set: not with column " + p.column);
      if (p.flag_fraction > 0 || p.flag_row_fraction > 0)
        throw ParamError(p.flag_fraction > 0 ? "flag_fraction" : "flag_row_fraction",
                         "flags are written to new Measurement Sets only, not with column " + p.column);
      update_.emplace(path_, p.column, p.add_column);
    } else if (p.add_column) {
      throw ParamError("add_column", "adds the column set by column, which is empty");
    }
  }

  // An existing path is replaced (when the run succeeds) only if asked to, and only if it is a
  // casacore table: a mistyped path must never cost a user a directory.
  void prepare(PrepareContext& pc) override {
    namespace fs = std::filesystem;
    if (update_) return update_->check(pc.dry_run);
    if (!fs::exists(path_)) return;
    if (!overwrite_) throw InputError(path_ + " exists; remove it or set overwrite: true to replace it");
    if (!fs::is_directory(path_) || !fs::exists(fs::path(path_) / "table.dat"))
      throw InputError(path_ + " exists and is not a Measurement Set (no table.dat): refusing to replace it");
  }

  void process(Context& ctx) override {
    auto block = ctx.in(vis);
    if (update_) {
      if (!update_->opened()) update_->open(ctx);
      obs_ = ctx.in(info)->obs;
      check_block(*block);
      return update_->write(*block, *obs_);
    }
    if (tmp_.empty()) create(ctx);
    check_block(*block);
    if (block->size() == 0) return;
    const ms::Rows rows = rows_of(*block);
    // Per row: the cells of DATA, FLAG (bits) and WEIGHT_SPECTRUM, WEIGHT and SIGMA, and 128 bytes
    // of UVW and the scalar columns.
    const std::uintmax_t bytes = rows.data.size() * sizeof(cfloat) + rows.flag.size / 8 +
                                 (rows.weight_spectrum.size() + 2 * rows.weight.size()) * sizeof(float) +
                                 std::uintmax_t(rows.rows) * 128;
    ensure_space(tmp_, path_, bytes, "block " + std::to_string(block->index));
    naming_user_path(tmp_, path_, [&] { ms::append_rows(tmp_, rows); });
  }

  void finish(Context& ctx) override {
    if (update_) {
      if (!update_->opened()) update_->open(ctx);  // an empty stream still adds the column
      return;
    }
    if (tmp_.empty()) create(ctx);  // an empty stream still makes a (row-less) Measurement Set
    std::vector<ms::Antenna> antennas;
    for (const auto& a : obs_->antennas) antennas.push_back({a.name, a.x, a.y, a.z, a.dish_diameter_m});
    // Without known antennas, name as many as the rows use, at unknown (zero) positions.
    for (std::int32_t a = std::int32_t(antennas.size()); a <= max_antenna_; ++a) {
      antennas.emplace_back().name = "A";
      antennas.back().name += std::to_string(a);
    }
    ensure_space(tmp_, path_, antennas.size() * 1024, "the ANTENNA and FEED tables");
    naming_user_path(tmp_, path_,
                     [&] { ms::finish_ms(tmp_, antennas, rows_written_ ? first_time_ : 0, rows_written_ ? last_time_ : 0); });
  }

 private:
  void create(Context& ctx) {
    auto in = ctx.in(info);
    if (!in->obs) throw std::logic_error("io.write_ms: VisSetInfo without an Observation");
    obs_ = in->obs;
    if (obs_->freq_hz.empty()) throw InputError("io.write_ms: the observation lists no frequencies");
    ms::MsLayout layout;
    layout.correlations = correlations_;
    layout.chan_freq_hz = obs_->freq_hz;
    layout.chan_width_hz = obs_->channel_width_hz;
    layout.field = {"uvflow", obs_->ra_rad, obs_->dec_rad};
    layout.telescope = obs_->telescope;
    layout.origin = obs_->origin;
    layout.weight_spectrum = weight_spectrum_;
    tmp_ = ctx.output_file(path_).string();
    ensure_space(tmp_, path_, 0, "a new Measurement Set");
    naming_user_path(tmp_, path_, [&] { ms::create_ms(tmp_, layout); });
  }

  void check_block(const VisBlock& b) {
    const std::string where = "io.write_ms: block " + std::to_string(b.index) + ": ";
    auto sized = [&](const ArrayBase& a, const char* name) {
      if (a.size() != b.size())
        throw InputError(where + name + " has " + std::to_string(a.size()) + " values for " + std::to_string(b.size()) +
                         " visibilities" +
                         (a.empty() ? " (a Measurement Set row needs each visibility's antenna pair, time and channel: "
                                      "connect io.write_ms to io.simulate or io.read_ms, not to a stage that reorders)"
                                    : ""));
    };
    sized(b.uu, "uu");
    sized(b.vv, "vv");
    sized(b.ww, "ww");
    sized(b.weight, "weight");
    sized(b.antenna1, "antenna1");
    sized(b.antenna2, "antenna2");
    sized(b.time, "time");
    sized(b.channel, "channel");
    const std::int32_t channels = std::int32_t(obs_->freq_hz.size());
    const std::int32_t antennas = obs_->antennas.empty() ? std::numeric_limits<std::int32_t>::max()
                                                         : std::int32_t(obs_->antennas.size());
    for (std::size_t k = 0; k < b.size(); ++k) {
      const std::int32_t a1 = b.antenna1[k], a2 = b.antenna2[k], c = b.channel[k];
      if (c < 0 || c >= channels)
        throw InputError(where + "visibility " + std::to_string(k) + " has channel " + std::to_string(c) + ", the observation has " +
                         std::to_string(channels));
      if (a1 < 0 || a2 < 0 || a1 >= antennas || a2 >= antennas)
        throw InputError(where + "visibility " + std::to_string(k) + " has antennas " + std::to_string(a1) + ", " +
                         std::to_string(a2) + ", the observation has " + std::to_string(obs_->antennas.size()));
      if (!std::isfinite(b.time[k])) throw InputError(where + "visibility " + std::to_string(k) + " has a non-finite time");
      max_antenna_ = std::max({max_antenna_, a1, a2});
    }
  }

  // Rows of the block: consecutive visibilities with the same antenna pair and time, and rising
  // channels, share one; the channels a row does not hold are flagged, with weight 0.
  ms::Rows rows_of(const VisBlock& b) {
    const std::size_t n = b.size(), nchan = obs_->freq_hz.size(), ncorr = correlations_.size();
    std::vector<std::size_t> start{0};
    for (std::size_t k = 1; k < n; ++k)
      if (b.antenna1[k] != b.antenna1[k - 1] || b.antenna2[k] != b.antenna2[k - 1] || b.time[k] != b.time[k - 1] ||
          b.channel[k] <= b.channel[k - 1])
        start.push_back(k);
    start.push_back(n);
    const std::size_t rows = start.size() - 1;

    ms::Rows out;
    out.rows = std::int64_t(rows);
    out.interval_s = obs_->integration_s;
    out.uvw.resize(3 * rows);
    out.time.resize(rows);
    out.antenna1.resize(rows);
    out.antenna2.resize(rows);
    out.flag_row.resize(rows);
    out.flag.resize(rows * nchan * ncorr);
    out.data.assign(rows * nchan * ncorr, cfloat(0));
    out.weight.resize(rows * ncorr);
    out.sigma.resize(rows * ncorr);
    std::vector<float> spectrum(rows * nchan * ncorr);
    std::vector<bool> parallel(ncorr);  // XX, YY, RR, LL carry I; the cross hands 0
    for (std::size_t p = 0; p < ncorr; ++p) parallel[p] = correlations_[p][0] == correlations_[p][1];
    const std::uint64_t first_row = std::uint64_t(rows_written_);
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, rows, kRowGrain), [&](const tbb::blocked_range<std::size_t>& range) {
      for (std::size_t r = range.begin(); r < range.end(); ++r) {
        const std::size_t k0 = start[r], k1 = start[r + 1];
        const std::uint64_t row = first_row + r;
        const bool row_flagged = uniform(flag_seed_, 2 * row) < flag_row_fraction_;
        bool* flag = out.flag.begin() + r * nchan * ncorr;
        std::fill(flag, flag + nchan * ncorr, true);
        double sum_w = 0;
        for (std::size_t k = k0; k < k1; ++k) {
          const std::size_t c = std::size_t(b.channel[k]);
          const bool flagged = row_flagged || uniform(flag_seed_, 2 * (row * nchan + c) + 1) < flag_fraction_;
          const float w = b.weight[k] / 4;
          sum_w += w;
          for (std::size_t p = 0; p < ncorr; ++p) {
            const std::size_t cell = (r * nchan + c) * ncorr + p;
            out.data[cell] = parallel[p] ? b.vis[k] : cfloat(0);
            spectrum[cell] = w;
            flag[c * ncorr + p] = flagged;
          }
        }
        // UVW in metres from the first visibility, in wavelengths at its channel.
        const double metres = kSpeedOfLight / obs_->freq_hz[std::size_t(b.channel[k0])];
        out.uvw[3 * r] = b.uu[k0] * metres;
        out.uvw[3 * r + 1] = b.vv[k0] * metres;
        out.uvw[3 * r + 2] = b.ww[k0] * metres;
        out.time[r] = b.time[k0];
        out.antenna1[r] = b.antenna1[k0];
        out.antenna2[r] = b.antenna2[k0];
        out.flag_row.begin()[r] = row_flagged;
        // WEIGHT is the mean channel weight: without WEIGHT_SPECTRUM readers apply it to every channel.
        const float w = float(sum_w / double(nchan));
        for (std::size_t p = 0; p < ncorr; ++p) {
          out.weight[r * ncorr + p] = w;
          out.sigma[r * ncorr + p] = w > 0 ? 1 / std::sqrt(w) : 0;  // 0: no information
        }
      }
    });
    if (weight_spectrum_) out.weight_spectrum = std::move(spectrum);
    for (std::size_t r = 0; r < rows; ++r) {
      first_time_ = std::min(first_time_, out.time[r]);
      last_time_ = std::max(last_time_, out.time[r]);
    }
    rows_written_ += std::int64_t(rows);
    return out;
  }

  std::string path_;
  std::vector<std::string> correlations_;
  bool weight_spectrum_ = true, overwrite_ = false;
  double flag_fraction_ = 0, flag_row_fraction_ = 0;
  std::uint64_t flag_seed_ = 1;

  std::optional<ColumnUpdate> update_;  // with column: the existing set it writes
  std::shared_ptr<const Observation> obs_;
  std::string tmp_;  // where the Measurement Set is written until the run succeeds
  std::int64_t rows_written_ = 0;
  std::int32_t max_antenna_ = -1;
  double first_time_ = std::numeric_limits<double>::infinity(), last_time_ = -std::numeric_limits<double>::infinity();
};

}  // namespace

StageSpec spec() { return decl.spec({cpu_backend<WriteMs>()}); }

}  // namespace uvflow::io_write_ms
