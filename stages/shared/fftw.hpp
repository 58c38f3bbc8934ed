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

}  // namespace uvflow::fftw
