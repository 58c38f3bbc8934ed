// The `uvflow` command: run, check, plan, stages, describe.
#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>
#include <thread>

#include "cli/describe.hpp"
#include "cli/errors.hpp"
#include "graph/executor.hpp"
#include "graph/pipeline.hpp"
#include "graph/preflight.hpp"
#include "runtime/device.hpp"
#include "runtime/dist.hpp"
#include "runtime/kernel_cache.hpp"
#include "runtime/registry.hpp"
#include "stages/builtin.hpp"
#include "uvflow_version.hpp"

using namespace uvflow;

namespace {

int code(ExitCode c) { return static_cast<int>(c); }

void print_config_error(const ConfigError& e) { std::cerr << config_error_text(e); }

std::string version() {
  return std::string("uvflow ") + UVFLOW_VERSION +
         (*UVFLOW_GIT_COMMIT ? std::string(" (commit ") + UVFLOW_GIT_COMMIT + ")" : std::string()) +
         (!device::compiled()      ? ", CUDA off (built without nvcc)"
          : device::count() > 0    ? ", CUDA on: " + device::describe(0)
                                   : std::string(", CUDA on: no CUDA device here")) +
         (dist::compiled() ? ", MPI on" : ", MPI off (built without MPI)");
}

// The command word: the first argument that is neither an option nor a global option's value.
// CLI11 alone says "A subcommand is required" for a misspelt one.
std::string command_word(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--plugin" || a == "--plugin-path") ++i;
    else if (a.empty() || a[0] != '-') return a;
  }
  return "";
}

// Warnings go to stderr like errors; -q leaves only the errors.
// `shown`: the warnings printed already (a check of several options of a choice finds most again).
void print_warnings(const PreflightResult& r, bool quiet, std::set<std::string>* shown = nullptr) {
  if (quiet) return;
  for (auto& w : r.warnings)
    if (!shown || shown->insert(warning_str(w)).second) std::cerr << warning_str(w) << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  device::prefer_eager_module_loading();
  CLI::App app{"uvflow: YAML dataflow pipelines for radio-astronomy imaging (oneTBB, CUDA)"};
  app.require_subcommand(1);
  app.fallthrough();  // global options (--plugin, --plugin-path, -v, -q) may follow the subcommand too
  app.footer(
      "Exit codes: 0 ok, 2 usage, 3 invalid pipeline (nothing ran), 4 unusable input data,\n"
      "5 a stage failed or an output could not be written, 6 internal error,\n"
      "130/143/129/131 interrupted by SIGINT (Ctrl-C)/SIGTERM/SIGHUP/SIGQUIT.");
  std::vector<std::string> plugins, plugin_path;
  bool verbose = false, quiet = false;
  app.add_option("--plugin", plugins, "load a stage plugin (.so) before anything else");
  app.add_option("--plugin-path", plugin_path, "folder searched for the plugins a pipeline names");
  app.add_flag("-v,--verbose", verbose, "debug logging");
  app.add_flag("-q,--quiet", quiet, "errors only: no warnings, no run table, no 'ok' lines");
  app.set_version_flag("--version", std::function<std::string()>(version),
                       "the version, the git commit it was built from, CUDA on or off (and the device), MPI on or off");

  std::string file;
  std::vector<std::string> sets;
  auto* run = app.add_subcommand("run", "run a pipeline");
  std::string report;
  bool no_progress = false;
  run->add_option("file", file, "pipeline YAML")->required();
  run->add_option("--set", sets, "override KEY=VALUE (STAGE.PARAM, STAGE.backend, vars.NAME, run.KEY)");
  run->add_option("--report", report, "write the run report as JSON here (overrides run.report)");
  run->add_flag("--no-progress", no_progress, "no progress line on a terminal");

  std::vector<std::string> files;
  auto* check = app.add_subcommand("check", "validate pipelines without running them (all errors at once)");
  check->add_option("files", files, "pipeline YAML files")->required();
  check->add_option("--set", sets, "override KEY=VALUE");

  auto* plan = app.add_subcommand("plan", "show the planned graph: order, residency, inserted transfers");
  bool dot = false;
  plan->add_option("file", file, "pipeline YAML")->required();
  plan->add_option("--set", sets, "override KEY=VALUE");
  plan->add_flag("--dot", dot, "Graphviz output");

  auto* stages = app.add_subcommand("stages", "list every registered stage");
  bool markdown = false;
  stages->add_flag("--markdown", markdown, "full reference in Markdown (docs/stages.md is this)");

  auto* describe = app.add_subcommand("describe", "one stage in full: ports, parameters, backends");
  std::string type;
  describe->add_option("type", type, "stage type, e.g. grid.tiled")->required();

  auto* cache = app.add_subcommand("cache", "the kernel cache: its files and size; 'uvflow cache clear' empties it");
  std::string cache_action;
  cache->add_option("action", cache_action, "clear: remove every cached file")->check(CLI::IsMember({"clear"}));

  std::vector<std::string> commands;
  for (auto* c : app.get_subcommands([](CLI::App*) { return true; })) commands.push_back(c->get_name());
  std::string list;
  for (auto& c : commands) list += (list.empty() ? "" : ", ") + c;
  const std::string word = command_word(argc, argv);
  try {
    if (!word.empty() && std::find(commands.begin(), commands.end(), word) == commands.end()) {
      const std::string c = closest(word, commands);
      std::cerr << "error: unknown command '" << word << "'" << (c.empty() ? "" : " (did you mean '" + c + "'?)")
                << "; the commands are " << list << " ('uvflow --help' says more)\n";
      return code(ExitCode::usage);
    }
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (word.empty() && dynamic_cast<const CLI::RequiredError*>(&e)) {
      std::cerr << "error: no command given; the commands are " << list << " ('uvflow --help' says more)\n";
      return code(ExitCode::usage);
    }
    int rc = app.exit(e);
    return rc == 0 ? 0 : code(ExitCode::usage);
  }

  auto log = spdlog::stderr_color_mt("uvflow");
  spdlog::set_default_logger(log);
  spdlog::set_pattern("[uvflow] %^%l%$: %v");
  spdlog::set_level(quiet ? spdlog::level::err : verbose ? spdlog::level::debug : spdlog::level::info);

  // `mpirun -np N uvflow run`: this process is one rank of N (docs/distributed.md). A rank that
  // fails ends every rank (end()), after printing its message, prefixed with its rank.
  std::optional<dist::Session> mpi;
  if (*run) mpi.emplace(argc, argv);
  auto end = [&](int rc, bool signalled = false) { return mpi ? mpi->end(rc, signalled) : rc; };
  const std::string who = dist::size() > 1 ? "rank " + std::to_string(dist::rank()) + ": " : "";
  if (dist::size() > 1) {
    spdlog::set_pattern("[uvflow " + std::to_string(dist::rank()) + "] %^%l%$: %v");
    if (!dist::root()) spdlog::set_level(spdlog::level::warn);  // rank 0 says what they all do
  }

  Registry registry;
  register_builtin_stages(registry);
  std::vector<std::filesystem::path> search(plugin_path.begin(), plugin_path.end());
  try {
    // A path the user typed is relative to where they are (dlopen would search library folders for a bare name).
    for (auto& p : plugins) registry.load_plugin(std::filesystem::absolute(p));
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return code(ExitCode::config);
  }

  try {
    if (*cache) {
      const auto dir = kernel_cache::expand(kernel_cache::kDefaultDir);
      std::cout << (cache_action == "clear" ? kernel_cache::clear(dir) : kernel_cache::listing(dir));
      return 0;
    }
    if (*stages) {
      std::cout << (markdown ? stages_markdown(registry) : stages_summary(registry));
      return 0;
    }
    if (*describe) {
      const StageSpec* s = registry.find(type);
      if (!s) {
        std::cerr << unknown_stage_text(type, registry);
        return code(ExitCode::usage);
      }
      std::cout << describe_stage(*s);
      return 0;
    }
    if (*check) {
      int bad = 0;
      for (auto& f : files) {
        try {
          Plan p = load_plan(f, sets, registry, search);
          const PreflightResult pf = preflight(p, PreflightFor::check, registry, search);
          std::set<std::string> shown;
          print_warnings(pf, quiet, &shown);
          if (!pf.errors.empty()) throw ConfigError(pf.errors);
          // The options not chosen are validated too, each as if chosen (a --set of the user's wins).
          // The user's settings of stages that option does not have are left out: they are for the
          // option chosen (found by loading it once with the variables and choices alone).
          auto head = [](const std::string& s) { return s.substr(0, s.find_first_of(".=")); };
          for (auto& c : p.choices)
            for (auto& o : c.options) {
              const std::string key = c.id + ".choose=";
              if (o == c.chosen || std::any_of(sets.begin(), sets.end(), [&](auto& s) { return s.rfind(key, 0) == 0; }))
                continue;
              std::set<std::string> keep = {"vars", "run"};
              for (auto& other : p.choices) keep.insert(other.id);
              auto kept = [&] {
                std::vector<std::string> with;
                for (auto& s : sets)
                  if (keep.count(head(s))) with.push_back(s);
                with.push_back(key + o);
                return with;
              };
              std::vector<Diagnostic> errors;
              try {
                for (auto& st : load_plan(f, kept(), registry, search).stages) keep.insert(st.id);
                Plan alt = load_plan(f, kept(), registry, search);
                const PreflightResult apf = preflight(alt, PreflightFor::check, registry, search);
                print_warnings(apf, quiet, &shown);
                errors = apf.errors;
              } catch (const ConfigError& e) {
                errors = e.diagnostics();
              }
              for (auto& d : errors) d.message = "with " + key + o + ": " + d.message;
              if (!errors.empty()) throw ConfigError(errors);
            }
          if (quiet) continue;
          std::cout << f << ": ok (" << p.stages.size() << " stages";
          if (!p.notes.empty()) std::cout << ", " << p.notes.size() << " transfers inserted";
          if (!pf.warnings.empty())
            std::cout << ", " << pf.warnings.size() << (pf.warnings.size() == 1 ? " warning" : " warnings");
          std::cout << ")\n";
        } catch (const ConfigError& e) {
          print_config_error(e);
          ++bad;
        }
      }
      return bad ? code(ExitCode::config) : 0;
    }
    if (*plan) {
      Plan p = load_plan(file, sets, registry, search);
      std::cout << (dot ? plan_to_dot(p) : plan_to_text(p));
      return 0;
    }
    if (*run) {
      Plan p = load_plan(file, sets, registry, search);
      if (!report.empty()) p.run.report = report, p.run.report_pos = {"--report " + report, 0, 0};
      // Everything knowable without computing, before anything computes.
      const PreflightResult pf = preflight(p, PreflightFor::run, registry, search);
      print_warnings(pf, quiet);
      if (!pf.errors.empty()) throw ConfigError(pf.errors);
      for (auto& n : p.notes) spdlog::info("plan: {}", n);
      install_signal_handlers();
      const std::string rp = p.run.report;
      RunReport r = run_plan(p, ExecOptions{.progress = !no_progress && !quiet, .report = rp});  // commits the report too
      if (!quiet && dist::root()) {
        std::cout << format_report(r);
        if (!rp.empty()) std::cout << "report " << rp << "\n";
      }
      return 0;
    }
  } catch (const ConfigError& e) {
    // Every rank loads the same file, so rank 0 says what is wrong. Another rank says it only when
    // rank 0 has not ended the job within a pause: the problem is in its environment alone.
    if (!dist::root()) {
      std::this_thread::sleep_for(std::chrono::seconds(2));
      std::cerr << who << "\n";
    }
    print_config_error(e);
    return end(code(ExitCode::config));
  } catch (const StageError& e) {
    std::cerr << who << "error: " << e.what() << "\n";
    if (e.code() != ExitCode::internal)
      std::cerr << "the run was cancelled" << (who.empty() ? "" : " on every rank") << "; no output file was written\n";
    return end(code(e.code()));
  } catch (const Interrupted& e) {
    const std::string sig = e.signal() == SIGINT ? "" : std::string(" (SIG") + sigabbrev_np(e.signal()) + ")";
    if (who.empty())
      std::cerr << "interrupted" << sig << ": the run was cancelled; no output file was written\n";
    else if (dist::root())  // mpirun signals every rank: when the job is interrupted, and when a rank failed
      std::cerr << "stopped by mpirun with SIG" << sigabbrev_np(e.signal())
                << ": the job was interrupted, or another rank failed (and said why); no output file was written\n";
    return end(e.exit_code(), true);
  } catch (const OutputError& e) {
    std::cerr << who << "error: " << e.what() << "\n";
    return end(code(ExitCode::runtime));
  } catch (const InputError& e) {
    std::cerr << who << "error: " << e.what() << "\n";
    return end(code(ExitCode::input));
  } catch (const std::bad_alloc& e) {
    std::cerr << who << "error: " << error_text(e) << "\n";
    return end(code(ExitCode::runtime));
  } catch (const std::exception& e) {
    std::cerr << who << "internal error: " << e.what() << "\n";
    return end(code(ExitCode::internal));
  }
  return 0;
}
