// io.write_fits and io.write_png: read the files back with cfitsio and libpng.
#include <fitsio.h>
#include <gtest/gtest.h>
#include <png.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <random>

#include "runtime/error.hpp"
#include "runtime/harness.hpp"
#include "runtime/payloads/image.hpp"
#include "stages/io/write_fits.hpp"
#include "stages/io/write_png.hpp"
#include "tests/support/seeds.hpp"
#include "tests/support/temp_dir.hpp"

using namespace uvflow;

namespace {

std::shared_ptr<Image> random_image(int nx, int ny, unsigned seed, bool sky) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g;
  auto img = std::make_shared<Image>();
  img->nx = nx;
  img->ny = ny;
  img->pixels = Array<float>::host(std::size_t(nx) * ny);
  for (auto& p : img->pixels) p = g(rng);
  if (sky) {
    SkyWcs w;
    w.ra_rad = -0.3;  // negative on purpose: CRVAL1 must come out in [0, 360)
    w.dec_rad = -0.6;
    w.cell_rad = 2.0 / 3600 * M_PI / 180;
    w.freq_hz = 1.4e8;
    w.telescope = "SKA1-Low";
    img->wcs = w;
  }
  return img;
}

struct FitsReader {
  fitsfile* f = nullptr;
  int status = 0;
  explicit FitsReader(const std::string& p) { fits_open_file(&f, p.c_str(), READONLY, &status); }
  ~FitsReader() {
    int s = 0;
    if (f) fits_close_file(f, &s);
  }
  double num(const char* k) {
    double v = NAN;
    int s = 0;
    fits_read_key(f, TDOUBLE, k, &v, nullptr, &s);
    EXPECT_EQ(s, 0) << k;
    return v;
  }
  std::string str(const char* k) {
    char v[FLEN_VALUE] = "";
    int s = 0;
    fits_read_key(f, TSTRING, k, v, nullptr, &s);
    EXPECT_EQ(s, 0) << k;
    return v;
  }
};

}  // namespace

TEST(WriteFits, SkyImageRoundTripsWithWsCleanHeader) {
  unsigned seed = unsigned(test::fresh_seed());
  SCOPED_TRACE("seed " + std::to_string(seed));
  test::TempDir dir;
  auto img = random_image(64, 48, seed, true);
  {
    StageHarness h(io_write_fits::spec(), "cpu", {{"path", (dir / "a.fits").string()}});
    h.process({{"image", img}});
    EXPECT_FALSE(std::filesystem::exists(dir / "a.fits")) << "must appear only on commit";
    h.commit_outputs();
  }
  FitsReader r((dir / "a.fits").string());
  ASSERT_EQ(r.status, 0);
  int naxis = 0;
  long naxes[4] = {};
  fits_get_img_dim(r.f, &naxis, &r.status);
  fits_get_img_size(r.f, 4, naxes, &r.status);
  EXPECT_EQ(naxis, 4);
  EXPECT_EQ(naxes[0], 64);
  EXPECT_EQ(naxes[1], 48);
  EXPECT_EQ(r.str("CTYPE1"), "RA---SIN");
  EXPECT_EQ(r.str("CTYPE2"), "DEC--SIN");
  EXPECT_EQ(r.str("CTYPE3"), "FREQ");
  EXPECT_EQ(r.str("CTYPE4"), "STOKES");
  EXPECT_EQ(r.str("BUNIT"), "JY/BEAM");
  EXPECT_DOUBLE_EQ(r.num("CRPIX1"), 33);
  EXPECT_DOUBLE_EQ(r.num("CRPIX2"), 25);
  EXPECT_NEAR(r.num("CRVAL1"), 360 - 0.3 * 180 / M_PI, 1e-9);
  EXPECT_NEAR(r.num("CRVAL2"), -0.6 * 180 / M_PI, 1e-9);
  EXPECT_NEAR(r.num("CDELT1"), -2.0 / 3600, 1e-15);
  EXPECT_NEAR(r.num("CDELT2"), 2.0 / 3600, 1e-15);
  EXPECT_DOUBLE_EQ(r.num("CRVAL3"), 1.4e8);
  EXPECT_EQ(r.str("TELESCOP"), "SKA1-Low");
  std::vector<float> back(64 * 48);
  long first[4] = {1, 1, 1, 1};
  int anynul = 0;
  fits_read_pix(r.f, TFLOAT, first, long(back.size()), nullptr, back.data(), &anynul, &r.status);
  ASSERT_EQ(r.status, 0);
  for (size_t i = 0; i < back.size(); ++i) ASSERT_EQ(back[i], img->pixels[i]) << i;
}

TEST(WriteFits, FrameStreamNeedsIndexInPath) {
  test::TempDir dir;
  {
    StageHarness h(io_write_fits::spec(), "cpu", {{"path", (dir / "f_{index}.fits").string()}});
    for (int i = 0; i < 3; ++i) {
      auto img = random_image(17, 13, 7 + i, false);
      img->index = i;
      h.process({{"image", img}});
    }
    h.commit_outputs();
  }
  for (int i = 0; i < 3; ++i) {
    FitsReader r((dir / ("f_0000" + std::to_string(i) + ".fits")).string());
    EXPECT_EQ(r.status, 0) << i;
    int naxis = 0;
    fits_get_img_dim(r.f, &naxis, &r.status);
    EXPECT_EQ(naxis, 2);
  }
  StageHarness h(io_write_fits::spec(), "cpu", {{"path", (dir / "one.fits").string()}});
  h.process({{"image", random_image(4, 4, 1, false)}});
  EXPECT_THROW(h.process({{"image", random_image(4, 4, 2, false)}}), InputError);  // exit 4: the path does not fit the stream
}

TEST(WritePng, PreviewIsFlippedNorthUpAndStretched) {
  test::TempDir dir;
  auto img = random_image(32, 20, 3, false);
  for (auto& p : img->pixels) p = 0;
  img->pixels[0] = 100;  // bottom-left pixel in image (FITS) order
  {
    StageHarness h(io_write_png::spec(), "cpu",
                   {{"path", (dir / "p.png").string()}, {"stretch", std::string("linear")},
                    {"low_percentile", 0.0}, {"high_percentile", 100.0}});
    h.process({{"image", img}});
    h.commit_outputs();
  }
  png_image pi{};
  pi.version = PNG_IMAGE_VERSION;
  ASSERT_TRUE(png_image_begin_read_from_file(&pi, (dir / "p.png").c_str()));
  pi.format = PNG_FORMAT_GRAY;
  std::vector<png_byte> px(PNG_IMAGE_SIZE(pi));
  ASSERT_TRUE(png_image_finish_read(&pi, nullptr, px.data(), 0, nullptr));
  EXPECT_EQ(pi.width, 32u);
  EXPECT_EQ(pi.height, 20u);
  EXPECT_EQ(px[19 * 32 + 0], 255) << "bottom row of the PNG holds image row 0";
  EXPECT_EQ(px[0], 0);
}

// ---- Outputs, signals and errors (docs/reliability.md)

namespace {

// Runs `f` in a child process as an unprivileged user (root ignores permissions); true when it
// returned true.
template <class F>
bool as_unprivileged(F f) {
  pid_t child = fork();
  if (child == 0) {
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) _exit(2);
    _exit(f() ? 0 : 1);
  }
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

std::string fail_text(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// A link planted at the temporary's old, predictable name (.NAME.harness-PID.tmp) must not make
// the writer overwrite the link's target, nor leave the output as a link.
TEST(WritePng, PlantedLinkIsNotFollowed) {
  test::TempDir dir;
  const auto victim = dir.write("victim.txt", "precious");
  std::filesystem::create_symlink(victim, dir / (".p.png.harness-" + std::to_string(getpid()) + ".tmp"));
  {
    StageHarness h(io_write_png::spec(), "cpu", {{"path", (dir / "p.png").string()}});
    h.process({{"image", random_image(16, 16, 5, false)}});
    h.commit_outputs();
  }
  std::ifstream v(victim);
  std::string text;
  v >> text;
  EXPECT_EQ(text, "precious");
  EXPECT_TRUE(std::filesystem::is_regular_file(std::filesystem::symlink_status(dir / "p.png")));
}

// A full disk: the message says so and names the user's path, not the temporary.
TEST(Writers, FullDiskSaysNoSpaceAndNamesTheUsersPath) {
  test::TempDir dir;
  test::FullDisk disk(dir / "small");
  if (!disk.mounted) GTEST_SKIP() << "cannot mount a small tmpfs here (needs root)";
  const std::string fits = (disk.at / "big.fits").string(), png = (disk.at / "big.png").string();
  auto img = random_image(256, 256, 11, true);  // 256 KiB of float pixels, incompressible for the PNG too
  const std::string fits_error = fail_text([&] {
    StageHarness h(io_write_fits::spec(), "cpu", {{"path", fits}});
    h.process({{"image", img}});
  });
  EXPECT_NE(fits_error.find("No space left on device"), std::string::npos) << fits_error;
  EXPECT_EQ(fits_error.rfind("cannot write " + fits, 0), 0u) << fits_error;
  EXPECT_EQ(fits_error.find(".tmp"), std::string::npos) << fits_error;
  const std::string png_error = fail_text([&] {
    StageHarness h(io_write_png::spec(), "cpu",
                   {{"path", png}, {"stretch", std::string("linear")}, {"low_percentile", 0.0}, {"high_percentile", 100.0}});
    auto big = random_image(1024, 1024, 12, false);
    h.process({{"image", big}});
  });
  EXPECT_NE(png_error.find("No space left on device"), std::string::npos) << png_error;
  EXPECT_EQ(png_error.rfind("cannot write " + png, 0), 0u) << png_error;
  EXPECT_TRUE(std::filesystem::is_empty(disk.at)) << "the temporaries are removed";
}

// A folder the user may not write: "Permission denied", naming the user's path.
TEST(Writers, PermissionDeniedNamesTheUsersPath) {
  test::TempDir dir;
  std::filesystem::create_directory(dir / "ro");
  std::filesystem::permissions(dir.path(), std::filesystem::perms::all);
  std::filesystem::permissions(dir / "ro", std::filesystem::perms::owner_all | std::filesystem::perms::group_read |
                                               std::filesystem::perms::group_exec | std::filesystem::perms::others_read |
                                               std::filesystem::perms::others_exec);
  const std::string path = (dir / "ro" / "a.fits").string();
  EXPECT_TRUE(as_unprivileged([&] {
    const std::string e = fail_text([&] {
      StageHarness h(io_write_fits::spec(), "cpu", {{"path", path}});
      h.process({{"image", random_image(8, 8, 1, false)}});
    });
    if (e != "cannot write " + path + ": Permission denied") std::fprintf(stderr, "message: %s\n", e.c_str());
    return e == "cannot write " + path + ": Permission denied";
  }));
}

// An output path that is an existing folder is refused, with no temporary left in it or beside it.
TEST(Writers, OutputPathThatIsAFolderIsRefused) {
  test::TempDir dir;
  std::filesystem::create_directory(dir / "x.png");
  StageHarness h(io_write_png::spec(), "cpu", {{"path", (dir / "x.png").string()}});
  const std::string e = fail_text([&] { h.process({{"image", random_image(8, 8, 1, false)}}); });
  EXPECT_EQ(e, "output path " + (dir / "x.png").string() + " is an existing folder; name a file in it, or remove it");
  for (auto& f : std::filesystem::directory_iterator(dir.path())) EXPECT_EQ(f.path().filename(), "x.png");
  EXPECT_TRUE(std::filesystem::is_empty(dir / "x.png"));
}
