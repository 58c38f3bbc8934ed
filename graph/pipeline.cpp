// Loading a pipeline file: YAML with line:column kept, ${var} substitution, --set overrides,
// validation of every stage against its spec (all errors at once, with "did you mean"), and
// planning (topological order, residency of every edge, transfer insertion).
#include "graph/pipeline.hpp"
#include "graph/estimate.hpp"

#include "runtime/param_check.hpp"
#include "runtime/payloads/cycle.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <tuple>

namespace uvflow {

std::string closest(std::string_view word, const std::vector<std::string>& candidates) {
  auto dist = [](std::string_view a, std::string_view b) {
    std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      cur[0] = i;
      for (size_t j = 1; j <= b.size(); ++j)
        cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
      std::swap(prev, cur);
    }
    return prev[b.size()];
  };
  std::string best;
  size_t best_d = std::max<size_t>(2, word.size() / 3) + 1;
  for (auto& c : candidates) {
    size_t d = dist(word, c);
    if (d < best_d) best_d = d, best = c;
  }
  return best;
}

namespace {

// yaml-cpp throws when asked the type of a missing node; a missing node is simply none of these.
bool is_map(const YAML::Node& n) { return n.IsDefined() && n.IsMap(); }
bool is_scalar(const YAML::Node& n) { return n.IsDefined() && n.IsScalar(); }
bool is_seq(const YAML::Node& n) { return n.IsDefined() && n.IsSequence(); }
bool is_null(const YAML::Node& n) { return !n.IsDefined() || n.IsNull(); }

std::string suggest(std::string_view word, const std::vector<std::string>& candidates) {
  std::string c = closest(word, candidates);
  return c.empty() ? std::string() : " (did you mean '" + c + "'?)";
}

template <class T>
std::vector<std::string> names_of(const std::vector<T>& v) {
  std::vector<std::string> n;
  for (auto& x : v) n.push_back(x.name);
  return n;
}

// The keys of a loop's `loop:` mapping.
const std::vector<std::string>& loop_settings() {
  static const std::vector<std::string> keys = {"max_cycles", "threshold", "threshold_sigma", "max_minor_iterations",
                                                "major_gain", "figures"};
  return keys;
}

// The keys of the `run:` mapping (RunOptions).
const std::vector<std::string>& run_keys() {
  static const std::vector<std::string> keys = {"max_in_flight",  "transfers",      "report",         "threads",
                                                "once_first",     "pinned_pool_mb", "device_pool_mb", "hold_memory_mb",
                                                "hold_device_mb", "scratch_dir"};
  return keys;
}

// A YAML value and where it was written (a file position, or the --set that supplied it).
struct Val {
  YAML::Node node;
  SourcePos pos;
};

// A choice's outputs: NAME -> the chosen option's STAGE or STAGE.PORT, where it was written.
struct Choice {
  SourcePos pos;
  std::map<std::string, Val> outputs;
};

struct Override {
  std::string text;  // the whole KEY=VALUE, for diagnostics
  YAML::Node value;
  bool used = false;
};

class Loader {
 public:
  Loader(std::filesystem::path file, Registry& reg, std::vector<std::filesystem::path> plugin_path, bool load_plugins,
         std::optional<std::string> text = std::nullopt, bool estimate = true)
      : file_(std::move(file)), reg_(reg), plugin_path_(std::move(plugin_path)), load_plugins_(load_plugins),
        estimate_(estimate), text_(std::move(text)) {}

  Plan load(const std::vector<std::string>& sets);

 private:
  SourcePos pos_of(const YAML::Node& n) const {
    if (!n.IsDefined()) return {file_.string(), 0, 0};
    YAML::Mark m = n.Mark();
    if (m.is_null() || m.line < 0) return {file_.string(), 0, 0};
    return {file_.string(), m.line + 1, m.column + 1};
  }
  // Control characters from the file (a binary file's bytes) are shown escaped, not sent to the terminal.
  void error(const SourcePos& p, std::string msg) { diags_.push_back({p, printable(msg)}); }
  static std::string printable(const std::string& s);
  YAML::Node parse_text();
  void find_duplicate_keys(const YAML::Node& n, std::set<std::tuple<int, int, bool>>& seen);

  void parse_sets(const std::vector<std::string>& sets);
  Val with_override(const std::string& key, const YAML::Node& n, const SourcePos& fallback);
  bool substitute(Val& v, const std::string& what);
  std::optional<std::string> scalar(Val v, const std::string& what);
  void parse_run(const YAML::Node& n);
  void parse_plugins(const YAML::Node& n);
  void parse_stage(const YAML::Node& n, std::map<std::string, std::vector<std::pair<std::string, Val>>>& ins,
                   const std::string& loop = "");
  std::optional<std::string> parse_id(const YAML::Node& n, const std::string& what);
  void parse_loop(const YAML::Node& n, std::map<std::string, std::vector<std::pair<std::string, Val>>>& ins,
                  const std::string& enclosing);
  void parse_choice(const YAML::Node& n, std::map<std::string, std::vector<std::pair<std::string, Val>>>& ins,
                    const std::string& loop);
  const StageSpec* own_spec(StageSpec s);
  void check_loops(Plan& plan);
  bool fix_state_residency(Plan& plan);
  std::optional<ParamValue> convert(const ParamSpec& spec, Val v, const std::string& where);
  void check_range(const ParamSpec& spec, double x, const SourcePos& p, const std::string& where);
  void link_inputs(Plan& plan, std::map<std::string, std::vector<std::pair<std::string, Val>>>& ins);
  void order(Plan& plan);
  void resolve_residency(Plan& plan);
  void describe(Plan& plan);

  std::filesystem::path file_;
  Registry& reg_;
  std::vector<std::filesystem::path> plugin_path_;
  bool load_plugins_;
  bool estimate_;  // false: a `choose: auto` takes its first option that plans, nothing estimated
  std::optional<std::string> text_;  // the pipeline given as text (load_plan_text): file_ only names it
  std::vector<Diagnostic> diags_;
  std::map<std::string, Override> overrides_;
  std::map<std::string, Val> vars_;
  std::set<std::string> bad_params_;  // stage ids with a reported parameter error: not configured
  std::map<std::string, Location> state_location_;  // states whose value must live where their `next` does
  std::map<std::string, Choice> choices_;            // `choose:` entries by id
  std::map<std::string, std::string> unchosen_;      // stage id -> the option not chosen that holds it
  std::set<std::string> held_;  // stage ids of an automatic choice's other options: planned when it picks
  std::vector<std::string> sets_;
  Plan plan_;
  std::optional<ChoicePlan> automatic_;  // the first `choose: auto`, planned by choose_automatically()
  Plan choose_automatically(const ChoicePlan& c);
};

void Loader::parse_sets(const std::vector<std::string>& sets) {
  for (auto& s : sets) {
    auto eq = s.find('=');
    SourcePos p{"--set " + s, 0, 0};
    if (eq == std::string::npos || eq == 0) {
      error(p, "expected KEY=VALUE, e.g. --set grid.backend=cuda");
      continue;
    }
    Override o{s, {}, false};
    try {
      o.value = YAML::Load(s.substr(eq + 1));
    } catch (const YAML::Exception& e) {
      error(p, "value is not valid YAML: " + e.msg);
      continue;
    }
    if (!o.value.IsDefined() || is_null(o.value)) o.value = YAML::Node(s.substr(eq + 1));
    overrides_[s.substr(0, eq)] = o;
  }
}

Val Loader::with_override(const std::string& key, const YAML::Node& n, const SourcePos& fallback) {
  auto it = overrides_.find(key);
  if (it != overrides_.end()) {
    it->second.used = true;
    return {it->second.value, {"--set " + it->second.text, 0, 0}};
  }
  return {n, n.IsDefined() ? pos_of(n) : fallback};
}

// Replaces "${name}" (the whole value: typed) and "...${name}..." (inside text) by vars.
bool Loader::substitute(Val& v, const std::string& what) {
  if (!is_scalar(v.node)) return true;
  static const std::regex whole(R"(^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$)");
  static const std::regex part(R"(\$\{([A-Za-z_][A-Za-z0-9_]*)\})");
  const std::string s = v.node.Scalar();
  std::vector<std::string> known;
  for (auto& [k, _] : vars_) known.push_back(k);
  std::smatch m;
  if (std::regex_match(s, m, whole)) {
    auto it = vars_.find(m[1]);
    if (it == vars_.end()) {
      error(v.pos, what + ": unknown variable '" + m[1].str() + "'" + suggest(m[1].str(), known));
      return false;
    }
    v.node = it->second.node;
    return true;
  }
  std::string out;
  auto begin = std::sregex_iterator(s.begin(), s.end(), part);
  size_t last = 0;
  bool ok = true;
  for (auto i = begin; i != std::sregex_iterator(); ++i) {
    out += s.substr(last, i->position() - last);
    auto it = vars_.find((*i)[1]);
    if (it == vars_.end() || !is_scalar(it->second.node)) {
      error(v.pos, what + ": unknown variable '" + (*i)[1].str() + "'" + suggest((*i)[1].str(), known));
      ok = false;
    } else {
      out += it->second.node.Scalar();
    }
    last = i->position() + i->length();
  }
  if (begin != std::sregex_iterator()) {
    out += s.substr(last);
    v.node = YAML::Node(out);
  }
  return ok;
}

std::optional<std::string> Loader::scalar(Val v, const std::string& what) {
  if (!substitute(v, what)) return std::nullopt;
  if (!is_scalar(v.node)) {
    error(v.pos, what + " must be a single value");
    return std::nullopt;
  }
  return v.node.Scalar();
}

void Loader::check_range(const ParamSpec& spec, double x, const SourcePos& p, const std::string& where) {
  if (auto m = check_param(spec, x, where)) error(p, *m);
}

static bool parse_int(const std::string& s, std::int64_t& out) {
  try {
    size_t used;
    long long v = std::stoll(s, &used, 0);
    if (used != s.size()) return false;
    out = v;
    return true;
  } catch (...) {
    return false;
  }
}

static bool parse_double(const std::string& s, double& out) {
  try {
    size_t used;
    double v = std::stod(s, &used);
    if (used != s.size() || !std::isfinite(v)) return false;
    out = v;
    return true;
  } catch (...) {
    return false;
  }
}

std::optional<ParamValue> Loader::convert(const ParamSpec& spec, Val v, const std::string& where) {
  if (!substitute(v, where)) return std::nullopt;
  auto type_error = [&](const std::string& want) {
    std::string got = is_scalar(v.node) ? "'" + v.node.Scalar() + "'"
                      : is_seq(v.node) ? std::string("a list")
                      : is_map(v.node)      ? std::string("a mapping")
                                            : std::string("nothing");
    error(v.pos, where + " must be " + want + ", got " + got);
    return std::nullopt;
  };
  const std::string s = is_scalar(v.node) ? v.node.Scalar() : std::string();
  switch (spec.type) {
    case ParamType::integer: {
      std::int64_t i;
      if (!is_scalar(v.node) || !parse_int(s, i)) return type_error("an integer");
      check_range(spec, double(i), v.pos, where);
      return ParamValue(i);
    }
    case ParamType::number: {
      double d;
      if (!is_scalar(v.node) || !parse_double(s, d)) return type_error("a number");
      check_range(spec, d, v.pos, where);
      return ParamValue(d);
    }
    case ParamType::boolean:
      if (is_scalar(v.node) && (s == "true" || s == "false")) return ParamValue(s == "true");
      return type_error("true or false");
    case ParamType::string:
    case ParamType::path:
      if (!is_scalar(v.node)) return type_error("a string");
      return ParamValue(s);
    case ParamType::choice: {
      if (!is_scalar(v.node)) return type_error("one of " + [&] {
        std::string c;
        for (auto& x : spec.choices) c += (c.empty() ? "" : ", ") + x;
        return c;
      }());
      if (auto m = check_param(spec, s, where)) {
        error(v.pos, *m + suggest(s, spec.choices));
        return std::nullopt;
      }
      return ParamValue(s);
    }
    case ParamType::numbers: {
      if (!is_seq(v.node)) return type_error("a list of numbers");
      std::vector<double> out;
      for (const auto& e : v.node) {
        Val ev{e, pos_of(e)};
        double d;
        if (!substitute(ev, where) || !is_scalar(ev.node) || !parse_double(ev.node.Scalar(), d)) {
          error(ev.pos, where + ": every element must be a number");
          return std::nullopt;
        }
        check_range(spec, d, ev.pos, where);
        out.push_back(d);
      }
      return ParamValue(out);
    }
    case ParamType::paths: {
      if (!is_seq(v.node)) return type_error("a list of paths");
      std::vector<std::string> out;
      for (const auto& e : v.node) {
        Val ev{e, pos_of(e)};
        if (!substitute(ev, where) || !is_scalar(ev.node)) {
          error(ev.pos, where + ": every element must be a path");
          return std::nullopt;
        }
        out.push_back(ev.node.Scalar());
      }
      return ParamValue(out);
    }
    case ParamType::records: {
      if (!is_seq(v.node)) return type_error("a list of mappings");
      std::vector<Record> out;
      auto fields = names_of(spec.fields);
      bool ok = true;
      for (const auto& e : v.node) {
        if (!is_map(e)) {
          error(pos_of(e), where + ": every element must be a mapping with fields " + [&] {
            std::string c;
            for (auto& x : fields) c += (c.empty() ? "" : ", ") + x;
            return c;
          }());
          ok = false;
          continue;
        }
        Record r;
        for (const auto& kv : e) {
          std::string k = kv.first.Scalar();
          auto f = std::find_if(spec.fields.begin(), spec.fields.end(),
                                [&](const ParamSpec& x) { return x.name == k; });
          if (f == spec.fields.end()) {
            error(pos_of(kv.first), where + ": unknown field '" + k + "'" + suggest(k, fields));
            ok = false;
            continue;
          }
          auto fv = convert(*f, Val{kv.second, pos_of(kv.second)}, where + "." + k);
          if (!fv) { ok = false; continue; }
          r[k] = std::holds_alternative<std::int64_t>(*fv) ? double(std::get<std::int64_t>(*fv))
                                                           : std::get<double>(*fv);
        }
        for (auto& f : spec.fields) {
          if (r.count(f.name)) continue;
          if (f.def) {
            r[f.name] = std::get<double>(*f.def);
          } else {
            error(pos_of(e), where + ": missing field '" + f.name + "'");
            ok = false;
          }
        }
        out.push_back(std::move(r));
      }
      if (!ok) return std::nullopt;
      return ParamValue(out);
    }
  }
  return std::nullopt;
}

void Loader::parse_run(const YAML::Node& n) {
  const std::vector<std::string>& keys = run_keys();
  if (n.IsDefined() && !is_map(n)) {
    std::string list;
    for (auto& k : keys) list += (list.empty() ? "" : ", ") + k;
    error(pos_of(n), "'run' must be a mapping with keys " + list);
    return;
  }
  if (n.IsDefined())
    for (const auto& kv : n) {
      auto k = kv.first.Scalar();
      if (std::find(keys.begin(), keys.end(), k) == keys.end())
        error(pos_of(kv.first), "unknown key 'run." + k + "'" + suggest(k, keys));
    }
  auto get = [&](const std::string& k) {
    return with_override("run." + k, is_map(n) ? n[k] : YAML::Node(YAML::NodeType::Undefined), pos_of(n));
  };
  ParamSpec mif{"max_in_flight", ParamType::integer, {}, false, "", 1, 4096};
  ParamSpec thr{"threads", ParamType::integer, {}, false, "", 0, 4096};
  ParamSpec tr{"transfers", ParamType::choice};
  tr.choices = {"auto", "explicit"};
  ParamSpec rep{"report", ParamType::path};
  ParamSpec first{"once_first", ParamType::boolean};
  ParamSpec pool{"pinned_pool_mb", ParamType::integer, {}, false, "MB", 0, 1 << 20};
  if (auto v = get("max_in_flight"); v.node.IsDefined())
    if (auto x = convert(mif, v, "run.max_in_flight")) plan_.run.max_in_flight = int(std::get<std::int64_t>(*x));
  if (auto v = get("threads"); v.node.IsDefined())
    if (auto x = convert(thr, v, "run.threads")) plan_.run.threads = int(std::get<std::int64_t>(*x));
  if (auto v = get("transfers"); v.node.IsDefined())
    if (auto x = convert(tr, v, "run.transfers")) plan_.run.explicit_transfers = std::get<std::string>(*x) == "explicit";
  if (auto v = get("report"); v.node.IsDefined())
    if (auto x = convert(rep, v, "run.report")) plan_.run.report = std::get<std::string>(*x), plan_.run.report_pos = v.pos;
  if (auto v = get("once_first"); v.node.IsDefined())
    if (auto x = convert(first, v, "run.once_first")) plan_.run.once_first = std::get<bool>(*x);
  if (auto v = get("pinned_pool_mb"); v.node.IsDefined())
    if (auto x = convert(pool, v, "run.pinned_pool_mb")) plan_.run.pinned_pool_mb = int(std::get<std::int64_t>(*x));
  if (auto v = get("device_pool_mb"); v.node.IsDefined())
    if (auto x = convert(pool, v, "run.device_pool_mb")) plan_.run.device_pool_mb = int(std::get<std::int64_t>(*x));
  ParamSpec hold{"hold_memory_mb", ParamType::integer, {}, false, "MB", 0, std::int64_t(1) << 40};
  if (auto v = get("hold_memory_mb"); v.node.IsDefined())
    if (auto x = convert(hold, v, "run.hold_memory_mb")) plan_.run.hold_memory_mb = std::get<std::int64_t>(*x);
  if (auto v = get("hold_device_mb"); v.node.IsDefined())
    if (auto x = convert(hold, v, "run.hold_device_mb")) plan_.run.hold_device_mb = std::get<std::int64_t>(*x);
  ParamSpec scratch{"scratch_dir", ParamType::path};
  if (auto v = get("scratch_dir"); v.node.IsDefined())
    if (auto x = convert(scratch, v, "run.scratch_dir")) plan_.run.scratch_dir = std::get<std::string>(*x);
}

void Loader::parse_plugins(const YAML::Node& n) {
  if (!n.IsDefined()) return;
  if (!is_seq(n)) {
    error(pos_of(n), "'plugins' must be a list of shared-library paths");
    return;
  }
  for (const auto& e : n) {
    auto s = scalar(Val{e, pos_of(e)}, "plugin path");
    if (!s) continue;
    if (!load_plugins_) continue;
    // Only where the pipeline or the command line says, never the working directory: a library
    // planted there must not run because someone checked a pipeline in that folder.
    std::filesystem::path p(*s);
    std::vector<std::filesystem::path> tries;
    if (p.is_absolute()) tries = {p};
    else {
      tries.push_back(file_.parent_path() / p);
      for (auto& d : plugin_path_) tries.push_back(d / p);
    }
    auto found = std::find_if(tries.begin(), tries.end(), [](auto& t) {
      std::error_code ec;
      return std::filesystem::is_regular_file(t, ec);
    });
    if (found == tries.end()) {
      std::string looked;
      for (auto& t : tries) looked += (looked.empty() ? "" : ", ") + t.string();
      error(pos_of(e), "plugin '" + *s + "' not found (looked for " + looked +
                           "; a relative plugin path is next to the pipeline file or in a --plugin-path folder)");
      continue;
    }
    try {
      // An absolute path: dlopen would search the system's library folders for a bare name.
      reg_.load_plugin(std::filesystem::absolute(*found));
    } catch (const std::exception& ex) {
      error(pos_of(e), ex.what());
    }
  }
}

std::optional<std::string> Loader::parse_id(const YAML::Node& n, const std::string& what) {
  if (!n["id"].IsDefined()) {
    error(pos_of(n), what + " has no 'id'");
    return std::nullopt;
  }
  auto id = scalar(Val{n["id"], pos_of(n["id"])}, what + " id");
  if (!id) return std::nullopt;
  static const std::regex id_re("^[A-Za-z_][A-Za-z0-9_]*$");
  if (!std::regex_match(*id, id_re)) {
    error(pos_of(n["id"]), what + " id '" + *id + "' must be letters, digits and '_' (no '.')");
    return std::nullopt;
  }
  for (auto& other : plan_.stages)
    if (other.id == *id) {
      error(pos_of(n["id"]), what + " id '" + *id + "' is used twice (first at " + other.pos.str() + ")");
      return std::nullopt;
    }
  if (auto c = choices_.find(*id); c != choices_.end()) {
    error(pos_of(n["id"]), what + " id '" + *id + "' is used twice (first at " + c->second.pos.str() + ")");
    return std::nullopt;
  }
  return id;
}

void Loader::parse_stage(const YAML::Node& n,
                         std::map<std::string, std::vector<std::pair<std::string, Val>>>& ins, const std::string& loop) {
  static const std::vector<std::string> keys = {"id", "type", "backend", "params", "in"};
  SourcePos here = pos_of(n);
  if (is_map(n) && n["loop"].IsDefined()) {
    parse_loop(n, ins, loop);
    return;
  }
  if (is_map(n) && n["choose"].IsDefined()) {
    parse_choice(n, ins, loop);
    return;
  }
  if (!is_map(n)) {
    error(here, "a stage must be a mapping with keys id, type, backend, params, in (or a loop: id, loop, state, stages, "
                "outputs; or a choice: id, choose, options)");
    return;
  }
  for (const auto& kv : n) {
    auto k = kv.first.Scalar();
    if (std::find(keys.begin(), keys.end(), k) == keys.end())
      error(pos_of(kv.first), "unknown stage key '" + k + "'" + suggest(k, keys));
  }
  StageInstance st;
  st.pos = here;
  if (!loop.empty()) st.role = LoopRole::body, st.loop = loop;
  auto id = parse_id(n, "stage");
  if (!id) return;
  st.id = *id;
  const std::string who = "stage '" + st.id + "'";
  Val tv = with_override(st.id + ".type", n["type"], here);
  if (!tv.node.IsDefined()) {
    error(here, who + " has no 'type'");
    return;
  }
  auto type = scalar(tv, who + " type");
  if (!type) return;
  st.spec = reg_.find(*type);
  if (!st.spec) {
    error(tv.pos, "unknown stage type '" + *type + "'" + suggest(*type, reg_.types()) +
                      "; 'uvflow stages' lists them");
    plan_.stages.push_back(st);  // keep the id so links to it do not cascade into more errors
    return;
  }
  const std::string what = who + " (" + st.spec->type + ")";
  Val bv = with_override(st.id + ".backend", n["backend"], here);
  st.backend = st.spec->backends.front().name;
  if (bv.node.IsDefined()) {
    if (auto b = scalar(bv, what + " backend")) {
      if (!st.spec->backend(*b))
        error(bv.pos, what + " has no backend '" + *b + "'; it has " + [&] {
          std::string c;
          for (auto& x : st.spec->backends) c += (c.empty() ? "" : ", ") + x.name;
          return c;
        }() + suggest(*b, names_of(st.spec->backends)));
      else
        st.backend = *b;
    }
  }
  // Parameters: from the file, then --set (ID.params.NAME or the shorthand ID.NAME).
  YAML::Node pn = n["params"];
  if (pn.IsDefined() && !is_map(pn) && !is_null(pn))
    error(pos_of(pn), what + ": 'params' must be a mapping");
  std::map<std::string, Val> given;
  if (is_map(pn))
    for (const auto& kv : pn) {
      auto k = kv.first.Scalar();
      if (!st.spec->param(k)) {
        error(pos_of(kv.first), what + ": unknown parameter '" + k + "'" +
                                    suggest(k, names_of(st.spec->params)) + "; 'uvflow describe " +
                                    st.spec->type + "' lists them");
        continue;
      }
      given[k] = Val{kv.second, pos_of(kv.second)};
    }
  for (auto& [key, o] : overrides_) {
    for (const std::string& prefix : {st.id + ".params.", st.id + "."}) {
      if (key.rfind(prefix, 0) != 0) continue;
      std::string k = key.substr(prefix.size());
      if (k == "backend" || k == "type") continue;
      o.used = true;
      if (!st.spec->param(k)) {
        error({"--set " + o.text, 0, 0}, what + ": unknown parameter '" + k + "'" +
                                             suggest(k, names_of(st.spec->params)));
        break;
      }
      given[k] = Val{o.value, {"--set " + o.text, 0, 0}};
      break;
    }
  }
  const size_t errors_before = diags_.size();
  for (const auto& ps : st.spec->params) {
    auto it = given.find(ps.name);
    if (it == given.end()) {
      if (ps.def) st.params.set(ps.name, *ps.def);
      else if (!ps.optional) error(here, what + ": missing required parameter '" + ps.name + "'");
      continue;
    }
    st.param_pos[ps.name] = it->second.pos;
    if (auto v = convert(ps, it->second, what + " parameter '" + ps.name + "'"))
      st.params.set(ps.name, *v);
  }
  if (diags_.size() != errors_before) bad_params_.insert(st.id);
  // Inputs are linked once every stage is known.
  YAML::Node in = n["in"];
  if (in.IsDefined() && !is_map(in) && !is_null(in))
    error(pos_of(in), what + ": 'in' must map input ports to 'stage' or 'stage.port'");
  if (is_map(in))
    for (const auto& kv : in) ins[st.id].push_back({kv.first.Scalar(), Val{kv.second, pos_of(kv.second)}});
  plan_.stages.push_back(std::move(st));
}


// The loops' pseudo-stages never run (graph/plan_runner feeds and collects their values); a stage
// object exists for them only so that they configure and prepare like every stage in checks.
class PseudoStage : public Stage {
 public:
  void process(Context&) override {}
};

const StageSpec* Loader::own_spec(StageSpec s) {
  s.backends = {{"loop", [] { return std::unique_ptr<Stage>(std::make_unique<PseudoStage>()); }}};
  plan_.own_specs.push_back(std::make_shared<const StageSpec>(std::move(s)));
  return plan_.own_specs.back().get();
}

// A pass-through port of a pseudo-stage: any payload, stream or once, where its producer has it.
static PortSpec any_port(const std::string& name, const std::string& doc) {
  return {name, kAnyPayload, Arity::stream, Residency::any, doc, false};
}

// A loop entry: `loop:` (the bound, the stop conditions, the figures they read), `state:` (the values
// carried from one cycle to the next), `stages:` (the body) and `outputs:` (body values of the last
// cycle that leave the loop besides its state). It becomes pseudo-stages around its body stages:
// one per state (id: the state's name), LOOP.control (the cycle's CycleControl) and the exit LOOP,
// whose outputs are the state's final values and `outputs:`.
void Loader::parse_loop(const YAML::Node& n, std::map<std::string, std::vector<std::pair<std::string, Val>>>& ins,
                        const std::string& enclosing) {
  static const std::vector<std::string> keys = {"id", "loop", "state", "stages", "outputs"};
  const std::vector<std::string>& settings = loop_settings();
  const SourcePos here = pos_of(n);
  for (const auto& kv : n) {
    auto k = kv.first.Scalar();
    if (std::find(keys.begin(), keys.end(), k) == keys.end())
      error(pos_of(kv.first), "unknown loop key '" + k + "'" + suggest(k, keys));
  }
  auto id = parse_id(n, "loop");
  if (!id) return;
  if (!enclosing.empty()) {
    error(pos_of(n["loop"]), "loop '" + *id + "' is inside loop '" + enclosing + "': loops do not nest");
    return;
  }
  LoopPlan lp;
  lp.id = *id;
  lp.pos = here;
  const std::string who = "loop '" + lp.id + "'";
  // The loop's own entry first: body stages, states and exit are found by id below.
  StageInstance exit;
  exit.id = lp.id;
  exit.pos = here;
  exit.role = LoopRole::exit;
  exit.loop = lp.id;
  const YAML::Node set = n["loop"];
  if (!is_map(set)) error(pos_of(set), who + ": 'loop' must be a mapping with keys max_cycles, threshold, threshold_sigma, "
                                            "max_minor_iterations, major_gain, figures");
  else
    for (const auto& kv : set) {
      auto k = kv.first.Scalar();
      if (std::find(settings.begin(), settings.end(), k) == settings.end())
        error(pos_of(kv.first), who + ": unknown loop setting '" + k + "'" + suggest(k, settings));
    }
  auto setting = [&](const std::string& k) {
    for (const std::string& key : {lp.id + ".loop." + k, lp.id + "." + k})
      if (overrides_.count(key)) return with_override(key, {}, here);
    return with_override(lp.id + ".loop." + k, is_map(set) ? set[k] : YAML::Node(YAML::NodeType::Undefined), pos_of(set));
  };
  const ParamSpec cycles{"max_cycles", ParamType::integer, {}, false, "", 1, 1e6};
  const ParamSpec iters{"max_minor_iterations", ParamType::integer, {}, false, "", 0, 1e12};
  const ParamSpec jy{"threshold", ParamType::number, {}, false, "Jy", 0, {}};
  const ParamSpec sigma{"threshold_sigma", ParamType::number, {}, false, "", 0, {}};
  const ParamSpec gain{"major_gain", ParamType::number, {}, false, "", 1e-6, 1};
  if (auto v = setting("max_cycles"); !v.node.IsDefined())
    error(pos_of(set.IsDefined() ? set : n), who + " has no 'max_cycles': a loop needs its bound, the most cycles it runs");
  else if (auto x = convert(cycles, v, who + " max_cycles"))
    lp.stop.max_cycles = std::get<std::int64_t>(*x), lp.stop_pos["max_cycles"] = v.pos;
  if (auto v = setting("max_minor_iterations"); v.node.IsDefined())
    if (auto x = convert(iters, v, who + " max_minor_iterations"))
      lp.stop.max_minor_iterations = std::get<std::int64_t>(*x), lp.stop_pos["max_minor_iterations"] = v.pos;
  for (auto [spec, member] : {std::pair{&jy, &LoopStop::threshold}, std::pair{&sigma, &LoopStop::threshold_sigma},
                              std::pair{&gain, &LoopStop::major_gain}})
    if (auto v = setting(spec->name); v.node.IsDefined())
      if (auto x = convert(*spec, v, who + " " + spec->name))
        lp.stop.*member = std::get<double>(*x), lp.stop_pos[spec->name] = v.pos;
  if (auto v = setting("figures"); v.node.IsDefined())
    if (auto f = scalar(v, who + " figures")) {
      const auto dot = f->find('.');
      lp.figures = f->substr(0, dot);
      lp.figures_port = dot == std::string::npos ? "figures" : f->substr(dot + 1);
      lp.stop_pos["figures"] = v.pos;
    }
  for (const char* k : {"threshold", "threshold_sigma", "max_minor_iterations"})
    if (lp.stop_pos.count(k) && lp.figures.empty())
      error(lp.stop_pos[k], who + ": '" + k + "' needs 'figures: STAGE.PORT', the body output (CycleFigures) it is read from");

  // The control, then each state, then the body: pseudo-stages come first in the file's order.
  StageInstance control;
  control.id = lp.id + ".control";
  control.pos = here;
  control.role = LoopRole::control;
  control.loop = lp.id;
  static const PortSpec control_out{"control", std::string(CycleControl::type_name), Arity::once, Residency::host,
                                    "the loop's settings for the cycle", false};
  control.spec = own_spec({.type = "loop.control", .summary = "the cycle's CycleControl", .outputs = {control_out}});
  control.backend = "loop";
  plan_.stages.push_back(std::move(control));

  const YAML::Node state = n["state"];
  if (state.IsDefined() && !is_map(state))
    error(pos_of(state), who + ": 'state' must map names to {init: STAGE[.PORT], next: STAGE.PORT}");
  if (is_map(state))
    for (const auto& kv : state) {
      const std::string name = kv.first.Scalar();
      const SourcePos at = pos_of(kv.first);
      static const std::regex id_re("^[A-Za-z_][A-Za-z0-9_]*$");
      if (!std::regex_match(name, id_re)) {
        error(at, who + ": state name '" + name + "' must be letters, digits and '_'");
        continue;
      }
      if (auto i = plan_.index_of(name); i >= 0) {
        error(at, who + ": state '" + name + "': the name is used twice (first at " + plan_.stages[size_t(i)].pos.str() + ")");
        continue;
      }
      const YAML::Node e = kv.second;
      if (!is_map(e) || !e["init"].IsDefined() || !e["next"].IsDefined()) {
        if (is_map(e))
          for (const auto& f : e)
            if (f.first.Scalar() != "init" && f.first.Scalar() != "next")
              error(pos_of(f.first), who + ": state '" + name + "': unknown key '" + f.first.Scalar() + "'" +
                                         suggest(f.first.Scalar(), {"init", "next"}));
        error(is_map(e) ? pos_of(e) : at, who + ": state '" + name + "' needs 'init' (its value on the first cycle, from "
                                              "outside the loop) and 'next' (the body output it takes after each cycle)");
        continue;
      }
      StageInstance st;
      st.id = name;
      st.pos = at;
      st.role = LoopRole::state;
      st.loop = lp.id;
      st.backend = "loop";
      st.spec = own_spec({.type = "loop.state",
                          .summary = "a loop-carried value",
                          .inputs = {any_port("init", "the value on the first cycle")},
                          .outputs = {any_port("value", "the value this cycle")},
                          .describe = [](const ParamValues&, const PortShapes& in) {
                            auto it = in.find("init");
                            return it == in.end() ? PortShapes{} : PortShapes{{"value", it->second}};
                          }});
      ins[name].push_back({"init", Val{e["init"], pos_of(e["init"])}});
      ins[lp.id].push_back({name, Val{e["next"], pos_of(e["next"])}});
      lp.state.push_back({name, "", "", at});
      plan_.stages.push_back(std::move(st));
    }
  if (!state.IsDefined() || (is_map(state) && state.size() == 0))
    error(state.IsDefined() ? pos_of(state) : here, who + " has no 'state': a loop carries at least one value from one cycle to the next");

  const YAML::Node body = n["stages"];
  if (!is_seq(body) || body.size() == 0) error(body.IsDefined() ? pos_of(body) : here, who + ": 'stages' (its body) must be a non-empty list");
  else
    for (const auto& b : body) parse_stage(b, ins, lp.id);

  const YAML::Node outs = n["outputs"];
  if (outs.IsDefined() && !is_map(outs)) error(pos_of(outs), who + ": 'outputs' must map names to STAGE.PORT in the body");
  if (is_map(outs))
    for (const auto& kv : outs) {
      const std::string name = kv.first.Scalar();
      if (std::any_of(lp.state.begin(), lp.state.end(), [&](auto& x) { return x.name == name; }) ||
          std::find(lp.outputs.begin(), lp.outputs.end(), name) != lp.outputs.end()) {
        error(pos_of(kv.first), who + ": output '" + name + "' is also a state or another output: the names share '" +
                                    lp.id + ".NAME'");
        continue;
      }
      lp.outputs.push_back(name);
      ins[lp.id].push_back({name, Val{kv.second, pos_of(kv.second)}});
    }
  StageSpec xs{.type = "loop", .summary = "the values that leave a loop after its last cycle"};
  for (auto& x : lp.state) xs.inputs.push_back(any_port(x.name, "state")), xs.outputs.push_back(any_port(x.name, "state"));
  for (auto& o : lp.outputs) xs.inputs.push_back(any_port(o, "output")), xs.outputs.push_back(any_port(o, "output"));
  xs.describe = [](const ParamValues&, const PortShapes& in) { return in; };
  exit.spec = own_spec(std::move(xs));
  exit.backend = "loop";
  plan_.stages.push_back(std::move(exit));
  plan_.loops.push_back(std::move(lp));
}

// A choice entry: `choose:` names the option that runs (a value, a ${var}, or --set ID.choose=NAME);
// each of `options:` is a list of `stages:` and the `outputs:` it gives the choice (NAME: STAGE or
// STAGE.PORT), which the stages after it read as ID.NAME. Only the chosen option's stages are
// parsed into the plan (`uvflow check` loads the file once per option, so every option is
// validated). Every option must give the same output names: switching cannot unconnect a reader.
void Loader::parse_choice(const YAML::Node& n, std::map<std::string, std::vector<std::pair<std::string, Val>>>& ins,
                          const std::string& loop) {
  static const std::vector<std::string> keys = {"id", "choose", "options", "accuracy"},
                                        option_keys = {"stages", "outputs"};
  const SourcePos here = pos_of(n);
  for (const auto& kv : n)
    if (auto k = kv.first.Scalar(); std::find(keys.begin(), keys.end(), k) == keys.end())
      error(pos_of(kv.first), "unknown choice key '" + k + "'" + suggest(k, keys));
  auto id = parse_id(n, "choice");
  if (!id) return;
  const std::string who = "choice '" + *id + "'";
  Choice choice{here, {}};
  choices_[*id] = choice;  // the id is taken even where the entry has errors
  const YAML::Node opts = n["options"];
  if (!is_map(opts) || opts.size() == 0) {
    error(opts.IsDefined() ? pos_of(opts) : here, who + ": 'options' must map option names to {stages, outputs}");
    return;
  }
  std::vector<std::string> names;
  for (const auto& kv : opts) names.push_back(kv.first.Scalar());
  std::string listed;
  for (auto& o : names) listed += (listed.empty() ? "" : ", ") + o;
  const Val cv = with_override(*id + ".choose", n["choose"], here);
  auto chosen = scalar(cv, who + " 'choose'");
  // `auto` (unless an option has that name): no option is parsed here; once the rest of the file
  // is, choose_automatically() plans each option on its own and keeps the cheapest.
  const bool automatic = chosen && *chosen == "auto" && std::find(names.begin(), names.end(), "auto") == names.end();
  if (chosen && !automatic && std::find(names.begin(), names.end(), *chosen) == names.end()) {
    error(cv.pos, who + ": no option '" + *chosen + "'; the options are " + listed + ", or auto" + suggest(*chosen, names));
    chosen.reset();  // the options are still checked
  }
  double accuracy = 0;
  if (const YAML::Node a = n["accuracy"]; a.IsDefined()) {
    auto text = scalar(Val{a, pos_of(a)}, who + " 'accuracy'");
    char* end = nullptr;
    if (text) accuracy = std::strtod(text->c_str(), &end);
    if (text && (end == text->c_str() || *end || !(accuracy > 0) || accuracy >= 1))
      error(pos_of(a), who + ": 'accuracy' must be a relative error in (0, 1), e.g. 1e-4; got '" + *text + "'");
  }
  std::map<std::string, std::vector<std::string>> option_stages;
  std::set<std::string> first_outputs;
  std::string first_option;
  for (const auto& kv : opts) {
    const std::string name = kv.first.Scalar();
    const std::string where = who + " option '" + name + "'";
    const YAML::Node o = kv.second;
    if (!is_map(o)) {
      error(pos_of(o), where + " must be a mapping with keys stages, outputs");
      continue;
    }
    for (const auto& f : o)
      if (auto k = f.first.Scalar(); std::find(option_keys.begin(), option_keys.end(), k) == option_keys.end())
        error(pos_of(f.first), where + ": unknown key '" + k + "'" + suggest(k, option_keys));
    const YAML::Node stages = o["stages"], outs = o["outputs"];
    if (!is_seq(stages) || stages.size() == 0)
      error(stages.IsDefined() ? pos_of(stages) : pos_of(o), where + ": 'stages' must be a non-empty list");
    if (!is_map(outs) || outs.size() == 0) {
      error(outs.IsDefined() ? pos_of(outs) : pos_of(o), where + ": 'outputs' must map names to STAGE or STAGE.PORT of its stages");
      continue;
    }
    std::set<std::string> given;
    for (const auto& x : outs) given.insert(x.first.Scalar());
    if (first_option.empty()) first_outputs = given, first_option = name;
    else if (given != first_outputs) {
      auto join = [](const std::set<std::string>& v) {
        std::string j;
        for (auto& x : v) j += (j.empty() ? "" : ", ") + x;
        return j;
      };
      error(pos_of(outs), where + " gives outputs " + join(given) + ", option '" + first_option + "' gives " +
                              join(first_outputs) + ": every option must give the same, so that a switch leaves no reader unconnected");
    }
    if (is_seq(stages))
      for (const auto& st : stages)
        if (is_map(st) && is_scalar(st["id"])) option_stages[name].push_back(st["id"].Scalar());
    if (chosen && name == *chosen && !automatic) {
      if (is_seq(stages))
        for (const auto& st : stages) parse_stage(st, ins, loop);
      for (const auto& x : outs) choice.outputs[x.first.Scalar()] = Val{x.second, pos_of(x.second)};
    } else {
      for (const auto& sid : option_stages[name]) automatic ? void(held_.insert(sid)) : void(unchosen_[sid] = where);
    }
  }
  choices_[*id] = std::move(choice);
  if (automatic && !automatic_) automatic_ = ChoicePlan{*id, here, "", names, option_stages, true, accuracy, ""};
  else if (chosen && !automatic) plan_.choices.push_back({*id, here, *chosen, names, option_stages, false, accuracy, ""});
}

void Loader::link_inputs(Plan& plan, std::map<std::string, std::vector<std::pair<std::string, Val>>>& ins) {
  std::map<std::string, int> index;
  std::vector<std::string> ids;
  for (size_t i = 0; i < plan.stages.size(); ++i) index[plan.stages[i].id] = int(i), ids.push_back(plan.stages[i].id);
  for (auto& st : plan.stages) {
    if (!st.spec) continue;
    const std::string what = "stage '" + st.id + "' (" + st.spec->type + ")";
    std::set<std::string> reported;  // inputs whose link was already reported as wrong
    for (auto& [port, v] : ins[st.id]) {
      reported.insert(port);
      const PortSpec* ip = st.spec->input(port);
      if (!ip) {
        error(v.pos, what + ": unknown input '" + port + "'" + suggest(port, names_of(st.spec->inputs)) +
                         (st.spec->inputs.empty() ? "; it has no inputs" : ""));
        continue;
      }
      auto ref = scalar(v, what + " input '" + port + "'");
      if (!ref) continue;
      std::string from = *ref, from_port;
      // A loop's control (LOOP.control) is a stage whose id has a dot.
      auto split = [&] {
        if (auto dot = from.find('.'); dot != std::string::npos && !index.count(from))
          from_port = from.substr(dot + 1), from = from.substr(0, dot);
      };
      split();
      SourcePos at = v.pos;
      std::string guess = port;  // the output port a bare STAGE reads, where it has several
      // A choice's output (CHOICE.NAME) is the chosen option's stage output that it names.
      if (auto c = choices_.find(from); c != choices_.end()) {
        const auto& outs = c->second.outputs;
        if (outs.empty()) continue;  // the choice's own errors are reported
        std::string name = from_port.empty() ? (outs.size() == 1 ? outs.begin()->first : port) : from_port;
        auto o = outs.find(name);
        if (o == outs.end()) {
          std::vector<std::string> known;
          for (auto& [k, _] : outs) known.push_back(k);
          error(v.pos, what + ": input '" + port + "': choice '" + from + "' has no output '" + name + "'" + suggest(name, known));
          continue;
        }
        auto target = scalar(o->second, "choice '" + from + "' output '" + name + "'");
        if (!target) continue;
        from = *target, from_port.clear(), at = o->second.pos, guess = name;
        split();
      }
      auto it = index.find(from);
      if (it == index.end()) {
        auto u = unchosen_.find(from);
        error(at, what + ": input '" + port + "' names " +
                      (u != unchosen_.end() ? "stage '" + from + "' of " + u->second + ", which is not chosen"
                                            : "unknown stage '" + from + "'" + suggest(from, ids)));
        continue;
      }
      const StageInstance& src = plan.stages[it->second];
      if (!src.spec) continue;  // already reported
      if (from_port.empty()) {
        if (src.spec->output(guess)) from_port = guess;
        else if (src.spec->outputs.size() == 1) from_port = src.spec->outputs[0].name;
        else {
          error(at, what + ": input '" + port + "': stage '" + from + "' has " +
                           (src.spec->outputs.empty() ? std::string("no outputs") : "outputs " + [&] {
                             std::string c;
                             for (auto& o : src.spec->outputs) c += (c.empty() ? "" : ", ") + o.name;
                             return c;
                           }() + "; write '" + from + ".PORT'"));
          continue;
        }
      } else if (!src.spec->output(from_port)) {
        error(at, what + ": stage '" + from + "' (" + src.spec->type + ") has no output '" + from_port +
                         "'" + suggest(from_port, names_of(src.spec->outputs)));
        continue;
      }
      st.inputs.push_back({port, it->second, from_port, v.pos});
    }
    for (auto& ip : st.spec->inputs) {
      bool linked = std::any_of(st.inputs.begin(), st.inputs.end(), [&](auto& l) { return l.port == ip.name; });
      if (!linked && !ip.optional && !reported.count(ip.name))
        error(st.pos, what + ": input '" + ip.name + "' (" + ip.type + ", " + to_string(ip.arity) +
                          ") is not connected; add 'in: {" + ip.name + ": STAGE}'");
    }
  }
}

// What may read what across a loop's boundary. Inside a body: the body, its state and control, and
// anything outside the loop (values that stay the same every cycle). Outside: only what leaves a
// loop (LOOP.NAME). A state's init comes from outside its loop; its next and the loop's outputs
// from its body.
void Loader::check_loops(Plan& plan) {
  auto inside = [](const StageInstance& s) { return s.role == LoopRole::body || s.role == LoopRole::state || s.role == LoopRole::control; };
  for (auto& st : plan.stages) {
    if (!st.spec) continue;
    for (auto& l : st.inputs) {
      const StageInstance& p = plan.stages[size_t(l.from)];
      const std::string ref = "'" + p.id + (p.role == LoopRole::control ? "" : "." + l.from_port) + "'";
      switch (st.role) {
        case LoopRole::none:
          if (inside(p))
            error(l.pos, "stage '" + st.id + "' reads " + ref + ", inside loop '" + p.loop +
                             "': what leaves a loop is its state and outputs, read as '" + p.loop + ".NAME'");
          break;
        case LoopRole::body:
          if (inside(p) && p.loop != st.loop)
            error(l.pos, "stage '" + st.id + "' (loop '" + st.loop + "') reads " + ref + ", inside loop '" + p.loop + "'");
          else if (p.role == LoopRole::exit && p.loop == st.loop)
            error(l.pos, "stage '" + st.id + "' reads its own loop's final values '" + p.id +
                             "': inside the loop, read a state by its name");
          break;
        case LoopRole::state:
          if (inside(p) || (p.role == LoopRole::exit && p.loop == st.loop))
            error(l.pos, "loop '" + st.loop + "': state '" + st.id + "': 'init' reads " + ref +
                             ", inside the loop: the first cycle's value comes from outside it");
          break;
        case LoopRole::exit:
          if (p.role != LoopRole::body || p.loop != st.loop)
            error(l.pos, "loop '" + st.loop + "': '" + l.port + "' reads " + ref +
                             ", which is not a stage of the loop's body: a state's next value and an output come "
                             "from the body");
          break;
        case LoopRole::control: break;
      }
    }
  }
  // A body's stages run once per cycle: a file they wrote would be written again each cycle.
  for (auto& st : plan.stages)
    if (st.role == LoopRole::body && st.spec)
      for (auto& ps : st.spec->params)
        if ((ps.role == PathRole::output || ps.role == PathRole::output_per_item) && st.params.has(ps.name)) {
          auto at = st.param_pos.find(ps.name);
          error(at != st.param_pos.end() ? at->second : st.pos,
                "stage '" + st.id + "' (" + st.spec->type + ") in loop '" + st.loop + "' would write '" + ps.name +
                    "' again every cycle: write after the loop, from what leaves it ('" + st.loop + ".NAME')");
        }
  for (auto& lp : plan.loops) {
    if (lp.figures.empty()) continue;
    const SourcePos at = lp.stop_pos.at("figures");
    const int i = plan.index_of(lp.figures);
    if (i < 0 || plan.stages[size_t(i)].role != LoopRole::body || plan.stages[size_t(i)].loop != lp.id) {
      error(at, "loop '" + lp.id + "': figures: '" + lp.figures + "' is not a stage of the loop's body");
      continue;
    }
    const StageInstance& f = plan.stages[size_t(i)];
    const PortSpec* op = f.spec ? f.spec->output(lp.figures_port) : nullptr;
    if (f.spec && (!op || op->type != CycleFigures::type_name))
      error(at, "loop '" + lp.id + "': figures: stage '" + f.id + "' (" + f.spec->type + ") has no " +
                    std::string(CycleFigures::type_name) + " output '" + lp.figures_port + "'");
  }
}

// A state's value must be of the type, arity and place of its next value, which replaces it every
// cycle. Where only the place differs, the state is pinned there (its init then gets a transfer,
// once, outside the loop) and true is returned: the caller plans again.
bool Loader::fix_state_residency(Plan& plan) {
  bool again = false;
  for (auto& lp : plan.loops) {
    const StageInstance& exit = plan.stages[size_t(plan.index_of(lp.id))];
    for (auto& x : lp.state) {
      const StageInstance& st = plan.stages[size_t(plan.index_of(x.name))];
      const OutputInfo& now = st.outputs.at("value");
      const OutputInfo& next = exit.outputs.at(x.name);
      for (auto& l : exit.inputs)
        if (l.port == x.name) x.next = plan.stages[size_t(l.from)].id, x.next_port = l.from_port;
      if (now.type != next.type || now.arity != next.arity) {
        error(x.pos, "loop '" + lp.id + "': state '" + x.name + "': init is " + now.type + " (" + to_string(now.arity) +
                         ") but next '" + x.next + "." + x.next_port + "' is " + next.type + " (" + to_string(next.arity) +
                         "): a state keeps one type");
        continue;
      }
      if (now.location == next.location) continue;
      if (state_location_.count(x.name)) {
        error(x.pos, "loop '" + lp.id + "': state '" + x.name + "': its value cannot be placed where next '" + x.next + "." +
                         x.next_port + "' puts it (" + to_string(next.location) + ")");
        continue;
      }
      state_location_[x.name] = next.location;
      again = true;
    }
  }
  return again;
}

// Orders stages so that producers come first (stable: file order among independent stages).
void Loader::order(Plan& plan) {
  const size_t n = plan.stages.size();
  std::vector<int> indeg(n, 0);
  std::vector<std::vector<int>> out(n);
  for (size_t i = 0; i < n; ++i)
    for (auto& l : plan.stages[i].inputs) out[l.from].push_back(int(i)), indeg[i]++;
  std::vector<int> ord;
  std::vector<bool> done(n, false);
  while (ord.size() < n) {
    int pick = -1;
    for (size_t i = 0; i < n && pick < 0; ++i)
      if (!done[i] && indeg[i] == 0) pick = int(i);
    if (pick < 0) break;
    done[pick] = true;
    ord.push_back(pick);
    for (int j : out[pick]) indeg[j]--;
  }
  if (ord.size() < n) {
    // Walk back along inputs from a stage left over until a stage repeats: that is the cycle.
    int start = 0;
    while (done[start]) ++start;
    std::vector<int> path{start};
    std::set<int> seen{start};
    int cur = start;
    for (;;) {
      int next = -1;
      for (auto& l : plan.stages[cur].inputs)
        if (!done[l.from]) { next = l.from; break; }
      if (seen.count(next)) {
        auto it = std::find(path.begin(), path.end(), next);
        std::vector<int> cyc(it, path.end());
        std::reverse(cyc.begin(), cyc.end());  // producer -> consumer
        std::string s;
        for (int c : cyc) s += plan.stages[c].id + " -> ";
        s += plan.stages[cyc.front()].id;
        error(plan.stages[cyc.front()].pos, "stages form a cycle: " + s);
        return;
      }
      seen.insert(next);
      path.push_back(next);
      cur = next;
    }
  }
  std::vector<StageInstance> sorted;
  std::vector<int> new_index(n);
  for (size_t k = 0; k < n; ++k) new_index[ord[k]] = int(k);
  for (int i : ord) sorted.push_back(std::move(plan.stages[i]));
  for (auto& s : sorted)
    for (auto& l : s.inputs) l.from = new_index[l.from];
  plan.stages = std::move(sorted);
}

static Location resolve(Residency r, const std::string& backend, Location fallback) {
  switch (r) {
    case Residency::host: return Location::host;
    case Residency::device: return Location::device;
    case Residency::backend: return backend == "cuda" ? Location::device : Location::host;
    case Residency::any: return fallback;
  }
  return fallback;
}

void Loader::resolve_residency(Plan& plan) {
  const StageSpec* up = reg_.find("transfer.to_device");
  const StageSpec* down = reg_.find("transfer.to_host");
  std::map<std::string, int> inserted;  // "producer.port.to_device" -> stage index
  const size_t n = plan.stages.size();   // transfers are appended after these, then reordered
  for (size_t i = 0; i < n; ++i) {
    const std::string what = "stage '" + plan.stages[i].id + "' (" + plan.stages[i].spec->type + ", " +
                             plan.stages[i].backend + ")";
    std::optional<OutputInfo> first;
    for (size_t li = 0; li < plan.stages[i].inputs.size(); ++li) {
      const InputLink l = plan.stages[i].inputs[li];
      const PortSpec* ip = plan.stages[i].spec->input(l.port);
      const StageInstance& src = plan.stages[l.from];
      const OutputInfo oi = src.outputs.at(l.from_port);
      const std::string src_name =
          "'" + src.id + "." + l.from_port + "' (" + src.spec->type + ", " + src.backend + ")";
      if (ip->type != kAnyPayload && oi.type != ip->type) {
        error(l.pos, what + ": input '" + l.port + "' expects " + ip->type + " but " + src_name +
                         " produces " + oi.type);
        continue;
      }
      if (ip->arity == Arity::once && oi.arity == Arity::stream) {
        error(l.pos, what + ": input '" + l.port + "' takes one item but " + src_name + " produces a stream");
        continue;
      }
      const Location need = resolve(ip->residency, plan.stages[i].backend, oi.location);
      if (need == oi.location) {
        if (!first) first = oi;
        continue;
      }
      const char* xfer = need == Location::device ? "transfer.to_device" : "transfer.to_host";
      if (plan.run.explicit_transfers) {
        error(l.pos, what + ": input '" + l.port + "' needs " + to_string(need) + " data but " + src_name +
                         " produces " + to_string(oi.location) + " data; with run.transfers: explicit, add a '" +
                         xfer + "' stage between them");
        continue;
      }
      // One transfer per producer port and direction, shared by all its consumers.
      const std::string key = src.id + "." + l.from_port + (need == Location::device ? ".to_device" : ".to_host");
      auto it = inserted.find(key);
      if (it == inserted.end()) {
        StageInstance x;
        x.id = key;
        x.spec = need == Location::device ? up : down;
        x.backend = "cuda";
        x.pos = l.pos;
        x.inserted = true;
        // A copy of a body value runs every cycle, with the body; a copy of an outside value once.
        if (src.role == LoopRole::body || src.role == LoopRole::state || src.role == LoopRole::control)
          x.role = LoopRole::body, x.loop = src.loop;
        x.inputs.push_back({"data", l.from, l.from_port, l.pos});
        x.outputs["data"] = {oi.type, oi.arity, need};
        if (need == Location::device) plan.stages[l.from].pinned_outputs.push_back(l.from_port);
        plan.notes.push_back("inserted " + key + ": " + oi.type + " " + to_string(oi.location) + " -> " +
                             to_string(need));
        plan.stages.push_back(std::move(x));
        it = inserted.emplace(key, int(plan.stages.size() - 1)).first;
      }
      plan.stages[i].inputs[li].from = it->second;
      plan.stages[i].inputs[li].from_port = "data";
      if (!first) first = plan.stages[it->second].outputs.at("data");
    }
    StageInstance& st = plan.stages[i];
    for (auto& op : st.spec->outputs) {
      OutputInfo oi{op.type, op.arity, resolve(op.residency, st.backend, first ? first->location : Location::host)};
      if (op.type == kAnyPayload && first) oi.type = first->type, oi.arity = first->arity;
      if (st.role == LoopRole::exit)  // each value leaves as it is
        for (auto& l : st.inputs)
          if (l.port == op.name) oi = plan.stages[size_t(l.from)].outputs.at(l.from_port);
      st.outputs[op.name] = oi;
    }
  }
  if (plan.stages.size() > n) order(plan);
}

// Each stage's output shapes from its parameters and its inputs' shapes, producers first.
void Loader::describe(Plan& plan) {
  for (auto& st : plan.stages) {
    PortShapes in;
    for (auto& l : st.inputs) in[l.port] = plan.stages[l.from].outputs.at(l.from_port).shape;
    try {
      for (auto& [port, shape] : describe_outputs(*st.spec, st.params, in)) st.outputs.at(port).shape = shape;
    } catch (const std::exception& e) {
      error(st.pos, "stage '" + st.id + "' (" + st.spec->type + "): " + e.what());
    }
  }
}

std::string Loader::printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  return out;
}

// The file as text, then YAML. Reading it here names what is wrong with the path itself (a folder,
// errno's reason) and refuses a binary file before yaml-cpp echoes its bytes; a syntax error on a
// line with a tab says so, as yaml-cpp's "illegal block entry" does not.
YAML::Node Loader::parse_text() {
  const std::string name = file_.string();
  auto fail = [&](int line, int col, const std::string& msg) -> YAML::Node {
    throw ConfigError({{{name, line, col}, printable(msg)}});
  };
  std::string text;
  if (text_) {
    text = *text_;
  } else {
    std::error_code ec;
    if (std::filesystem::is_directory(file_, ec)) return fail(0, 0, "is a folder, not a pipeline file");
    std::FILE* f = std::fopen(file_.c_str(), "rb");
    if (!f) return fail(0, 0, std::string("cannot read the pipeline file: ") + std::strerror(errno));
    char buf[1 << 16];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
    const int read_errno = std::ferror(f) ? errno : 0;
    std::fclose(f);
    if (read_errno) return fail(0, 0, std::string("cannot read the pipeline file: ") + std::strerror(read_errno));
  }
  std::vector<std::size_t> starts{0};  // where each line begins
  for (std::size_t i = 0; i < text.size(); ++i)
    if (text[i] == '\n') starts.push_back(i + 1);
  auto where = [&](std::size_t at) {
    const auto l = std::upper_bound(starts.begin(), starts.end(), at) - starts.begin();
    return std::pair<int, int>(int(l), int(at - starts[l - 1]) + 1);
  };
  if (auto z = text.find('\0'); z != std::string::npos) {
    auto [l, c] = where(z);
    return fail(l, c, "not a text file (a NUL byte here): a pipeline is a YAML text file");
  }
  try {
    return YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    std::string msg = "YAML syntax: " + e.msg;
    // A tab on the error line, or on the line before it (the error is often found one line late).
    for (int l : {e.mark.line, e.mark.line - 1}) {
      if (l < 0 || std::size_t(l) >= starts.size()) continue;
      const std::size_t end = std::size_t(l) + 1 < starts.size() ? starts[l + 1] : text.size();
      if (auto t = text.find('\t', starts[l]); t < end) {
        msg += " (a tab character at line " + std::to_string(l + 1) + ", column " + std::to_string(where(t).second) +
               ": YAML indents with spaces only)";
        break;
      }
    }
    return fail(e.mark.line + 1, e.mark.column + 1, msg);
  }
}

// yaml-cpp keeps both values of a repeated key and answers lookups with one of them; the other is
// then silently ignored (or shows up as a misleading "unknown variable"). Aliases share their
// anchor's position: each node is walked once.
void Loader::find_duplicate_keys(const YAML::Node& n, std::set<std::tuple<int, int, bool>>& seen) {
  if (!n.IsDefined() || !(n.IsMap() || n.IsSequence())) return;
  if (!seen.insert({n.Mark().line, n.Mark().column, n.IsMap()}).second) return;
  if (n.IsSequence()) {
    for (const auto& e : n) find_duplicate_keys(e, seen);
    return;
  }
  std::map<std::string, SourcePos> keys;
  for (const auto& kv : n) {
    if (kv.first.IsScalar()) {
      auto [it, fresh] = keys.emplace(kv.first.Scalar(), pos_of(kv.first));
      if (!fresh)
        error(pos_of(kv.first), "duplicate key '" + kv.first.Scalar() + "' (first at line " +
                                    std::to_string(it->second.line) + ", column " + std::to_string(it->second.col) +
                                    "); a key may appear once in a mapping");
    }
    find_duplicate_keys(kv.second, seen);
  }
}

Plan Loader::load(const std::vector<std::string>& sets) {
  plan_.file = file_;
  YAML::Node root = parse_text();
  std::set<std::tuple<int, int, bool>> seen;
  find_duplicate_keys(root, seen);
  if (!diags_.empty()) throw ConfigError(diags_);  // which of two values counts is unknowable: stop here
  if (!is_map(root)) throw ConfigError({{pos_of(root), "a pipeline file is a mapping with keys schema, name, stages, ..."}});
  parse_sets(sets);
  sets_ = sets;
  static const std::vector<std::string> keys = {"schema", "name", "description", "vars", "run", "plugins", "stages"};
  for (const auto& kv : root) {
    auto k = kv.first.Scalar();
    if (std::find(keys.begin(), keys.end(), k) == keys.end())
      error(pos_of(kv.first), "unknown top-level key '" + k + "'" + suggest(k, keys));
  }
  if (auto s = root["schema"]; !s.IsDefined() || !is_scalar(s) || s.Scalar() != "uvflow/1")
    error(s.IsDefined() ? pos_of(s) : pos_of(root), "'schema: uvflow/1' is required (the file format version)");
  plan_.name = is_scalar(root["name"]) ? root["name"].Scalar() : file_.stem().string();
  plan_.description = is_scalar(root["description"]) ? root["description"].Scalar() : "";
  if (auto v = root["vars"]; v.IsDefined()) {
    if (!is_map(v)) error(pos_of(v), "'vars' must be a mapping of names to values");
    else
      for (const auto& kv : v) vars_[kv.first.Scalar()] = with_override("vars." + kv.first.Scalar(), kv.second, pos_of(kv.second));
  }
  parse_run(root["run"]);
  parse_plugins(root["plugins"]);
  std::map<std::string, std::vector<std::pair<std::string, Val>>> ins;
  if (auto st = root["stages"]; !st.IsDefined() || !is_seq(st) || st.size() == 0)
    error(st.IsDefined() ? pos_of(st) : pos_of(root), "'stages' must be a non-empty list");
  else
    for (const auto& s : st) parse_stage(s, ins);
  for (auto& [k, o] : overrides_) {
    if (o.used) continue;
    std::vector<std::string> ids, vars;
    for (auto& s : plan_.stages) ids.push_back(s.id);
    for (auto& [name, _] : vars_) vars.push_back(name);
    const std::string head = k.substr(0, k.find('.')), rest = k.substr(std::min(k.size(), head.size() + 1));
    const SourcePos where{"--set " + o.text, 0, 0};
    const bool loop = std::any_of(plan_.loops.begin(), plan_.loops.end(), [&](auto& lp) { return lp.id == head; });
    if (held_.count(head)) continue;  // checked when that option is planned
    if (auto u = unchosen_.find(head); u != unchosen_.end())
      error(where, "stage '" + head + "' is in " + u->second + ", which is not chosen: the setting would have no effect");
    else if (choices_.count(head)) error(where, "choice '" + head + "' has one setting, '" + head + ".choose'");
    else if (head == "run") error(where, "unknown key '" + k + "'" + suggest(rest, run_keys()));
    else if (loop)
      error(where, "loop '" + head + "' has no setting '" + rest + "'" + suggest(rest.substr(rest.rfind('.') + 1), loop_settings()));
    else if (head == "vars")
      error(where, "no variable '" + rest + "' to set" +
                       (vars.empty() ? std::string("; the pipeline has no vars") : suggest(rest, vars)));
    else error(where, "no stage '" + head + "' to set" + suggest(head, ids));
  }
  if (automatic_) {
    if (!diags_.empty()) throw ConfigError(diags_);
    return choose_automatically(*automatic_);
  }
  link_inputs(plan_, ins);
  // Each stage checks its parameters together.
  for (auto& st : plan_.stages) {
    if (!st.spec || bad_params_.count(st.id)) continue;  // its values were reported already
    try {
      auto stage = st.spec->backend(st.backend)->make();
      stage->configure(st.params);
    } catch (const ParamError& e) {
      auto it = st.param_pos.find(e.param());
      error(it != st.param_pos.end() ? it->second : st.pos,
            "stage '" + st.id + "' (" + st.spec->type + "): parameter '" + e.param() + "': " + e.what());
    } catch (const std::exception& e) {
      error(st.pos, "stage '" + st.id + "' (" + st.spec->type + "): " + e.what());
    }
  }
  if (diags_.empty()) check_loops(plan_);
  if (diags_.empty()) order(plan_);
  if (diags_.empty()) {
    const Plan unplaced = plan_;
    resolve_residency(plan_);
    // After a type error too: a state whose next has another type also misleads the stages after the loop.
    if (fix_state_residency(plan_) && diags_.empty()) {
      plan_ = unplaced;
      for (auto& [name, loc] : state_location_) {
        StageInstance& st = plan_.stages[size_t(plan_.index_of(name))];
        StageSpec pinned = *st.spec;
        pinned.inputs[0].residency = loc == Location::device ? Residency::device : Residency::host;
        st.spec = own_spec(std::move(pinned));
      }
      resolve_residency(plan_);
      if (diags_.empty()) fix_state_residency(plan_);
    }
  }
  if (diags_.empty()) describe(plan_);
  if (!diags_.empty()) throw ConfigError(diags_);
  return std::move(plan_);
}

// Each option of the first automatic choice is planned as if chosen (the user's settings of the
// other options' stages left out), its stages estimated (graph/estimate.hpp), and the plan of the
// fastest whose predicted error is within the choice's accuracy kept. A later automatic choice is
// resolved the same way inside each of those loads. An option that does not plan (a setting it
// cannot meet, e.g. an epsilon beyond its reach) or whose estimate says it cannot run is passed
// over, and `why` says so; none left is a configuration error.
Plan Loader::choose_automatically(const ChoicePlan& c) {
  struct Option {
    std::string name;
    std::optional<Plan> plan;
    double seconds = 0, error = 0;
    std::string detail, passed_over;
  };
  auto g = [](double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.3g", v);
    return std::string(b);
  };
  std::vector<Option> options;
  for (const auto& name : c.options) {
    Option o{name};
    std::vector<std::string> sets;
    for (const auto& set : sets_) {
      const std::string head = set.substr(0, set.find_first_of(".="));
      bool other = false;
      for (const auto& [option, ids] : c.option_stages)
        other |= option != name && std::find(ids.begin(), ids.end(), head) != ids.end();
      if (!other) sets.push_back(set);
    }
    sets.push_back(c.id + ".choose=" + name);
    try {
      Plan p = Loader(file_, reg_, plugin_path_, load_plugins_, text_, estimate_).load(sets);
      if (!estimate_) return p;
      const auto& ids = c.option_stages.at(name);
      for (const auto& sc : estimate_stages(p)) {
        if (std::find(ids.begin(), ids.end(), sc.id) == ids.end()) continue;
        if (!o.detail.empty()) o.detail += ", ";
        if (!sc.estimated) {
          o.detail += sc.id + " not estimated";
          continue;
        }
        o.seconds += sc.est.seconds;
        o.error = std::max(o.error, sc.est.error);
        o.detail += sc.id + " " + g(sc.est.seconds) + " s" + (sc.est.basis.empty() ? "" : " (" + sc.est.basis + ")");
      }
      if (c.accuracy > 0 && o.error > c.accuracy)
        o.passed_over = "its predicted error " + g(o.error) + " is above the accuracy " + g(c.accuracy);
      o.plan = std::move(p);
    } catch (const ConfigError& e) {
      // A setting this option cannot meet (epsilon beyond its reach): `uvflow check` reports it as an error.
      for (const auto& d : e.diagnostics()) o.passed_over += (o.passed_over.empty() ? "" : "; ") + d.str();
    } catch (const std::exception& e) {
      o.passed_over = e.what();
    }
    options.push_back(std::move(o));
  }
  Option* best = nullptr;
  for (auto& o : options)
    if (o.passed_over.empty() && (!best || o.seconds < best->seconds)) best = &o;
  std::string why;
  for (const auto& o : options) {
    why += "; " + o.name + ": ";
    why += o.passed_over.empty() ? "estimated " + g(o.seconds) + " s" + (o.error > 0 ? ", predicted error " + g(o.error) : "")
                                 : "passed over: " + o.passed_over;
    if (!o.detail.empty()) why += " [" + o.detail + "]";
  }
  if (!best)
    throw ConfigError({{c.pos, "choice '" + c.id + "': choose auto found no option that can run" + why}});
  why = "auto picked " + best->name + why;
  Plan plan = std::move(*best->plan);
  for (auto& pc : plan.choices)
    if (pc.id == c.id) pc.automatic = true, pc.accuracy = c.accuracy, pc.why = why;
  return plan;
}

}  // namespace

Plan load_plan(const std::filesystem::path& file, const std::vector<std::string>& sets, Registry& registry,
               const std::vector<std::filesystem::path>& plugin_path, bool load_plugins, bool estimate) {
  return Loader(file, registry, plugin_path, load_plugins, std::nullopt, estimate).load(sets);
}

Plan load_plan_text(const std::string& text, const std::filesystem::path& name, const std::vector<std::string>& sets,
                    Registry& registry, const std::vector<std::filesystem::path>& plugin_path) {
  return Loader(name, registry, plugin_path, true, text).load(sets);
}

int Plan::index_of(std::string_view id) const {
  for (size_t i = 0; i < stages.size(); ++i)
    if (stages[i].id == id) return int(i);
  return -1;
}

PrepareContext prepare_context(const Plan& plan, const StageInstance& st, bool dry_run, device::Stream stream) {
  PrepareContext pc{.id = st.id, .backend = st.backend, .dry_run = dry_run, .pinned_outputs = st.pinned_outputs,
                    .stream = std::move(stream)};
  for (auto& l : st.inputs) pc.inputs[l.port] = plan.stages[l.from].outputs.at(l.from_port).shape;
  for (auto& [port, oi] : st.outputs) pc.outputs[port] = oi.shape;
  return pc;
}

std::string plan_to_text(const Plan& p) {
  std::ostringstream s;
  s << "pipeline " << p.name << " (" << p.file.string() << "): " << p.stages.size() << " stages, max_in_flight "
    << p.run.max_in_flight << ", transfers " << (p.run.explicit_transfers ? "explicit" : "auto") << "\n";
  for (size_t i = 0; i < p.stages.size(); ++i) {
    auto& st = p.stages[i];
    s << "  " << i + 1 << ". " << st.id << "  " << st.spec->type << " [" << st.backend << "]"
      << (st.inserted ? "  (inserted)" : "") << (st.role != LoopRole::none && st.role != LoopRole::exit ? "  (in loop " + st.loop + ")" : "")
      << "\n";
    for (auto& l : st.inputs) {
      auto& src = p.stages[l.from];
      auto& oi = src.outputs.at(l.from_port);
      s << "       " << l.port << " <- " << src.id << "." << l.from_port << "  " << oi.type << ", "
        << to_string(oi.arity) << ", " << to_string(oi.location);
      if (oi.shape.sized()) s << ", " << oi.shape.nx << " x " << oi.shape.ny;
      if (oi.shape.grid) s << ", grid " << oi.shape.grid->grid_size << " for image " << oi.shape.grid->image_size;
      s << "\n";
    }
  }
  for (auto& n : p.notes) s << "  note: " << n << "\n";
  for (auto& c : p.choices) {
    s << "  choice " << c.id << ": option " << c.chosen << " (of";
    for (auto& o : c.options) s << " " << o;
    s << "; set " << c.id << ".choose to switch)\n";
    if (c.automatic) s << "    " << c.why << "\n";
  }
  for (auto& lp : p.loops) {
    s << "  loop " << lp.id << ": at most " << lp.stop.max_cycles << " cycles";
    if (lp.stop.threshold > 0) s << ", until the peak residual is at most " << lp.stop.threshold << " Jy";
    if (lp.stop.threshold_sigma > 0) s << ", until it is at most " << lp.stop.threshold_sigma << " x the noise";
    if (lp.stop.max_minor_iterations > 0) s << ", at most " << lp.stop.max_minor_iterations << " minor iterations in all";
    if (lp.stop.major_gain < 1) s << ", major gain " << lp.stop.major_gain;
    if (!lp.figures.empty()) s << " (figures from " << lp.figures << "." << lp.figures_port << ")";
    s << "; each cycle runs";
    for (auto& st : p.stages)
      if (st.role == LoopRole::body && st.loop == lp.id) s << " " << st.id;
    s << "\n";
    const StageInstance& exit = p.stages[size_t(p.index_of(lp.id))];
    for (auto& x : lp.state) {
      const OutputInfo& oi = exit.outputs.at(x.name);
      const StageInstance& st = p.stages[size_t(p.index_of(x.name))];
      s << "    state " << x.name << " <- " << p.stages[size_t(st.inputs.at(0).from)].id << "." << st.inputs.at(0).from_port
        << " first, then " << x.next << "." << x.next_port << "  " << oi.type << ", " << to_string(oi.arity) << ", "
        << to_string(oi.location) << " (stays there between cycles)\n";
    }
  }
  return s.str();
}

std::string plan_to_dot(const Plan& p) {
  std::ostringstream s;
  s << "digraph \"" << p.name << "\" {\n  rankdir=LR;\n  node [shape=box, fontname=\"monospace\"];\n";
  for (auto& st : p.stages) {
    s << "  \"" << st.id << "\" [label=\"" << st.id << "\\n" << st.spec->type << " [" << st.backend << "]\"";
    if (st.inserted) s << ", style=dashed, color=red";
    else if (st.role != LoopRole::none) s << ", style=rounded";
    else if (st.backend == "cuda") s << ", style=filled, fillcolor=\"#d8f0d8\"";
    s << "];\n";
  }
  for (auto& st : p.stages)
    for (auto& l : st.inputs) {
      auto& src = p.stages[l.from];
      auto& oi = src.outputs.at(l.from_port);
      s << "  \"" << src.id << "\" -> \"" << st.id << "\" [label=\"" << l.from_port << "->" << l.port << "\\n"
        << oi.type << " (" << to_string(oi.location) << (oi.arity == Arity::once ? ", once" : "") << ")\""
        << (oi.location == Location::device ? ", color=darkgreen" : "") << "];\n";
    }
  // A loop's state: its next value goes back to it for the next cycle.
  for (auto& lp : p.loops)
    for (auto& x : lp.state)
      if (!x.next.empty())
        s << "  \"" << x.next << "\" -> \"" << x.name << "\" [label=\"next cycle\", style=dashed, constraint=false];\n";
  s << "}\n";
  return s.str();
}

}  // namespace uvflow
