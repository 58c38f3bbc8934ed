// The weighting grid and the checks that uvw.weight_density and uvw.weighting share, both backends.
#pragma once

#include <memory>

#include "runtime/payloads/kernels.hpp"
#include "runtime/payloads/vis.hpp"
#include "runtime/payloads/weights.hpp"

namespace uvflow {
namespace weighting {

// WSClean's padded image size: ceil(image_size * padding), rounded up to a multiple of 4.
int wsclean_padded_size(int image_size, double padding);
// The weighting grid for the image of `ks` (its image_size and cell).
WeightGridGeometry weight_grid(const KernelStack& ks, double padding);
// A zeroed density in host memory (pinned when it feeds a device stage).
std::shared_ptr<WeightDensity> zero_density(const WeightGridGeometry& g, bool pinned);
// Throws, naming the block, unless uu, vv and weight have one value per visibility and lie at
// `where`. Reads no array contents.
void check_block(const VisBlock& vis, Location where);
// Throws unless the density's arrays match its geometry and lie at `where`.
void check_density(const WeightDensity& d, Location where);
// The sum over cells of W_k^2 of a host density (its totals[1]).
double sum_of_squares(const WeightDensity& d);
// Throws unless the block and the density come from the same visibility set (the origin and the
// visibility count of their observations), e.g. when a pipeline's two readers were given
// different files.
void check_same_data(const VisBlock& vis, const WeightDensity& d);

}  // namespace weighting
}  // namespace uvflow
