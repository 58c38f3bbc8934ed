// Uniform and Briggs weighting in a distributed run: each rank's uvw.weight_density has summed its
// share of the visibilities; every rank needs the whole density before it weights any of them.
#pragma once

#include <cstdint>

#include "runtime/payloads/weights.hpp"
#include "runtime/stage_decl.hpp"

namespace uvflow::mpi_reduce_density {

inline constexpr In<WeightDensity> density_in{
    .name = "density", .arity = Arity::once, .residency = Residency::host,
    .doc = "this rank's uvw.weight_density, over its share of the visibilities"};
inline constexpr Out<WeightDensity> density_out{
    .name = "density", .arity = Arity::once, .residency = Residency::host,
    .doc = "on every rank: the density of all the visibilities (W_k and the sum of the weights summed over the ranks, "
           "the sum of W_k^2 of the sum)"};

struct Params {
  std::int64_t chunk_mb = 64;
};

inline const StageDecl<Params> decl{
    .type = "mpi.reduce_density",
    .summary = "sum the weight densities of every MPI rank, onto every rank (uniform and Briggs weighting under mpirun)",
    .doc = "In a run of N MPI ranks (docs/distributed.md) each rank's uvw.weight_density has seen only that rank's "
           "share of the visibilities, but uniform and Briggs weights depend on every visibility's. This stage sums "
           "the per-cell weights W_k and the sum of the weights over the ranks (MPI_Allreduce, in chunks of at most "
           "chunk_mb megabytes) and recomputes the sum over cells of W_k^2 from the sum, so that uvw.weighting on "
           "every rank weights its share exactly as one process weights everything. In a run of one process the "
           "density passes through unchanged (nothing is copied). Sums are in double: the weights agree with one "
           "process's to rounding (tests/mpi_test.sh).",
    .inputs = {density_in},
    .outputs = {density_out},
    .params = {{&Params::chunk_mb,
                {.name = "chunk_mb", .unit = "MB", .min = 1.0, .max = 2047.0,
                 .doc = "the largest piece of the density one MPI_Allreduce sums"}}},
    .concurrency = Concurrency::serial,
};

StageSpec spec();

}  // namespace uvflow::mpi_reduce_density
