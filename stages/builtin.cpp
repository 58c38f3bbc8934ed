// The one list of built-in stages: adding a stage means adding its spec here.
#include "stages/builtin.hpp"
#include "stages/deconv/clark.hpp"
#include "stages/deconv/hogbom.hpp"
#include "stages/deconv/restore.hpp"
#include "stages/degrid/serial.hpp"
#include "stages/degrid/wproj.hpp"
#include "stages/degrid/wstack.hpp"
#include "stages/fft/grid_to_image.hpp"
#include "stages/fft/image_to_grid.hpp"
#include "stages/grid/atomic.hpp"
#include "stages/grid/moving_window.hpp"
#include "stages/grid/serial.hpp"
#include "stages/grid/tiled.hpp"
#include "stages/grid/wstack.hpp"
#include "stages/image/column_gain.hpp"
#include "stages/image/grid_correct.hpp"
#include "stages/image/psf.hpp"
#include "stages/image/psf_convolve.hpp"
#include "stages/image/zeros.hpp"
#include "stages/io/collect.hpp"
#include "stages/io/image_arrays.hpp"
#include "stages/io/read_fits.hpp"
#include "stages/io/read_image.hpp"
#include "stages/io/read_ms.hpp"
#include "stages/io/read_seeds.hpp"
#include "stages/io/simulate.hpp"
#include "stages/io/simulate_frames.hpp"
#include "stages/io/vis_arrays.hpp"
#include "stages/io/write_fits.hpp"
#include "stages/io/write_grid.hpp"
#include "stages/io/write_ms.hpp"
#include "stages/io/write_png.hpp"
#include "stages/io/write_seeds.hpp"
#include "stages/kernels/wproj.hpp"
#include "stages/mpi/reduce_density.hpp"
#include "stages/mpi/reduce_grid.hpp"
#include "stages/tiles/bucket_sort.hpp"
#include "stages/tiles/count.hpp"
#include "stages/transfer/transfer.hpp"
#include "stages/uvw/bounding_box.hpp"
#include "stages/uvw/w_sort.hpp"
#include "stages/uvw/weight_density.hpp"
#include "stages/uvw/weighting.hpp"
#include "stages/vis/subtract.hpp"
#include "stages/vis/unit.hpp"

namespace uvflow {

void register_builtin_stages(Registry& r) {
  r.add(transfer_to_device::spec());
  r.add(transfer_to_host::spec());
  r.add(grid_atomic::spec());
  r.add(grid_moving_window::spec());
  r.add(grid_serial::spec());
  r.add(degrid_serial::spec());
  r.add(degrid_wproj::spec());
  r.add(degrid_wstack::spec());
  r.add(grid_wstack::spec());
  r.add(fft_image_to_grid::spec());
  r.add(vis_subtract::spec());
  r.add(vis_unit::spec());
  r.add(deconv_hogbom::spec());
  r.add(deconv_clark::spec());
  r.add(deconv_restore::spec());
  r.add(grid_tiled::spec());
  r.add(uvw_w_sort::spec());
  r.add(uvw_bounding_box::spec());
  r.add(uvw_weight_density::spec());
  r.add(uvw_weighting::spec());
  r.add(mpi_reduce_density::spec());
  r.add(mpi_reduce_grid::spec());
  r.add(tiles_count::spec());
  r.add(tiles_bucket_sort::spec());
  r.add(io_simulate::spec());
  r.add(io_read_ms::spec());
  r.add(io_read_seeds::spec());
  r.add(io_read_image::spec());
  r.add(io_write_ms::spec());
  r.add(io_write_fits::spec());
  r.add(io_write_grid::spec());
  r.add(io_write_png::spec());
  r.add(io_write_seeds::spec());
  r.add(kernels_wproj::spec());
  r.add(fft_grid_to_image::spec());
  r.add(image_grid_correct::spec());
  r.add(io_read_fits::spec());
  r.add(io_simulate_frames::spec());
  r.add(image_psf::spec());
  r.add(image_column_gain::spec());
  r.add(image_psf_convolve::spec());
  r.add(image_zeros::spec());
  r.add(io_vis_arrays::spec());
  r.add(io_image_arrays::spec());
  r.add(io_collect::spec());
}

}  // namespace uvflow
