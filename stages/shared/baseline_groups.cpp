#include "stages/shared/baseline_groups.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>

#include "runtime/error.hpp"

namespace uvflow {

int time_block_keys(const VisBlock& b, std::int64_t time_block, std::uint64_t* keys, const std::string& who) {
  const std::size_t n = b.size();
  const std::string at = who + ": block " + std::to_string(b.index);
  if (b.antenna1.size() != n || b.antenna2.size() != n || b.time.size() != n || b.channel.size() != n)
    throw InputError(at + " has no antenna1, antenna2, time and channel for each visibility (feed it raw blocks "
                          "from io.simulate or io.read_ms, not uvw.w_sort's output)");
  if (n > std::size_t(INT32_MAX))
    throw InputError(at + " holds " + std::to_string(n) + " visibilities; blocks of up to 2^31 - 1 are grouped");
  std::int64_t antennas = 1, channels = 1, dumps = 1;
  for (std::size_t i = 0; i < n; ++i) {
    if (b.antenna1[i] < 0 || b.antenna2[i] < 0 || b.channel[i] < 0)
      throw InputError(at + ", visibility " + std::to_string(i) + ": negative antenna or channel index");
    antennas = std::max<std::int64_t>({antennas, b.antenna1[i] + std::int64_t(1), b.antenna2[i] + std::int64_t(1)});
    channels = std::max<std::int64_t>(channels, b.channel[i] + std::int64_t(1));
    if (i > 0 && b.time[i] != b.time[i - 1]) {
      if (!(b.time[i] > b.time[i - 1]))
        throw InputError(at + ", visibility " + std::to_string(i) + ": time is earlier than the one before it "
                              "(blocks must be in time order)");
      ++dumps;
    }
  }
  const std::uint64_t blocks = std::uint64_t((dumps + time_block - 1) / time_block);
  const unsigned __int128 range = (unsigned __int128)(antennas * antennas) * std::uint64_t(channels) * blocks;
  if (range > UINT64_MAX)
    throw InputError(at + ": " + std::to_string(antennas) + " antennas, " + std::to_string(channels) + " channels and " +
                     std::to_string(blocks) + " time blocks need group keys of more than 64 bits");
  std::int64_t dump = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (i > 0 && b.time[i] != b.time[i - 1]) ++dump;
    const std::uint64_t baseline = std::uint64_t(b.antenna1[i]) * std::uint64_t(antennas) + std::uint64_t(b.antenna2[i]);
    keys[i] = (baseline * std::uint64_t(channels) + std::uint64_t(b.channel[i])) * blocks + std::uint64_t(dump / time_block);
  }
  return std::max(1, int(std::bit_width(std::uint64_t(range - 1))));
}

}  // namespace uvflow
