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

PrunedFft::PrunedFft(cfloat* buf, int n, int sign, Bands rows, Bands cols, unsigned flags)
    : buf_(buf), n_(n), sign_(sign), rows_(std::move(rows)), cols_(std::move(cols)) {
  // Planned on scratch: FFTW_MEASURE overwrites its arrays. Rows lie at any multiple of 8 bytes.
  auto scratch = alloc(std::size_t(n) * kChunk);
  auto* p = as_fftw(scratch.get());
  row_ = plan_or_throw(
      1, [&] { return fftwf_plan_many_dft(1, &n, 1, p, nullptr, 1, n, p, nullptr, 1, n, sign, flags | FFTW_UNALIGNED); },
      "the FFT along u");
  col_ = plan_or_throw(
      1, [&] { return fftwf_plan_many_dft(1, &n, kChunk, p, nullptr, 1, n, p, nullptr, 1, n, sign, flags); },
      "the FFT along v");
}

void PrunedFft::run() const {
  if (sign_ == FFTW_FORWARD) run_rows(), run_cols();
  else run_cols(), run_rows();
}

void PrunedFft::run_rows() const {
  for (auto [a, b] : rows_)
    tbb::parallel_for(a, b, [&](int r) {
      auto* row = as_fftw(buf_ + std::size_t(r) * n_);
      fftwf_execute_dft(row_.get(), row, row);
    });
}

void PrunedFft::run_cols() const {
  const std::size_t n = n_;
  // A thread's chunk buffer serves all its chunks: allocated per chunk, fresh pages were zeroed by
  // the kernel each time.
  tbb::enumerable_thread_specific<Buffer> scratch([n] { return alloc(n * kChunk); });
  for (auto [a, b] : cols_)
    tbb::parallel_for(0, (b - a + kChunk - 1) / kChunk, [&](int chunk) {
      const int c0 = a + chunk * kChunk, nc = std::min(kChunk, b - c0);
      cfloat* tmp = scratch.local().get();
      for (std::size_t r = 0; r < n; ++r)
        for (int c = 0; c < kChunk; ++c) tmp[c * n + r] = c < nc ? buf_[r * n + c0 + c] : cfloat(0);
      fftwf_execute_dft(col_.get(), as_fftw(tmp), as_fftw(tmp));
      for (std::size_t r = 0; r < n; ++r)
        for (int c = 0; c < nc; ++c) buf_[r * n + c0 + c] = tmp[c * n + r];
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
