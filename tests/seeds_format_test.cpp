// The gridding memos' binary format (shared/WPROJ.md): a small file written here byte by byte,
// read back by io.read_seeds, gridded by grid.serial and by pipelines/seeds_grid.yaml (grid.tiled
// after the sorting chain), the grids written by io.write_grid as .npy and in the seeds' expected-
// output format, read back by this file's own readers and compared with the independent
// double-precision Listing 1 (tests/support/reference_gridder) and with each other. Then truncated
// and inconsistent files, each an InputError naming the file and the field.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "graph/executor.hpp"
#include "graph/pipeline.hpp"
#include "runtime/error.hpp"
#include "runtime/harness.hpp"
#include "stages/builtin.hpp"
#include "stages/io/read_seeds.hpp"
#include "tests/support/grid_cases.hpp"
#include "tests/support/reference_gridder.hpp"
#include "tests/support/seeds.hpp"
#include "tests/support/source_dir.hpp"
#include "tests/support/temp_dir.hpp"

using namespace uvflow;
using namespace uvflow::test;

namespace {

template <class T>
void append(std::string& s, const T& v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof v);
}
template <class T>
void append(std::string& s, const Array<T>& a) {
  s.append(reinterpret_cast<const char*>(a.data()), a.size() * sizeof(T));
}
template <class T>
void patch(std::string& s, std::size_t at, T v) {
  std::memcpy(s.data() + at, &v, sizeof v);
}

// The stack and block as a file of the memos' format, written here field by field. Each plane's
// kernel is conv_size_half^2 values: the stack's quarter in its top-left S x S square, NaN
// elsewhere, so a reader that took any value outside the square would make NaN grids.
std::string seeds_bytes(const KernelStack& ks, int conv_size_half, const VisBlock& b) {
  std::string s;
  append(s, std::int32_t(ks.planes));
  for (int p = 0; p < ks.planes; ++p) append(s, std::int32_t(ks.support[p]));
  append(s, std::int32_t(ks.oversample));
  append(s, std::int32_t(conv_size_half));
  const cfloat nan(std::numeric_limits<float>::quiet_NaN(), 0);
  for (int p = 0; p < ks.planes; ++p) {
    const int S = ks.half_size(p);
    for (int iy = 0; iy < conv_size_half; ++iy)
      for (int ix = 0; ix < conv_size_half; ++ix)
        append(s, iy < S && ix < S ? ks.quarter[ks.quarter_start[p] + iy * S + ix] : nan);
  }
  append(s, std::int32_t(b.size()));
  append(s, b.uu);
  append(s, b.vv);
  append(s, b.ww);
  append(s, b.vis);
  append(s, b.weight);
  append(s, ks.geom.cell_rad);
  append(s, ks.w_scale);
  append(s, std::int32_t(ks.geom.grid_size));
  return s;
}

void write_file(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

struct GridFile {
  std::vector<cfloat> cells;
  double norm = 0;
  std::int64_t skipped = -1;
};

// An .npy of complex64 [n, n] in C order, read from its header as numpy would.
GridFile read_npy(const std::filesystem::path& p, int n) {
  const std::string s = read_file(p);
  EXPECT_EQ(s.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  std::uint16_t header = 0;
  std::memcpy(&header, s.data() + 8, 2);
  EXPECT_EQ((10 + header) % 64, 0);
  const std::string dict = s.substr(10, header);
  EXPECT_NE(dict.find("'descr': '<c8'"), std::string::npos) << dict;
  EXPECT_NE(dict.find("'fortran_order': False"), std::string::npos) << dict;
  EXPECT_NE(dict.find("'shape': (" + std::to_string(n) + ", " + std::to_string(n) + ")"), std::string::npos) << dict;
  EXPECT_EQ(dict.back(), '\n');
  GridFile g;
  g.cells.resize(std::size_t(n) * n);
  EXPECT_EQ(s.size(), 10 + header + g.cells.size() * 8);
  if (s.size() == 10 + header + g.cells.size() * 8) std::memcpy(g.cells.data(), s.data() + 10 + header, g.cells.size() * 8);
  return g;
}

// The seeds' expected-output file: int32 num_skipped, float64 norm, int32 grid_size, the grid.
GridFile read_expected_output(const std::filesystem::path& p, int n) {
  const std::string s = read_file(p);
  GridFile g;
  g.cells.resize(std::size_t(n) * n);
  EXPECT_EQ(s.size(), 16 + g.cells.size() * 8);
  if (s.size() != 16 + g.cells.size() * 8) return g;
  std::int32_t skipped, size;
  std::memcpy(&skipped, s.data(), 4);
  std::memcpy(&g.norm, s.data() + 4, 8);
  std::memcpy(&size, s.data() + 12, 4);
  EXPECT_EQ(size, n);
  g.skipped = skipped;
  std::memcpy(g.cells.data(), s.data() + 16, g.cells.size() * 8);
  return g;
}

double relative_frobenius(const std::vector<cfloat>& a, const std::vector<cdouble>& ref) {
  double diff = 0, sum = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    diff += std::norm(cdouble(a[i]) - ref[i]);
    sum += std::norm(ref[i]);
  }
  return std::sqrt(diff / sum);
}

struct SeedsFile : ::testing::Test {
  Registry reg;
  TempDir dir;
  void SetUp() override { register_builtin_stages(reg); }
  void run(const std::filesystem::path& file, const std::vector<std::string>& sets) {
    run_plan(load_plan(file, sets, reg));
  }
};

// ------------------------------------------------------------------------------------ round trip

TEST_F(SeedsFile, ReadGriddedWrittenMatchesTheReference) {
  for (auto seed : test::seeds(20261124ULL)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    // Visibilities over 110 % of the grid and 120 % of the w range: some skipped, some beyond the
    // last plane.
    auto ks = random_kernel_stack(rng, 6, 4, 4, 64);
    auto block = make_block(*ks, random_vis(rng, *ks, 3000));
    int widest = 0;
    for (int p = 0; p < ks->planes; ++p) widest = std::max(widest, ks->half_size(p));
    const auto file = dir / "data.seeds";
    write_file(file, seeds_bytes(*ks, widest + 3, *block));

    // The reader: the stack as given, blocks of block_size, the statistics of every visibility.
    StageHarness h(io_read_seeds::spec(), "cpu", io_read_seeds::decl, {.path = file, .block_size = 700});
    h.run_source();
    auto got = h.output<KernelStack>("kernels");
    EXPECT_EQ(got->geom, (GridGeometry{.image_size = 54, .grid_size = 64, .cell_rad = ks->geom.cell_rad}));
    EXPECT_EQ(got->oversample, ks->oversample);
    EXPECT_EQ(got->w_scale, ks->w_scale);
    ASSERT_EQ(got->planes, ks->planes);
    for (int p = 0; p < ks->planes; ++p) EXPECT_EQ(got->support[p], ks->support[p]) << "plane " << p;
    ASSERT_EQ(got->quarter.size(), ks->quarter.size());
    EXPECT_TRUE(std::equal(got->quarter.begin(), got->quarter.end(), ks->quarter.begin())) << "kernels changed";
    EXPECT_FALSE(got->rows.empty());
    const auto blocks = h.outputs("vis");
    ASSERT_EQ(blocks.size(), 5u);
    std::size_t at = 0;
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      auto b = std::dynamic_pointer_cast<const VisBlock>(blocks[i]);
      EXPECT_EQ(b->size(), i < 4 ? 700u : 200u);
      for (std::size_t k = 0; k < b->size(); ++k, ++at)
        ASSERT_TRUE(b->uu[k] == block->uu[at] && b->vv[k] == block->vv[at] && b->ww[k] == block->ww[at] &&
                    b->vis[k] == block->vis[at] && b->weight[k] == block->weight[at])
            << "visibility " << at;
    }
    auto obs = h.output<VisSetInfo>("info")->obs;
    double max_w = 0;
    for (float w : block->ww) max_w = std::max(max_w, std::abs(double(w)));
    EXPECT_EQ(obs->total_visibilities, 3000);
    EXPECT_EQ(obs->max_abs_w, max_w);

    // grid.serial and grid.tiled (the shipped pipeline), each grid written in both formats.
    const RefGrid ref = ref_grid(*ks, {block});
    ASSERT_GT(ref.skipped, 0);
    const auto yaml = dir.write("serial.yaml",
                                "schema: uvflow/1\nstages:\n"
                                "  - {id: vis, type: io.read_seeds, params: {path: " + file.string() + ", block_size: 999}}\n"
                                "  - {id: grid, type: grid.serial, in: {vis: vis.vis, kernels: vis.kernels}}\n"
                                "  - {id: npy, type: io.write_grid, params: {path: " + (dir / "serial.npy").string() +
                                "}, in: {grid: grid}}\n"
                                "  - {id: out, type: io.write_grid, params: {path: " + (dir / "serial.grid").string() +
                                "}, in: {grid: grid}}\n");
    run(yaml, {});
    const auto shipped = source_dir() / "pipelines/seeds_grid.yaml";
    const std::string input = "vars.seeds=" + file.string(), image = "vars.image=" + (dir / "dirty.fits").string();
    run(shipped, {input, image, "vars.grid=" + (dir / "tiled.npy").string()});
    run(shipped, {input, image, "vars.grid=" + (dir / "tiled.npy2").string(), "write.format=seeds"});
    run(shipped, {input, image, "vars.grid=" + (dir / "tiled.grid").string(), "write.format=npy"});

    const int n = ks->geom.grid_size;
    const GridFile serial_npy = read_npy(dir / "serial.npy", n), serial = read_expected_output(dir / "serial.grid", n);
    const GridFile tiled_npy = read_npy(dir / "tiled.grid", n), tiled = read_expected_output(dir / "tiled.npy2", n);
    EXPECT_TRUE(serial_npy.cells == serial.cells);
    // The three grid.tiled runs (format by extension or by `format`) agree to float rounding only:
    // thread scheduling orders the central box's sums, so not bit for bit.
    auto as_double = [](const std::vector<cfloat>& v) { return std::vector<cdouble>(v.begin(), v.end()); };
    EXPECT_LT(relative_frobenius(tiled_npy.cells, as_double(tiled.cells)), 1e-6);
    EXPECT_EQ(read_file(dir / "tiled.npy").size(), read_file(dir / "tiled.grid").size());
    EXPECT_LT(relative_frobenius(read_npy(dir / "tiled.npy", n).cells, as_double(tiled_npy.cells)), 1e-6);
    for (const GridFile* g : {&serial, &tiled}) {
      SCOPED_TRACE(g == &serial ? "grid.serial" : "grid.tiled");
      EXPECT_LT(relative_frobenius(g->cells, ref.cells), 1e-5);
      EXPECT_NEAR(g->norm, ref.norm, 1e-9 * std::abs(ref.norm));
      EXPECT_EQ(g->skipped, ref.skipped);
    }
    std::vector<cdouble> serial_cells(serial.cells.begin(), serial.cells.end());
    EXPECT_LT(relative_frobenius(tiled.cells, serial_cells), 1e-5);
    EXPECT_NEAR(tiled.norm, serial.norm, 1e-12 * serial.norm);  // double sums in another order
    EXPECT_TRUE(std::filesystem::exists(dir / "dirty.fits"));
  }
}

TEST_F(SeedsFile, ImageSizeIsAParameter) {
  std::mt19937_64 rng(3);
  auto ks = random_kernel_stack(rng, 2, 2, 4, 90);
  const auto file = dir / "data.seeds";
  write_file(file, seeds_bytes(*ks, ks->half_size(0) + ks->half_size(1), *make_block(*ks, random_vis(rng, *ks, 10))));
  for (auto [asked, expect] : {std::pair{0, 76}, {40, 40}, {90, 90}}) {
    StageHarness h(io_read_seeds::spec(), "cpu", io_read_seeds::decl, {.path = file, .image_size = asked});
    h.run_source();
    EXPECT_EQ(h.output<KernelStack>("kernels")->geom.image_size, expect) << "image_size " << asked;
  }
  EXPECT_THROW(StageHarness(io_read_seeds::spec(), "cpu", io_read_seeds::decl, {.path = file, .image_size = 92}),
               InputError);
}

// io.write_seeds: the tiny preset and kernels.wproj's stack written in the format and read back
// grid exactly as they did before (grid.serial, same order, same kernels bit for bit, read in the
// blocks they were written in: grid.serial's float sums depend on the block boundaries), and as
// grid.tiled does through the shipped pipeline.
TEST_F(SeedsFile, WrittenDataGridAsBefore) {
  const auto file = dir / "sim.seeds";
  const std::string writer_yaml =
      "schema: uvflow/1\nstages:\n"
      "  - {id: sim, type: io.simulate, params: {preset: tiny, dumps_per_block: 3}}\n"
      "  - {id: kernels, type: kernels.wproj, params: {image_size: 64, cell_arcsec: 400, cache_dir: ''}, in: {info: sim}}\n"
      "  - {id: write, type: io.write_seeds, params: {path: " + file.string() + "}, in: {vis: sim.vis, kernels: kernels}}\n"
      "  - {id: grid, type: grid.serial, in: {vis: sim.vis, kernels: kernels}}\n"
      "  - {id: out, type: io.write_grid, params: {path: " + (dir / "direct.grid").string() + "}, in: {grid: grid}}\n";
  run(dir.write("write.yaml", writer_yaml), {});
  const std::string reader_yaml =
      "schema: uvflow/1\nstages:\n"
      "  - {id: vis, type: io.read_seeds, params: {path: " + file.string() + ", image_size: 64, block_size: 6048}}  # 3 dumps, as written\n"
      "  - {id: grid, type: grid.serial, in: {vis: vis.vis, kernels: vis.kernels}}\n"
      "  - {id: out, type: io.write_grid, params: {path: " + (dir / "back.grid").string() + "}, in: {grid: grid}}\n";
  run(dir.write("read.yaml", reader_yaml), {});
  run(source_dir() / "pipelines/seeds_grid.yaml", {"vars.seeds=" + file.string(), "vars.npix=64",
                                                   "vars.grid=" + (dir / "tiled.grid").string(),
                                                   "vars.image=" + (dir / "dirty.fits").string()});
  const std::string direct = read_file(dir / "direct.grid");
  ASSERT_GT(direct.size(), 16u);
  std::int32_t n;
  std::memcpy(&n, direct.data() + 12, 4);
  const GridFile before = read_expected_output(dir / "direct.grid", n), back = read_expected_output(dir / "back.grid", n),
                 tiled = read_expected_output(dir / "tiled.grid", n);
  EXPECT_LT(relative_frobenius(back.cells, std::vector<cdouble>(before.cells.begin(), before.cells.end())), 1e-5);
  EXPECT_EQ(back.norm, before.norm);
  EXPECT_TRUE(read_file(dir / "back.grid") == direct) << "the grid of the file differs from the grid of the data";
  EXPECT_LT(relative_frobenius(tiled.cells, std::vector<cdouble>(before.cells.begin(), before.cells.end())), 1e-5);
  StageHarness h(io_read_seeds::spec(), "cpu", io_read_seeds::decl, {.path = file});
  h.run_source();
  EXPECT_EQ(h.output<VisSetInfo>("info")->obs->total_visibilities, 16128);
}

// The shipped pair: pipelines/simulate_to_seeds.yaml writes what pipelines/seeds_grid.yaml reads.
TEST_F(SeedsFile, ShippedPipelinesRunTogether) {
  const std::string file = "vars.seeds=" + (dir / "tiny.seeds").string();
  run(source_dir() / "pipelines/simulate_to_seeds.yaml", {file, "kernels.cache_dir="});
  run(source_dir() / "pipelines/seeds_grid.yaml", {file, "vars.npix=256", "vars.grid=" + (dir / "g.grid").string(),
                                                   "write.format=seeds", "vars.image=" + (dir / "dirty.fits").string()});
  const GridFile g = read_expected_output(dir / "g.grid", 320);  // wproj's grid for 256 pixels
  EXPECT_EQ(g.skipped, 0);
  EXPECT_GT(g.norm, 0);
  EXPECT_TRUE(std::filesystem::exists(dir / "dirty.fits"));
}

// ------------------------------------------------------------------------------------- bad input

TEST_F(SeedsFile, BadFilesAreInputErrorsNamingTheField) {
  std::mt19937_64 rng(7);
  auto ks = random_kernel_stack(rng, 3, 3, 4, 32);
  const int P = ks->planes;
  int widest = 0;
  for (int p = 0; p < P; ++p) widest = std::max(widest, ks->half_size(p));
  const auto good = seeds_bytes(*ks, widest, *make_block(*ks, random_vis(rng, *ks, 100)));
  const std::size_t o_at = 4 + 4 * std::size_t(P), csh_at = o_at + 4, kernels_at = csh_at + 4,
                    n_at = kernels_at + std::size_t(P) * widest * widest * 8, trailer_at = good.size() - 20;
  struct Case {
    std::string what, field;
    std::function<void(std::string&)> change;
  };
  const std::vector<Case> cases = {
      {"empty", "num_w_planes", [](std::string& s) { s.clear(); }},
      {"2 bytes", "num_w_planes", [](std::string& s) { s.resize(2); }},
      {"cut in the supports", "support", [](std::string& s) { s.resize(6); }},
      {"cut before oversample", "oversample", [&](std::string& s) { s.resize(o_at + 2); }},
      {"cut in the kernels", "kernels", [&](std::string& s) { s.resize(kernels_at + 100); }},
      {"cut in the visibilities", "num_vis", [&](std::string& s) { s.resize(n_at + 4 + 1000); }},
      {"cut in the trailer", "num_vis", [](std::string& s) { s.pop_back(); }},
      {"a byte too many", "num_vis", [](std::string& s) { s.push_back(0); }},
      {"negative num_vis", "num_vis", [&](std::string& s) { patch(s, n_at, std::int32_t(-5)); }},
      {"num_vis one too many", "num_vis", [&](std::string& s) { patch(s, n_at, std::int32_t(101)); }},
      {"huge num_vis", "num_vis", [&](std::string& s) { patch(s, n_at, std::int32_t(2147483647)); }},
      {"no planes", "num_w_planes", [](std::string& s) { patch(s, 0, std::int32_t(0)); }},
      {"negative planes", "num_w_planes", [](std::string& s) { patch(s, 0, std::int32_t(-3)); }},
      {"huge planes", "num_w_planes", [](std::string& s) { patch(s, 0, std::int32_t(1 << 30)); }},
      {"negative support", "support[2]", [](std::string& s) { patch(s, 12, std::int32_t(-1)); }},
      {"odd oversample", "oversample", [&](std::string& s) { patch(s, o_at, std::int32_t(3)); }},
      {"kernels too small", "conv_size_half", [&](std::string& s) { patch(s, csh_at, std::int32_t(2)); }},
      {"huge kernels", "kernels", [&](std::string& s) { patch(s, csh_at, std::int32_t(1 << 30)); }},
      {"zero cell", "cell_size_rad", [&](std::string& s) { patch(s, trailer_at, 0.0); }},
      {"negative w_scale", "w_scale", [&](std::string& s) { patch(s, trailer_at + 8, -1.0); }},
      {"odd grid", "grid_size", [&](std::string& s) { patch(s, trailer_at + 16, std::int32_t(31)); }},
      {"grid smaller than a footprint", "grid_size", [&](std::string& s) { patch(s, trailer_at + 16, std::int32_t(2)); }},
  };
  const auto file = dir / "bad.seeds";
  write_file(file, good);
  EXPECT_NO_THROW(StageHarness(io_read_seeds::spec(), "cpu", io_read_seeds::decl, {.path = file}));
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    std::string bytes = good;
    k.change(bytes);
    write_file(file, bytes);
    try {
      StageHarness h(io_read_seeds::spec(), "cpu", io_read_seeds::decl, {.path = file});
      ADD_FAILURE() << "no error";
    } catch (const InputError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(file.string()), std::string::npos) << msg;
      EXPECT_NE(msg.find(k.field), std::string::npos) << msg;
    }
    // describe() runs while planning: it must leave the error to prepare().
    EXPECT_TRUE(io_read_seeds::describe_outputs({.path = file}, {}).empty());
  }
}

}  // namespace
