#include "graph/report.hpp"

#include <algorithm>
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

// The ranks of a distributed run: one line each, then each stage summed over the ranks that ran it
// (items, host and device seconds and work; rates are per rank-second).
std::string format_ranks(const std::vector<RunReport>& ranks) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(3);
  s << ranks.size() << " ranks:\n";
  for (auto& k : ranks) {
    double upd = 0;
    for (auto& m : k.stages) upd += m.work.updates;
    s << "  rank " << k.rank << " on " << k.device << ": " << k.wall_s << " s wall, " << k.communication_s
      << " s communication, " << upd / 1e9 << " G updates\n";
  }
  std::vector<StageMetrics> total;
  std::vector<int> runs;
  for (auto& k : ranks)
    for (auto& m : k.stages) {
      auto it = std::find_if(total.begin(), total.end(), [&](const StageMetrics& t) { return t.id == m.id; });
      if (it == total.end()) {
        total.push_back(m);
        runs.push_back(1);
        continue;
      }
      it->items_in += m.items_in;
      it->wall_s += m.wall_s;
      it->device_s += m.device_s;
      it->work.visibilities += m.work.visibilities;
      it->work.updates += m.work.updates;
      it->work.bytes_h2d += m.work.bytes_h2d;
      it->work.bytes_d2h += m.work.bytes_d2h;
      ++runs[std::size_t(it - total.begin())];
    }
  s << "totals over the ranks:\n" << std::left << std::setw(30) << "stage" << std::right << std::setw(6) << "ranks"
    << std::setw(9) << "items" << std::setw(13) << "wall ms" << std::setw(13) << "device ms" << std::setw(14)
    << "visibilities" << std::setw(13) << "updates" << "\n";
  for (std::size_t i = 0; i < total.size(); ++i) {
    auto& m = total[i];
    s << std::left << std::setw(30) << m.id.substr(0, 29) << std::right << std::setw(6) << runs[i] << std::setw(9)
      << m.items_in << std::setw(13) << std::setprecision(2) << m.wall_s * 1e3 << std::setw(13);
    if (m.backend == "cuda") s << m.device_s * 1e3;
    else s << "-";
    s << std::setw(14) << fmt_rate(m.work.visibilities) << std::setw(13) << fmt_rate(m.work.updates) << "\n";
  }
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
  for (auto& lp : r.loops) {
    s << "loop " << lp.id << ": " << lp.cycles.size() << " cycles, stopped by " << lp.stopped_by << "\n"
      << std::setw(7) << "cycle" << std::setw(13) << "peak before" << std::setw(13) << "peak after" << std::setw(12)
      << "noise" << std::setw(12) << "cleaned" << std::setw(12) << "model" << std::setw(11) << "minor it" << std::setw(10)
      << "wall s" << "  minor cycle stopped by\n";
    for (auto& c : lp.cycles)
      s << std::setw(7) << c.cycle << std::setprecision(5) << std::setw(13) << c.peak_start << std::setw(13) << c.peak
        << std::setw(12) << c.noise << std::setw(12) << c.flux << std::setw(12) << c.model_flux << std::setw(11)
        << c.iterations << std::setprecision(2) << std::setw(10) << c.wall_s << "  " << c.minor_stop << "\n";
  }
  for (auto& h : r.held)
    s << "held " << h.output << " past run.hold_memory_mb / run.hold_device_mb: of " << h.items << " items, "
      << h.items_on_host << " device items in host memory, " << h.spilled_items << " (" << std::setprecision(3)
      << h.spilled_bytes / 1e9 << " GB) in a scratch file\n";
  if (r.ranks.size() > 1) s << format_ranks(r.ranks);
  for (auto& c : r.choices)
    if (c.automatic) s << "choice " << c.id << ": " << c.why << "\n";
  for (auto& o : r.outputs) s << "wrote " << o << "\n";
  return s.str();
}

namespace {

nlohmann::json to_json(const RunReport& r) {
  nlohmann::json j;
  j["pipeline"] = r.pipeline;
  j["file"] = r.file;
  j["device"] = r.device;
  j["wall_s"] = r.wall_s;
  j["stream_start_s"] = r.stream_start_s;
  j["outputs"] = r.outputs;
  for (auto& c : r.choices)
    j["choices"].push_back({{"id", c.id}, {"chosen", c.chosen}, {"automatic", c.automatic}, {"why", c.why}});
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
                           {"device_from_s", m.device_from},
                           {"device_to_s", m.device_to},
                           {"bytes_h2d", m.work.bytes_h2d},
                           {"bytes_d2h", m.work.bytes_d2h},
                           {"visibilities", m.work.visibilities},
                           {"updates", m.work.updates},
                           {"visibilities_per_s", t > 0 ? m.work.visibilities / t : 0.0},
                           {"updates_per_s", t > 0 ? m.work.updates / t : 0.0}});
  }
  for (auto& lp : r.loops) {
    nlohmann::json l{{"id", lp.id}, {"stopped_by", lp.stopped_by}, {"cycles", nlohmann::json::array()}};
    for (auto& c : lp.cycles) {
      auto stages = nlohmann::json::array();
      for (auto& t : c.stages) stages.push_back({{"id", t.id}, {"wall_s", t.wall_s}, {"device_s", t.device_s}});
      l["cycles"].push_back({{"cycle", c.cycle},
                             {"peak_residual_start_jy", c.peak_start},
                             {"peak_residual_jy", c.peak},
                             {"noise_jy", c.noise},
                             {"flux_cleaned_jy", c.flux},
                             {"model_flux_jy", c.model_flux},
                             {"minor_iterations", c.iterations},
                             {"total_minor_iterations", c.total_iterations},
                             {"minor_stop", c.minor_stop},
                             {"wall_s", c.wall_s},
                             {"stages", stages}});
    }
    j["loops"].push_back(l);
  }
  for (auto& h : r.held)
    j["held"].push_back({{"output", h.output},
                         {"items", h.items},
                         {"items_on_host", h.items_on_host},
                         {"spilled_items", h.spilled_items},
                         {"spilled_bytes", h.spilled_bytes}});
  j["rank"] = r.rank;
  j["local_rank"] = r.local_rank;
  j["communication_s"] = r.communication_s;
  for (auto& k : r.ranks) j["ranks"].push_back(to_json(k));
  return j;
}

}  // namespace

std::string report_json(const RunReport& r) { return to_json(r).dump(2); }

RunReport report_from_json(const std::string& text) {
  const auto j = nlohmann::json::parse(text);
  RunReport r;
  r.pipeline = j.at("pipeline");
  r.file = j.at("file");
  r.device = j.at("device");
  r.wall_s = j.at("wall_s");
  r.stream_start_s = j.at("stream_start_s");
  r.outputs = j.at("outputs").get<std::vector<std::string>>();
  r.rank = j.value("rank", 0);
  r.local_rank = j.value("local_rank", 0);
  r.communication_s = j.value("communication_s", 0.0);
  for (auto& c : j.value("choices", nlohmann::json::array()))
    r.choices.push_back({c.at("id"), c.at("chosen"), c.at("automatic"), c.at("why")});
  for (auto& s : j.value("stages", nlohmann::json::array())) {
    StageMetrics m;
    m.id = s.at("id");
    m.type = s.at("type");
    m.backend = s.at("backend");
    m.inserted = s.at("inserted");
    m.items_in = s.at("items_in");
    m.items_out = s.at("items_out");
    m.wall_s = s.at("wall_s");
    m.device_s = s.at("device_s");
    m.busy_from = s.at("busy_from_s");
    m.busy_to = s.at("busy_to_s");
    m.last_output_s = s.at("last_output_s");
    m.device_from = s.value("device_from_s", -1.0);  // reports before these fields
    m.device_to = s.value("device_to_s", -1.0);
    m.work = {.visibilities = s.at("visibilities"), .updates = s.at("updates"), .bytes_h2d = s.at("bytes_h2d"),
              .bytes_d2h = s.at("bytes_d2h")};
    r.stages.push_back(std::move(m));
  }
  return r;
}

}  // namespace uvflow
