// Grouping a raw block's visibilities by baseline, channel and time block, as Romein's
// moving-window gridder needs them (001_55d00877663aa4fc.txt, Part II: a baseline's visibilities
// in one block of time steps share one w): the key of each visibility, so that a stable sort by
// key leaves each group contiguous and in time order. Both backends of grid.moving_window sort
// the same keys (the cpu one on the host, the cuda one on the device), so they form the same groups.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/payloads/vis.hpp"

namespace uvflow {

// Writes b.size() keys: ((antenna1 * A + antenna2) * C + channel) * G + dump / time_block, with A
// and C one past the block's largest antenna and channel, dumps counted from the block's first
// time (a new dump wherever the time changes) and G the number of time blocks. Returns the bits a
// radix sort of the keys needs (at least 1). Throws InputError naming `who` and the block unless
// the block has antenna1, antenna2, time and channel for every visibility, its times do not
// decrease (io.simulate's and a time-ordered Measurement Set's order) and the keys fit 64 bits.
int time_block_keys(const VisBlock& b, std::int64_t time_block, std::uint64_t* keys, const std::string& who);

}  // namespace uvflow
