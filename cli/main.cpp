// The `uvflow` command: run, check, plan, stages, describe.
#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <fstream>
#include <iostream>

#include "cli/describe.hpp"
#include "graph/executor.hpp"
#include "graph/pipeline.hpp"
#include "runtime/device.hpp"
#include "runtime/registry.hpp"
#include "stages/builtin.hpp"

using namespace uvflow;

namespace {

int code(ExitCode c) { return static_cast<int>(c); }

void print_config_error(const ConfigError& e) {
  for (auto& d : e.diagnostics()) std::cerr << d.str() << "\n";
  std::cerr << e.diagnostics().size() << (e.diagnostics().size() == 1 ? " error" : " errors")
            << "; nothing was run\n";
}

void write_file(const std::string& path, const std::string& text) {
  auto p = std::filesystem::path(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  std::ofstream f(path);
  f << text;
  if (!f) throw std::runtime_error("cannot write " + path);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"uvflow: YAML dataflow pipelines for radio-astronomy imaging (oneTBB, CUDA)"};
  app.require_subcommand(1);
  app.fallthrough();  // global options (--plugin, --plugin-path, -v, -q) may follow the subcommand too
  app.footer(
      "Exit codes: 0 ok, 2 usage, 3 invalid pipeline (nothing ran), 4 unusable input data,\n"
      "5 a stage failed, 6 internal error, 130 interrupted.");
  std::vector<std::string> plugins, plugin_path;
  bool verbose = false, quiet = false;
  app.add_option("--plugin", plugins, "load a stage plugin (.so) before anything else");
  app.add_option("--plugin-path", plugin_path, "folder searched for the plugins a pipeline names");
  app.add_flag("-v,--verbose", verbose, "debug logging");
  app.add_flag("-q,--quiet", quiet, "errors only");

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

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : code(ExitCode::usage);
  }

  auto log = spdlog::stderr_color_mt("uvflow");
  spdlog::set_default_logger(log);
  spdlog::set_pattern("[uvflow] %^%l%$: %v");
  spdlog::set_level(quiet ? spdlog::level::err : verbose ? spdlog::level::debug : spdlog::level::info);

  Registry registry;
  register_builtin_stages(registry);
  std::vector<std::filesystem::path> search(plugin_path.begin(), plugin_path.end());
  try {
    for (auto& p : plugins) registry.load_plugin(p);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return code(ExitCode::config);
  }

  try {
    if (*stages) {
      std::cout << (markdown ? stages_markdown(registry) : stages_summary(registry));
      return 0;
    }
    if (*describe) {
      const StageSpec* s = registry.find(type);
      if (!s) {
        std::string c = closest(type, registry.types());
        std::cerr << "error: unknown stage type '" << type << "'"
                  << (c.empty() ? "" : " (did you mean '" + c + "'?)") << "\n";
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
          dry_run_prepare(p);
          std::cout << f << ": ok (" << p.stages.size() << " stages";
          if (!p.notes.empty()) std::cout << ", " << p.notes.size() << " transfers inserted";
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
      for (auto& n : p.notes) spdlog::info("plan: {}", n);
      install_interrupt_handler();
      RunReport r = run_plan(p, ExecOptions{!no_progress && !quiet});
      std::cout << format_report(r);
      std::string rp = report.empty() ? p.run.report : report;
      if (!rp.empty()) {
        write_file(rp, report_json(r));
        std::cout << "report " << rp << "\n";
      }
      return 0;
    }
  } catch (const ConfigError& e) {
    print_config_error(e);
    return code(ExitCode::config);
  } catch (const StageError& e) {
    std::cerr << "error: " << e.what() << "\n";
    if (e.code() != ExitCode::internal) std::cerr << "the run was cancelled; no output file was written\n";
    return code(e.code());
  } catch (const Interrupted&) {
    std::cerr << "interrupted: the run was cancelled; no output file was written\n";
    return code(ExitCode::interrupted);
  } catch (const InputError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return code(ExitCode::input);
  } catch (const std::exception& e) {
    std::cerr << "internal error: " << e.what() << "\n";
    return code(ExitCode::internal);
  }
  return 0;
}
