#include "stages/io/write_grid.hpp"

#include <cstdint>
#include <string>

#include "stages/io/seeds_format.hpp"

namespace uvflow::io_write_grid {

std::string format_for(const Params& p) {
  if (p.format != "auto") return p.format;
  return p.path.extension() == ".npy" ? "npy" : "seeds";
}

namespace {

// NPY format 1.0: magic, version, header length, then a Python dict literal padded with spaces to
// a multiple of 64 bytes (numpy's own alignment) and ended by a newline.
void write_npy_header(seeds_format::Writer& w, int n) {
  std::string dict = "{'descr': '<c8', 'fortran_order': False, 'shape': (" + std::to_string(n) + ", " +
                     std::to_string(n) + "), }";
  const std::size_t preamble = 10;
  dict.append((64 - (preamble + dict.size() + 1) % 64) % 64, ' ');
  dict += '\n';
  w.write("\x93NUMPY\x01\x00", 8);
  w.put(std::uint16_t(dict.size()));
  w.write(dict.data(), dict.size());
}

class WriteGrid : public DeclaredStage<decl> {
 public:
  void process(Context& ctx) override {
    const auto g = ctx.in(grid);
    const int n = g->geom.grid_size;
    seeds_format::Writer w(ctx.output_file(params().path), params().path);
    if (format_for(params()) == "npy") {
      write_npy_header(w, n);
    } else {
      w.put(std::int32_t(g->skipped()));
      w.put(g->norm());
      w.put(std::int32_t(n));
    }
    w.write(g->cells.data(), g->cells.size() * sizeof(cfloat));
    w.close();
  }
};

}  // namespace

StageSpec spec() { return decl.spec({cpu_backend<WriteGrid>()}); }

}  // namespace uvflow::io_write_grid
