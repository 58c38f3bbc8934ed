// A source's `share` parameter: in a run of several MPI ranks (runtime/dist.hpp), which items of
// its stream this rank makes. Item i of the whole stream goes to rank i mod N (round-robin, so that
// every rank gets early and late blocks alike); each rank still numbers the items it makes 0, 1, ...
// (the executor's tokens), and labels them with their index in the whole stream.
#pragma once

#include <cstdint>

#include "runtime/dist.hpp"

namespace uvflow {

class Share {
 public:
  // `split` false: every rank makes the whole stream (one process does in any case).
  explicit Share(bool split = false) : Share(split ? dist::rank() : 0, split ? dist::size() : 1) {}
  Share(int rank, int size) : rank_(rank), size_(size) {}  // rank `rank` of `size`
  // How many of a stream of n items this rank makes.
  std::int64_t count(std::int64_t n) const { return n > rank_ ? (n - rank_ + size_ - 1) / size_ : 0; }
  // The index in the whole stream of this rank's item `local`.
  std::int64_t global(std::int64_t local) const { return rank_ + local * size_; }
  bool mine(std::int64_t global) const { return global % size_ == rank_; }
  bool split() const { return size_ > 1; }

 private:
  int rank_, size_;
};

}  // namespace uvflow
