// The one list of built-in stages: adding a stage means adding its spec here.
#include "runtime/registry.hpp"
#include "stages/fft/grid_to_image.hpp"
#include "stages/grid/atomic.hpp"
#include "stages/grid/serial.hpp"
#include "stages/grid/tiled.hpp"
#include "stages/image/column_gain.hpp"
#include "stages/image/grid_correct.hpp"
#include "stages/image/psf.hpp"
#include "stages/image/psf_convolve.hpp"
#include "stages/io/read_fits.hpp"
#include "stages/io/read_ms.hpp"
#include "stages/io/simulate.hpp"
#include "stages/io/simulate_frames.hpp"
#include "stages/io/write_fits.hpp"
#include "stages/io/write_ms.hpp"
#include "stages/io/write_png.hpp"
#include "stages/kernels/wproj.hpp"
#include "stages/tiles/bucket_sort.hpp"
#include "stages/tiles/count.hpp"
#include "stages/transfer/transfer.hpp"
#include "stages/uvw/bounding_box.hpp"
#include "stages/uvw/w_sort.hpp"
#include "stages/uvw/weight_density.hpp"
#include "stages/uvw/weighting.hpp"

namespace uvflow {

void register_builtin_stages(Registry& r) {
  r.add(transfer_to_device_spec());
  r.add(transfer_to_host_spec());
  r.add(grid_atomic_spec());
  r.add(grid_serial_spec());
  r.add(grid_tiled_spec());
  r.add(uvw_w_sort_spec());
  r.add(uvw_bounding_box_spec());
  r.add(uvw_weight_density_spec());
  r.add(uvw_weighting_spec());
  r.add(tiles_count_spec());
  r.add(tiles_bucket_sort_spec());
  r.add(io_simulate_spec());
  r.add(io_read_ms_spec());
  r.add(io_write_ms_spec());
  r.add(write_fits_spec());
  r.add(write_png_spec());
  r.add(kernels_wproj_spec());
  r.add(fft_grid_to_image_spec());
  r.add(image_grid_correct_spec());
  r.add(read_fits_spec());
  r.add(simulate_frames_spec());
  r.add(psf_spec());
  r.add(column_gain_spec());
  r.add(psf_convolve_spec());
}

}  // namespace uvflow
