// FFTW (single precision) for the CPU stages that transform. FFTW executes plans thread-safely but
// its planner, plan destruction and wisdom are process-wide state, and pipeline stages prepare
// concurrently: every planner call goes through this file, under one lock. Multi-threaded plans run
// their threads as oneTBB tasks (FFTW's threads callback), sharing TBB's workers.
#pragma once

#include <fftw3.h>

#include <cstddef>
#include <filesystem>
#include <functional>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "runtime/buffer.hpp"

namespace uvflow::fftw {

struct PlanDeleter {
  void operator()(fftwf_plan p) const;
};
using Plan = std::unique_ptr<std::remove_pointer_t<fftwf_plan>, PlanDeleter>;

// Threads oneTBB runs here (the arena's concurrency within any global_control limit).
int tbb_threads();

// Runs `make` (one fftwf_plan_* call) under the planner lock, its plan using `threads` threads
// (0: tbb_threads()). A null result is returned as is: with FFTW_WISDOM_ONLY it means
// no wisdom fits; plan_or_throw() is the caller's check otherwise.
Plan plan(int threads, const std::function<fftwf_plan()>& make);
Plan plan_or_throw(int threads, const std::function<fftwf_plan()>& make, const char* what);

// Wisdom: plans measured once, reused by later runs. Import of a missing or unreadable file
// returns false; export writes nothing when the file already holds this wisdom, else creates the
// folder and writes a temporary file that it renames (concurrent runs never see half a file).
bool import_wisdom(const std::filesystem::path& file);
bool export_wisdom(const std::filesystem::path& file);

// FFTW-aligned complex scratch (SIMD alignment; new-array execution needs the plan's alignment).
struct FreeDeleter {
  void operator()(cfloat* p) const { fftwf_free(p); }
};
using Buffer = std::unique_ptr<cfloat[], FreeDeleter>;
Buffer alloc(std::size_t n);
inline fftwf_complex* as_fftw(cfloat* p) { return reinterpret_cast<fftwf_complex*>(p); }

// Index ranges [first, last) along one axis of a 2-D buffer, ascending and disjoint.
using Bands = std::vector<std::pair<int, int>>;
// The bands of an axis of n that hold the indices lo..hi taken modulo n (two where they wrap), each a
// run of consecutive positions in lo..hi: fft.grid_to_image and fft.image_to_grid take a chunk of a
// band's columns as a run of pixels. So an axis held whole from lo != 0 is two bands, cut at lo.
Bands wrapped(int lo, int hi, int n);

// A 2-D FFT of an nx x ny buffer (ny rows of nx) that transforms only what is read afterwards:
// along u (rows) the rows in `rows`, along v (columns) the columns in `cols`. Forward (gridding): rows
// first, the rows that hold data (the others are zero and never read), then the columns kept.
// Backward (degridding): the columns that hold data first, then the rows read. The result is exact
// where it is read. Single-threaded 1-D plans run on oneTBB tasks: rows in place, columns kChunk
// at a time through a contiguous copy in each thread's scratch, which reads whole cache lines where
// FFTW's own strided plan reads 8 bytes of each (fft.grid_to_image on the el56-82 grid, 18000^2,
// on the 2-core VM: its 4779 rows and the image's 15000 columns in 1.8 s, against 8.0 s with a
// strided plan for the columns; 16 columns a chunk 5 % faster than 8). `flags`: FFTW_ESTIMATE, or
// FFTW_MEASURE for transforms run many times.
class PrunedFft {
 public:
  static constexpr int kChunk = 16;
  PrunedFft(cfloat* buf, int nx, int ny, int sign, Bands rows, Bands cols, unsigned flags);
  // In place: the buffer holds the input, then the result.
  void run() const;
  // Forward, without the passes that fill the buffer and read the result out of it: the rows are
  // transformed from `src` (nx x ny, left as it is) into the buffer, whose other rows are never
  // touched, and each chunk of transformed columns goes to `sink` instead of back into the buffer.
  using ColumnSink = std::function<void(int c0, int nc, const cfloat* values)>;  // values[c * ny + r]
  void run(const cfloat* src, const ColumnSink& sink) const;
  // Backward, without the passes that fill the buffer: each chunk of columns with data comes from
  // `source` (every row), and the buffer needs no initialisation: its other columns are zeroed row
  // by row before the transform along u.
  using ColumnSource = std::function<void(int c0, int nc, cfloat* values)>;  // values[c * ny + r]
  void run(const ColumnSource& source) const;
  // Sinks and sources run in the transform's oneTBB tasks, on chunks of their own, several at once:
  // they must not start oneTBB work themselves (a thread's chunk buffer would be reused under them).

 private:
  void run_rows(const cfloat* src, const Plan& plan, bool zero_other_columns) const;
  void run_cols(const ColumnSink* sink, const ColumnSource* source) const;
  cfloat* buf_;
  int nx_, ny_, sign_;
  unsigned flags_;
  Bands rows_, cols_;
  Plan row_, col_;
};

}  // namespace uvflow::fftw
