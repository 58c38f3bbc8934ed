// uvflow built without MPI: every process is rank 0 of 1, and a collective over one rank is a copy.
#include <algorithm>

#include "runtime/dist.hpp"

namespace uvflow::dist {

bool compiled() { return false; }
int rank() { return 0; }
int size() { return 1; }
int local_rank() { return 0; }
int local_size() { return 1; }
Session::Session(int&, char**&) {}
Session::~Session() = default;
int Session::end(int rc, bool) { return rc; }
void reduce_to_root(const float* in, float* out, std::size_t n, std::size_t) { std::copy(in, in + n, out); }
void reduce_to_root(const double* in, double* out, std::size_t n, std::size_t) { std::copy(in, in + n, out); }
void all_reduce(const double* in, double* out, std::size_t n, Op, std::size_t) { std::copy(in, in + n, out); }
void all_reduce(const std::int64_t* in, std::int64_t* out, std::size_t n, Op) { std::copy(in, in + n, out); }
std::vector<std::string> gather(const std::string& text) { return {text}; }
void barrier() {}
double communication_seconds() { return 0; }

}  // namespace uvflow::dist
