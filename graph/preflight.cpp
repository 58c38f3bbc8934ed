#include "graph/preflight.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "runtime/device.hpp"

namespace uvflow {
namespace {

namespace fs = std::filesystem;

// One value of a path parameter with a role (a `paths` list gives one per element).
struct PathParam {
  const StageInstance* st;
  const ParamSpec* spec;
  std::string value;
  SourcePos pos;
  std::string what() const {
    return "stage '" + st->id + "' (" + st->spec->type + ") parameter '" + spec->name + "'";
  }
};

std::vector<PathParam> path_params(const Plan& plan, std::initializer_list<PathRole> roles) {
  std::vector<PathParam> out;
  for (const auto& st : plan.stages) {
    if (!st.spec) continue;
    for (const auto& ps : st.spec->params) {
      if (std::find(roles.begin(), roles.end(), ps.role) == roles.end() || !st.params.has(ps.name)) continue;
      auto pos = st.param_pos.count(ps.name) ? st.param_pos.at(ps.name) : st.pos;
      const ParamValue& v = st.params.value(ps.name);
      std::vector<std::string> values;
      if (auto s = std::get_if<std::string>(&v)) values = {*s};
      else if (auto l = std::get_if<std::vector<std::string>>(&v)) values = *l;
      for (auto& x : values)
        if (!x.empty()) out.push_back({&st, &ps, x, pos});
    }
  }
  return out;
}

// Absolute and normalised, so that "out/x" and "./out/../out/x" compare equal.
fs::path normal(const fs::path& p) {
  std::error_code ec;
  fs::path a = fs::absolute(p, ec);
  return (ec ? p : a).lexically_normal();
}

std::string in_quotes(const fs::path& p) {
  std::string s = "'";
  return (s += p.string()) += "'";
}

std::string expand_first(const std::string& tmpl) {
  std::string s = tmpl;
  if (auto at = s.find("{index}"); at != std::string::npos) s.replace(at, 7, "00000");
  return s;
}

// Why files cannot be written at `file` (a path as the user wrote it), or nothing.
std::optional<std::string> unwritable(const fs::path& file) {
  std::error_code ec;
  const fs::path dir = normal(file).parent_path();
  fs::path probe = dir;
  while (!fs::exists(probe, ec) && probe.has_relative_path()) probe = probe.parent_path();
  // Name folders as the user wrote them: relative to the working directory when they were.
  auto shown = [&](const fs::path& p) {
    if (file.is_absolute()) return in_quotes(p);
    fs::path r = p.lexically_relative(normal("."));
    return in_quotes(r.empty() ? fs::path(".") : r);
  };
  if (!fs::is_directory(probe, ec))
    return "cannot create the folder " + shown(dir) + ": " + shown(probe) + " is a file";
  if (::access(probe.c_str(), W_OK | X_OK) != 0) {
    const std::string why = std::strerror(errno);
    if (probe == dir) return "cannot write in the folder " + shown(dir) + " (" + why + ")";
    return "cannot create the folder " + shown(dir) + " in " + shown(probe) + " (" + why + ")";
  }
  return std::nullopt;
}

std::string why_no_device() {
  return device::compiled() ? "no CUDA device is available" : "uvflow was built without CUDA";
}

bool has_wildcard(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

// Files the other pipelines in the folder of `plan.file` make: path -> the pipeline. A file a
// pipeline also reads is one it updates, not makes; a per-item output with {index} names no one file.
std::map<fs::path, fs::path> outputs_of_neighbours(const Plan& plan, Registry& registry,
                                                   const std::vector<fs::path>& plugin_path) {
  std::map<fs::path, fs::path> made;
  const fs::path dir = plan.file.parent_path();
  std::error_code ec;
  std::vector<fs::path> files;
  for (auto it = fs::directory_iterator(dir.empty() ? fs::path(".") : dir, ec); !ec && it != fs::directory_iterator();
       it.increment(ec))
    if (it->path().extension() == ".yaml" && !fs::equivalent(it->path(), plan.file, ec))
      files.push_back(dir / it->path().filename());
  std::sort(files.begin(), files.end());
  for (auto& f : files) {
    try {
      // No estimates: a neighbour's `choose: auto` would simulate or scan its data just to be named.
      const Plan other = load_plan(f, {}, registry, plugin_path, /*load_plugins=*/false, /*estimate=*/false);
      std::set<fs::path> reads;
      for (auto& p : path_params(other, {PathRole::input})) reads.insert(normal(p.value));
      for (auto& p : path_params(other, {PathRole::output, PathRole::output_per_item}))
        if (p.value.find("{index}") == std::string::npos && !reads.count(normal(p.value)))
          made.emplace(normal(p.value), f);
    } catch (const std::exception&) {
      // Not a pipeline that loads on its own: it makes nothing we could name.
    }
  }
  return made;
}

}  // namespace

std::vector<Diagnostic> device_problems(const Plan& plan) {
  std::vector<Diagnostic> out;
  if (device::count() > 0) return out;
  for (const auto& st : plan.stages)
    if (st.backend == "cuda" && !st.inserted)  // inserted transfers exist because of a cuda stage, reported itself
      out.push_back({st.pos, "stage '" + st.id + "' (" + st.spec->type + ") uses backend cuda, but " +
                                 why_no_device() + "; use --set " + st.id + ".backend=cpu"});
  return out;
}

std::string warning_str(const Diagnostic& d) { return d.pos.str() + ": warning: " + d.message; }

std::int64_t prepare_dry(const Plan& plan, const StageInstance& st) {
  auto s = st.spec->backend(st.backend)->make();
  s->configure(st.params);
  PrepareContext pc = prepare_context(plan, st, true);
  s->prepare(pc);
  return s->stream_length();
}

PreflightResult preflight(const Plan& plan, PreflightFor mode, Registry& registry,
                          const std::vector<fs::path>& plugin_path) {
  PreflightResult r;
  const bool check = mode == PreflightFor::check;
  std::set<const StageInstance*> unprepared;  // inputs missing: their dry run would only repeat it

  // Inputs.
  std::optional<std::map<fs::path, fs::path>> made;  // loaded once, when an input is missing
  std::set<fs::path> reported;                       // missing inputs
  for (auto& in : path_params(plan, {PathRole::input})) {
    std::error_code ec;
    if (has_wildcard(in.value)) continue;  // a glob pattern: the stage says when nothing matches
    if (fs::exists(in.value, ec)) {
      if (::access(in.value.c_str(), R_OK) != 0)
        r.errors.push_back({in.pos, in.what() + ": cannot read " + in_quotes(in.value) + " (" + std::strerror(errno) + ")"});
      continue;
    }
    unprepared.insert(in.st);
    if (!reported.insert(normal(in.value)).second) continue;  // read twice: said once
    if (!made) made = outputs_of_neighbours(plan, registry, plugin_path);
    auto maker = made->find(normal(in.value));
    if (maker == made->end()) {
      r.errors.push_back({in.pos, in.what() + ": " + in_quotes(in.value) + " does not exist"});
    } else {
      std::string msg = in.what() + ": " + in_quotes(in.value) + " does not exist (make it with " +
                        maker->second.string() + ": uvflow run " + maker->second.string() + ")";
      // `check` validates the pipeline, which is fine; only running it needs the file first.
      (check ? r.warnings : r.errors).push_back({in.pos, msg + (check ? "; 'uvflow run' needs it first" : "")});
    }
  }

  // A stage that writes into a missing input (updates it) would only say it is missing again.
  for (auto& out : path_params(plan, {PathRole::output}))
    if (reported.count(normal(out.value))) unprepared.insert(out.st);

  // Outputs: writable folders, one writer per file.
  std::map<fs::path, std::pair<std::string, SourcePos>> writers;  // file -> who writes it, where
  auto claim = [&](const fs::path& file, const std::string& who, const SourcePos& pos) {
    auto [it, fresh] = writers.emplace(normal(file), std::pair(who, pos));
    if (!fresh)
      r.errors.push_back({pos, who + ": writes " + in_quotes(file) + ", as " + it->second.first + " does (" +
                                   it->second.second.str() + "); one would overwrite the other"});
  };
  const auto outputs = path_params(plan, {PathRole::output, PathRole::output_per_item});
  for (auto& out : outputs) {
    const fs::path first = expand_first(out.value);
    std::error_code ec;
    if (out.spec->role == PathRole::output_per_item && fs::is_directory(first, ec))
      r.errors.push_back({out.pos, out.what() + ": " + in_quotes(first) + " is a folder; name a file"});
    else if (auto why = unwritable(first))
      r.errors.push_back({out.pos, out.what() + ": " + *why});
    claim(out.value, out.what(), out.pos);
  }
  if (!plan.run.report.empty()) {
    if (auto why = unwritable(plan.run.report)) r.errors.push_back({plan.run.report_pos, "the run report: " + *why});
    claim(plan.run.report, "the run report", plan.run.report_pos);
  }

  // Dry-run prepare: every stage for `check`; for `run` the sources, for their stream lengths, and
  // the stages of loop bodies, which the run prepares only when their loop starts, after the work
  // before it (the run prepares every other stage itself, before anything runs, and reports a
  // failure with its own exit code).
  std::map<const StageInstance*, std::int64_t> length;
  for (const auto& st : plan.stages) {
    const bool in_loop = st.role == LoopRole::body;
    if (unprepared.count(&st) || (!check && !st.inputs.empty() && !in_loop)) continue;
    try {
      length[&st] = prepare_dry(plan, st);
    } catch (const std::exception& e) {
      if (check || in_loop) r.errors.push_back({st.pos, "stage '" + st.id + "' (" + st.spec->type + "): " + e.what()});
    }
  }

  // {index}: how many items reach a per-item writer, from the sources' stream lengths (0: unknown).
  std::map<int, std::int64_t> counted;
  std::function<std::int64_t(int)> items = [&](int k) -> std::int64_t {
    const StageInstance& st = plan.stages[size_t(k)];
    if (st.inputs.empty()) return length.count(&st) ? length.at(&st) : 0;
    if (auto it = counted.find(k); it != counted.end()) return it->second;
    std::int64_t n = 0;
    for (auto& l : st.inputs)
      if (plan.stages[size_t(l.from)].outputs.at(l.from_port).arity == Arity::stream) n = std::max(n, items(l.from));
    return counted[k] = n;
  };
  for (auto& out : outputs) {
    if (out.spec->role != PathRole::output_per_item || out.value.find("{index}") != std::string::npos) continue;
    std::int64_t n = 0;
    for (auto& l : out.st->inputs)
      n = std::max(n, plan.stages[size_t(l.from)].outputs.at(l.from_port).arity == Arity::once ? 1 : items(l.from));
    if (n > 1) {
      const fs::path p(out.value);
      const fs::path suggestion = p.parent_path() / (p.stem().string() + "_{index}" + p.extension().string());
      r.errors.push_back({out.pos, out.what() + ": " + in_quotes(out.value) + " has no {index}, but " + std::to_string(n) +
                                       " items arrive and each would overwrite the last; write " + in_quotes(suggestion)});
    }
  }

  // A device for every cuda stage.
  if (auto problems = device_problems(plan); !check) {
    r.errors.insert(r.errors.end(), problems.begin(), problems.end());
  } else if (!problems.empty()) {
    // One warning for the pipeline: `check` validates it; only running it needs the device.
    std::string ids;
    for (const auto& st : plan.stages)
      if (st.backend == "cuda" && !st.inserted) ids += (ids.empty() ? "'" : ", '") + st.id + "'";
    r.warnings.push_back({problems.front().pos, std::string(problems.size() == 1 ? "stage " : "stages ") + ids +
                                                    (problems.size() == 1 ? " uses" : " use") + " backend cuda, but " + why_no_device() +
                                                    ": 'uvflow run' refuses this pipeline here (--set "
                                                    "STAGE.backend=cpu runs a stage on the CPU)"});
  }

  // Something keeps the result (a benchmark may keep only its run report).
  if (outputs.empty() && plan.run.report.empty())
    r.warnings.push_back(Diagnostic{SourcePos{plan.file.string(), 0, 0},
                                    "no stage writes a file (io.write_fits, io.write_png, io.write_ms, ...) and "
                                    "there is no run.report: the result is thrown away when the run ends"});
  return r;
}

}  // namespace uvflow
