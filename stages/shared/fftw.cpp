#include "stages/shared/fftw.hpp"

#include <oneapi/tbb/enumerable_thread_specific.h>
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <new>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>

#include "runtime/error.hpp"

namespace uvflow::fftw {
namespace {

// FFTW hands each parallel loop of a multi-threaded plan to this callback; oneTBB runs the jobs.
void tbb_parallel_loop(void* (*work)(char*), char* jobdata, std::size_t elsize, int njobs, void*) {
  tbb::parallel_for(0, njobs, [&](int i) { work(jobdata + elsize * std::size_t(i)); });
}

std::mutex& planner_mutex() {
  static std::mutex m;
  return m;
}

// Called with the lock held: FFTW's thread support must be set up before the first plan.
void init_threads_locked() {
  static bool done = false;
  if (done) return;
  if (!fftwf_init_threads()) throw std::runtime_error("FFTW: fftwf_init_threads failed");
  fftwf_threads_set_callback(tbb_parallel_loop, nullptr);
  done = true;
}

}  // namespace

int tbb_threads() {
  return std::min(tbb::this_task_arena::max_concurrency(),
                  int(tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism)));
}

void PlanDeleter::operator()(fftwf_plan p) const {
  std::lock_guard lk(planner_mutex());
  fftwf_destroy_plan(p);
}

Plan plan(int threads, const std::function<fftwf_plan()>& make) {
  std::lock_guard lk(planner_mutex());
  init_threads_locked();
  fftwf_plan_with_nthreads(threads > 0 ? threads : tbb_threads());
  return Plan(make());
}

Plan plan_or_throw(int threads, const std::function<fftwf_plan()>& make, const char* what) {
  Plan p = plan(threads, make);
  if (!p) throw std::runtime_error(std::string("FFTW could not plan ") + what);
  return p;
}

bool import_wisdom(const std::filesystem::path& file) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec)) return false;
  std::lock_guard lk(planner_mutex());
  // Wisdom carries a hash of the planner's solvers, which the thread support adds to: wisdom
  // exported after the first plan is refused by a planner that has not been set up the same way.
  init_threads_locked();
  return fftwf_import_wisdom_from_filename(file.c_str()) != 0;
}

bool export_wisdom(const std::filesystem::path& file) {
  std::string wisdom;
  {
    std::lock_guard lk(planner_mutex());
    char* w = fftwf_export_wisdom_to_string();
    if (!w) return false;
    wisdom = w;
    std::free(w);
  }
  {  // Unchanged (every plan came from it): nothing to write.
    std::ifstream in(file, std::ios::binary);
    std::stringstream old;
    old << in.rdbuf();
    if (in && old.str() == wisdom) return true;
  }
  std::error_code ec;
  if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path(), ec);
  std::random_device rd;
  auto tmp = file;
  tmp += ".tmp-" + std::to_string(getpid()) + "-" + std::to_string(rd());
  bool ok;
  {
    std::ofstream out(tmp, std::ios::binary);
    out << wisdom;
    out.close();
    ok = bool(out);
  }
  if (ok) std::filesystem::rename(tmp, file, ec);
  if (ok && !ec) return true;
  std::filesystem::remove(tmp, ec);
  return false;
}

Buffer alloc(std::size_t n) {
  auto* p = reinterpret_cast<cfloat*>(fftwf_alloc_complex(n));
  if (!p && n) throw OutOfMemory(n * sizeof(cfloat), "an FFTW buffer of " + std::to_string(n) + " complex values");
  return Buffer(p);
}

Bands wrapped(int lo, int hi, int n) {
  if (hi < lo) return {};
  const int a = (lo % n + n) % n;
  if (hi - lo + 1 >= n) return a == 0 ? Bands{{0, n}} : Bands{{0, a}, {a, n}};  // the whole axis, cut where lo is
  const int b = (hi % n + n) % n;
  if (a <= b) return {{a, b + 1}};
  return {{0, b + 1}, {a, n}};
}

PrunedFft::PrunedFft(cfloat* buf, int nx, int ny, int sign, Bands rows, Bands cols, unsigned flags)
    : buf_(buf), nx_(nx), ny_(ny), sign_(sign), flags_(flags), rows_(std::move(rows)), cols_(std::move(cols)) {
  // Planned on scratch: FFTW_MEASURE overwrites its arrays. Rows lie at any multiple of 8 bytes.
  auto scratch = alloc(std::size_t(std::max(nx, ny)) * kChunk);
  auto* p = as_fftw(scratch.get());
  row_ = plan_or_throw(
      1, [&] { return fftwf_plan_many_dft(1, &nx, 1, p, nullptr, 1, nx, p, nullptr, 1, nx, sign, flags | FFTW_UNALIGNED); },
      "the FFT along u");
  col_ = plan_or_throw(
      1, [&] { return fftwf_plan_many_dft(1, &ny, kChunk, p, nullptr, 1, ny, p, nullptr, 1, ny, sign, flags); },
      "the FFT along v");
}

void PrunedFft::run() const {
  if (sign_ == FFTW_FORWARD) run_rows(buf_, row_, false), run_cols(nullptr, nullptr);
  else run_cols(nullptr, nullptr), run_rows(buf_, row_, false);
}

void PrunedFft::run(const cfloat* src, const ColumnSink& sink) const {
  if (sign_ != FFTW_FORWARD) throw std::logic_error("PrunedFft::run(src, sink) transforms forward only");
  int nx = nx_;
  auto scratch = alloc(2 * std::size_t(nx));
  auto *in = as_fftw(scratch.get()), *out = as_fftw(scratch.get() + nx);
  // An out-of-place plan (c2c: FFTW leaves its input as it was).
  const Plan rows = plan_or_throw(
      1, [&] { return fftwf_plan_many_dft(1, &nx, 1, in, nullptr, 1, nx, out, nullptr, 1, nx, sign_, flags_ | FFTW_UNALIGNED); },
      "the FFT along u");
  run_rows(src, rows, false);
  run_cols(&sink, nullptr);
}

void PrunedFft::run(const ColumnSource& source) const {
  if (sign_ != FFTW_BACKWARD) throw std::logic_error("PrunedFft::run(source) transforms backward only");
  run_cols(nullptr, &source);
  run_rows(buf_, row_, true);
}

void PrunedFft::run_rows(const cfloat* src, const Plan& plan, bool zero_other_columns) const {
  for (auto [a, b] : rows_)
    tbb::parallel_for(a, b, [&](int r) {
      cfloat* row = buf_ + std::size_t(r) * nx_;
      if (zero_other_columns) {
        int c = 0;
        for (auto [c0, c1] : cols_) std::fill(row + c, row + c0, cfloat(0)), c = c1;
        std::fill(row + c, row + nx_, cfloat(0));
      }
      fftwf_execute_dft(plan.get(), as_fftw(const_cast<cfloat*>(src) + (row - buf_)), as_fftw(row));
    });
}

void PrunedFft::run_cols(const ColumnSink* sink, const ColumnSource* source) const {
  const std::size_t nx = nx_, ny = ny_;
  // Forward, only the rows in `rows` hold data; backward, every row of the columns does.
  const Bands all{{0, ny_}}, &from = sign_ == FFTW_FORWARD ? rows_ : all;
  // A thread's chunk buffer serves all its chunks: allocated per chunk, fresh pages were zeroed by
  // the kernel each time.
  tbb::enumerable_thread_specific<Buffer> scratch([ny] { return alloc(ny * kChunk); });
  for (auto [a, b] : cols_)
    tbb::parallel_for(0, (b - a + kChunk - 1) / kChunk, [&](int chunk) {
      const int c0 = a + chunk * kChunk, nc = std::min(kChunk, b - c0);
      cfloat* tmp = scratch.local().get();
      if (source) {
        (*source)(c0, nc, tmp);
      } else {
        for (int c = 0; c < nc; ++c) {  // rows without data are zero
          cfloat* col = tmp + c * ny;
          std::size_t r = 0;
          for (auto [r0, r1] : from) std::fill(col + r, col + r0, cfloat(0)), r = r1;
          std::fill(col + r, col + ny, cfloat(0));
        }
        for (auto [r0, r1] : from)
          for (std::size_t r = r0; r < std::size_t(r1); ++r)
            for (int c = 0; c < nc; ++c) tmp[c * ny + r] = buf_[r * nx + c0 + c];
      }
      std::fill(tmp + nc * ny, tmp + kChunk * ny, cfloat(0));  // past the band's last column
      fftwf_execute_dft(col_.get(), as_fftw(tmp), as_fftw(tmp));
      if (sink) {
        (*sink)(c0, nc, tmp);
        return;
      }
      for (std::size_t r = 0; r < ny; ++r)
        for (int c = 0; c < nc; ++c) buf_[r * nx + c0 + c] = tmp[c * ny + r];
    });
}

}  // namespace uvflow::fftw

// FFTW checks its internal allocations (planner tables, twiddles, plan buffers) with an assertion
// that prints "fftw: alloc.c:NN: assertion failed: p" and aborts. This definition takes the place
// of libfftw3f's own (an exported symbol it calls through the PLT, so the process's first
// definition, libuvflow's, is the one called): an allocation failure becomes OutOfMemory, which
// unwinds out of FFTW (its C frames have unwind tables on x86-64; what FFTW had allocated in that
// call is lost, and the run fails with the error). Any other assertion is a bug: report and abort.
extern "C" void fftwf_assertion_failed(const char* s, int line, const char* file) {
  if (std::strstr(file, "alloc.c")) throw uvflow::OutOfMemory(0, "FFTW's plan tables or buffers");
  std::fprintf(stderr, "fftw: %s:%d: assertion failed: %s\n", file, line, s);
  std::abort();
}
