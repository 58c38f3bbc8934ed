#include "graph/report.hpp"

#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

namespace uvflow {

const StageMetrics& RunReport::stage(std::string_view id) const {
  for (const auto& m : stages)
    if (m.id == id) return m;
  throw std::out_of_range("the run report has no stage '" + std::string(id) + "'");
}

namespace {

std::string fmt_rate(double x) {
  if (x <= 0) return "-";
  std::ostringstream s;
  s << std::setprecision(3);
  if (x >= 1e9) s << x / 1e9 << " G";
  else if (x >= 1e6) s << x / 1e6 << " M";
  else if (x >= 1e3) s << x / 1e3 << " k";
  else s << x << " ";
  return s.str();
}

}  // namespace

std::string format_report(const RunReport& r) {
  std::ostringstream s;
  s << "run " << r.pipeline << " on " << r.device << ": " << std::fixed << std::setprecision(3) << r.wall_s
    << " s wall\n";
  s << std::left << std::setw(30) << "stage" << std::setw(24) << "type" << std::setw(6) << "bknd" << std::right
    << std::setw(7) << "items" << std::setw(11) << "wall ms" << std::setw(11) << "device ms" << std::setw(10)
    << "H->D MB" << std::setw(10) << "D->H MB" << std::setw(12) << "vis/s" << std::setw(13) << "updates/s" << "\n";
  double h2d = 0, d2h = 0;
  for (auto& m : r.stages) {
    double t = m.time_s();
    s << std::left << std::setw(30) << m.id.substr(0, 29) << std::setw(24) << m.type.substr(0, 23) << std::setw(6)
      << m.backend << std::right << std::setw(7) << m.items_in << std::setw(11) << std::setprecision(2)
      << m.wall_s * 1e3 << std::setw(11);
    if (m.backend == "cuda") s << m.device_s * 1e3;
    else s << "-";
    s << std::setw(10) << m.work.bytes_h2d / 1e6 << std::setw(10) << m.work.bytes_d2h / 1e6 << std::setw(12)
      << (t > 0 ? fmt_rate(m.work.visibilities / t) : "-") << std::setw(13)
      << (t > 0 ? fmt_rate(m.work.updates / t) : "-") << "\n";
    h2d += m.work.bytes_h2d;
    d2h += m.work.bytes_d2h;
  }
  s << "bytes over the bus: host->device " << std::setprecision(3) << h2d / 1e6 << " MB, device->host "
    << d2h / 1e6 << " MB\n";
  for (auto& o : r.outputs) s << "wrote " << o << "\n";
  return s.str();
}

std::string report_json(const RunReport& r) {
  nlohmann::json j;
  j["pipeline"] = r.pipeline;
  j["file"] = r.file;
  j["device"] = r.device;
  j["wall_s"] = r.wall_s;
  j["stream_start_s"] = r.stream_start_s;
  j["outputs"] = r.outputs;
  for (auto& m : r.stages) {
    double t = m.time_s();
    j["stages"].push_back({{"id", m.id},
                           {"type", m.type},
                           {"backend", m.backend},
                           {"inserted", m.inserted},
                           {"items_in", m.items_in},
                           {"items_out", m.items_out},
                           {"wall_s", m.wall_s},
                           {"device_s", m.device_s},
                           {"busy_from_s", m.busy_from},
                           {"busy_to_s", m.busy_to},
                           {"last_output_s", m.last_output_s},
                           {"bytes_h2d", m.work.bytes_h2d},
                           {"bytes_d2h", m.work.bytes_d2h},
                           {"visibilities", m.work.visibilities},
                           {"updates", m.work.updates},
                           {"visibilities_per_s", t > 0 ? m.work.visibilities / t : 0.0},
                           {"updates_per_s", t > 0 ? m.work.updates / t : 0.0}});
  }
  return j.dump(2);
}

}  // namespace uvflow
