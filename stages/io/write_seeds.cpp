#include "stages/io/write_seeds.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "runtime/error.hpp"
#include "stages/io/seeds_format.hpp"

namespace uvflow::io_write_seeds {
namespace {

// One array of every block, appended as blocks come and copied into the output at the end; it
// lives in the output's private temporary folder, which the commit or rollback removes.
class Spill {
 public:
  Spill(const std::filesystem::path& p, std::string shown) : shown_(std::move(shown)) {
    f_ = std::fopen(p.c_str(), "w+b");
    if (!f_) fail();
  }
  ~Spill() { std::fclose(f_); }
  Spill(const Spill&) = delete;
  Spill& operator=(const Spill&) = delete;
  void append(const void* src, std::size_t bytes) {
    if (std::fwrite(src, 1, bytes, f_) != bytes) fail();
  }
  void copy_to(seeds_format::Writer& w) {
    if (std::fflush(f_) != 0 || std::fseek(f_, 0, SEEK_SET) != 0) fail();
    std::vector<char> buf(1 << 20);
    while (std::size_t got = std::fread(buf.data(), 1, buf.size(), f_)) w.write(buf.data(), got);
    if (std::ferror(f_)) fail();
  }

 private:
  [[noreturn]] void fail() { throw OutputError("cannot write " + shown_ + ": " + std::strerror(errno)); }
  std::FILE* f_ = nullptr;
  std::string shown_;
};

class WriteSeeds : public DeclaredStage<decl> {
 public:
  void process(Context& ctx) override {
    const auto b = ctx.in(vis);
    open(ctx);
    n_ += std::int64_t(b->size());
    if (n_ > std::numeric_limits<std::int32_t>::max())
      throw InputError("io.write_seeds: more than 2^31 - 1 visibilities for " + params().path.string() +
                       ", more than the format's int32 num_vis can count");
    spills_[0]->append(b->uu.data(), b->size() * 4);
    spills_[1]->append(b->vv.data(), b->size() * 4);
    spills_[2]->append(b->ww.data(), b->size() * 4);
    spills_[3]->append(b->vis.data(), b->size() * 8);
    spills_[4]->append(b->weight.data(), b->size() * 4);
  }

  void finish(Context& ctx) override {
    open(ctx);
    const auto ks = ctx.in(kernels);
    int side = 0;  // conv_size_half: the largest compacted quarter
    for (int p = 0; p < ks->planes; ++p) side = std::max(side, ks->half_size(p));
    seeds_format::Writer w(temp_, params().path);
    w.put(std::int32_t(ks->planes));
    w.write(ks->support.data(), std::size_t(ks->planes) * 4);
    w.put(std::int32_t(ks->oversample));
    w.put(std::int32_t(side));
    std::vector<cfloat> plane(std::size_t(side) * side);
    for (int p = 0; p < ks->planes; ++p) {
      const int S = ks->half_size(p);
      std::fill(plane.begin(), plane.end(), cfloat(0));
      for (int iy = 0; iy < S; ++iy)
        std::copy_n(ks->quarter.data() + ks->quarter_start[p] + std::int64_t(iy) * S, S, plane.begin() + std::ptrdiff_t(iy) * side);
      w.write(plane.data(), plane.size() * sizeof(cfloat));
    }
    w.put(std::int32_t(n_));
    for (auto& s : spills_) s->copy_to(w);
    w.put(ks->geom.cell_rad);
    w.put(ks->w_scale);
    w.put(std::int32_t(ks->geom.grid_size));
    w.close();
  }

 private:
  // The output's temporary and the spills beside it, at the first block (or at the end).
  void open(Context& ctx) {
    if (!temp_.empty()) return;
    temp_ = ctx.output_file(params().path);
    const char* names[] = {"uu", "vv", "ww", "vis", "weight"};
    for (int i = 0; i < 5; ++i)
      spills_[i] = std::make_unique<Spill>(temp_.parent_path() / ("spill." + std::string(names[i])), params().path.string());
  }

  std::filesystem::path temp_;
  std::array<std::unique_ptr<Spill>, 5> spills_;
  std::int64_t n_ = 0;
};

}  // namespace

StageSpec spec() { return decl.spec({cpu_backend<WriteSeeds>()}); }

}  // namespace uvflow::io_write_seeds
