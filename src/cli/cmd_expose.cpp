// metaop expose: searches inputs (or weights) that drive a model into NaN/INF, with objectives
// from the meta operators' danger zones; exit 1 when something is exposed.
#include <fmt/core.h>
#include <unistd.h>

#include <fstream>

#include "analysis/expose/expose.h"
#include "bindings/binding.h"
#include "bindings/factory.h"
#include "cli/commands.h"
#include "cli/host.h"
#include "cli/inputs.h"
#include "cli/plan_options.h"
#include "engine/executor.h"
#include "graph/onnx_io.h"
#include "report/expose/expose_report.h"

namespace metaop::cli {

namespace {

struct ExposeArgs {
  std::string model;
  std::vector<std::string> inputs;
  bool random_inputs = false;
  std::string range = "-1,1";
  std::uint64_t seed = 0;
  std::string vary = "inputs";
  double weight_radius = 1.0;
  std::vector<std::string> clip;
  bool clip_from_inputs = false;
  std::string bind = "torch";
  std::string strategy = "gradient";
  double time_limit = 60;
  std::int64_t iterations = 0;
  std::string out_dir = "metaop-expose";
  std::string json_file;
  std::string report_dir;
  bool progress = false;
  bool no_constant_starts = false;
  bool stop_at_first = false;
  bool no_binding_distances = false;
  int threads = 1;
};

std::pair<double, double> parse_box(const std::string& option, const std::string& s) {
  try {
    return parse_range(s);
  } catch (const Error&) {
    fail("{} '{}': expected LO,HI with LO <= HI", option, s);
  }
}

// The --clip boxes of single inputs into opt; returns the box of every input ("" when none).
std::string parse_clips(const ExposeArgs& a, ExposeOptions& opt) {
  std::string global_clip;
  for (const auto& c : a.clip) {
    auto eq = c.find('=');
    if (eq == std::string::npos) {
      if (!global_clip.empty()) fail("--clip {}: a second box for every input", c);
      global_clip = c;
    } else {
      opt.input_clip[c.substr(0, eq)] = parse_box("--clip " + c.substr(0, eq), c.substr(eq + 1));
    }
  }
  if (!global_clip.empty() && a.clip_from_inputs)
    fail("--clip {} and --clip-from-inputs: give one of them", global_clip);
  return global_clip;
}

int run(const ExposeArgs& a) {
  ExposeOptions opt;
  if (a.vary == "inputs")
    opt.vary = ExposeVary::Inputs;
  else if (a.vary == "weights")
    opt.vary = ExposeVary::Weights;
  else if (a.vary == "both")
    opt.vary = ExposeVary::Both;
  else if (!a.vary.empty()) {
    opt.vary = ExposeVary::Both;
    opt.vary_names = split_list(a.vary);
  } else
    fail("--vary '': expected inputs, weights, both or NAME[,NAME...]");
  if (a.strategy == "gradient")
    opt.strategy = ExposeStrategy::Gradient;
  else if (a.strategy == "grist")
    opt.strategy = ExposeStrategy::Grist;
  else if (a.strategy == "random")
    opt.strategy = ExposeStrategy::Random;
  else
    fail("--strategy {}: expected gradient, grist or random", a.strategy);
  auto known = binding_names();
  if (std::find(known.begin(), known.end(), a.bind) == known.end())
    fail("--bind {}: unknown binding (known: {})", a.bind, fmt::join(known, ", "));
  std::string global_clip = parse_clips(a, opt);
  if (a.threads < 1) fail("--threads {}: must be at least 1", a.threads);
  if (a.iterations < 0) fail("--iterations {}: must be 0 (no cap) or more", a.iterations);
  if (!(a.time_limit > 0)) fail("--time-limit {}: must be above 0 seconds", a.time_limit);
  if (!(a.weight_radius >= 0)) fail("--weight-radius {}: must be 0 or more", a.weight_radius);
  auto range = parse_range(a.range);
  opt.clip = global_clip.empty() ? range : parse_box("--clip", global_clip);
  opt.clip_from_inputs = a.clip_from_inputs;
  opt.weight_radius = a.weight_radius;
  opt.binding = a.bind;
  opt.time_limit = a.time_limit;
  opt.iterations = a.iterations;
  opt.seed = a.seed;
  opt.constant_starts = !a.no_constant_starts;
  opt.stop_at_first = a.stop_at_first;
  opt.binding_distances = !a.no_binding_distances;
  set_threads(a.threads);

  Graph g = load_onnx(a.model);
  InputSpec spec{a.inputs, a.random_inputs, a.seed, range};
  auto [inputs, sources] = gather_inputs(g, spec);
  validate_inputs(g, inputs, sources);

  // On stderr (a terminal, or --progress), or to the host.
  bool on_stderr = !host() && (a.progress || isatty(STDERR_FILENO));
  if (on_stderr || progress_shown())
    opt.progress = [limit = a.time_limit, last = -1.0](std::int64_t done, std::int64_t total,
                                                       double seconds, std::size_t exposed,
                                                       std::size_t targets) mutable {
      if (seconds - last < 0.1 && done != total) return;  // a few updates a second
      last = seconds;
      double by_steps = total > 0 ? static_cast<double>(done) / static_cast<double>(total) : 0;
      double f = std::min(1.0, std::max(by_steps, seconds / limit));
      auto text = fmt::format("{} steps  {:.1f}/{:.0f} s  exposed {}/{} targets", done, seconds,
                              limit, exposed, targets);
      if (host()) return show_progress(text, f);
      int width = 30, filled = static_cast<int>(width * f);
      fmt::print(stderr, "\r[{}{}] {}", std::string(filled, '#'), std::string(width - filled, '-'),
                 text);
    };
  ExposeResult r = expose_model(g, inputs, opt);
  if (on_stderr) fmt::print(stderr, "\r\033[K");

  write_expose_files(r, a.model, a.out_dir);
  print_expose_summary(stdout, g, r, a.model);
  if (!a.json_file.empty()) {
    std::ofstream(a.json_file) << expose_to_json(r, a.model).dump(1) << '\n';
    fmt::print("wrote {}\n", a.json_file);
  }
  if (!a.report_dir.empty()) {
    write_expose_html(g, r, a.model, a.report_dir);
    fmt::print("wrote {}/index.html\n", a.report_dir);
  }
  return r.exposed() ? 1 : 0;
}

}  // namespace

void add_expose_command(CLI::App& app, Action& action) {
  auto a = std::make_shared<ExposeArgs>();
  auto* cmd = app.add_subcommand(
      "expose",
      "Search inputs (or weights) that drive a model into NaN/INF, aimed at the danger zones of "
      "its ops (exit 0 nothing exposed, 1 exposed, 2 bad input)");
  cmd->add_option("model", a->model, "ONNX model")->required();
  cmd->add_option("--input", a->inputs,
                  "Start point: input file (.npy or .pb) as FILE or NAME=FILE");
  cmd->add_flag("--random-inputs", a->random_inputs,
                "Start inputs not given from seeded uniform values in --range");
  cmd->add_option("--range", a->range, "LO,HI of random inputs, and the default clip box")
      ->capture_default_str();
  cmd->add_option("--seed", a->seed, "Seed of random inputs and of the search")
      ->capture_default_str();
  cmd->add_option("--vary", a->vary,
                  "What the search moves: inputs (floating ones; integers and booleans stay), "
                  "weights (trainable initializers), both, or NAME[,NAME...] (exactly those "
                  "inputs and weights; the others keep their values)")
      ->capture_default_str();
  cmd->add_option("--weight-radius", a->weight_radius,
                  "With --vary weights/both: each weight within RADIUS * max|W| of its value")
      ->capture_default_str();
  cmd->add_option("--clip", a->clip,
                  "LO,HI box of every varied input (default: --range), or NAME=LO,HI the box of "
                  "one input (repeat per input)");
  cmd->add_flag("--clip-from-inputs", a->clip_from_inputs,
                "Keep each varied input within the min and max of its given values");
  cmd->add_option("--bind", a->bind, "Binding of the verdict run (float32, node by node)")
      ->capture_default_str();
  cmd->add_option("--strategy", a->strategy,
                  "gradient (adaptive), grist (x <- x - 0.15 sign(grad), clipped) or random")
      ->capture_default_str();
  cmd->add_flag("--no-constant-starts", a->no_constant_starts,
                "Gradient strategy: do not try constant inputs (bounds, middle, 0) as starting "
                "points (to measure the gradient search alone)");
  cmd->add_flag("--stop-at-first", a->stop_at_first,
                "End the search at the first exposure instead of spending the budget on the "
                "other targets");
  cmd->add_option("--time-limit", a->time_limit, "Seconds for the whole search")
      ->capture_default_str();
  cmd->add_option("--iterations", a->iterations,
                  "Cap on the search steps of the whole search (0: none, --time-limit ends it)")
      ->capture_default_str();
  cmd->add_flag("--no-binding-distances", a->no_binding_distances,
                "Measure the distances to the danger zones on the float64 reference only (by "
                "default also on the binding, whose float32 rounding can enter a zone the "
                "reference stays out of)");
  cmd->add_option("--out", a->out_dir,
                  "Folder for the exposing and closest inputs (.npy) and the commands")
      ->capture_default_str();
  cmd->add_option("--json", a->json_file, "Write the targets and verdicts as JSON");
  cmd->add_option("--report", a->report_dir, "Write an HTML report (index.html) into this folder");
  cmd->add_flag("--progress", a->progress,
                "Show the progress bar on stderr even when it is not a terminal");
  cmd->add_option("--threads", a->threads, "Intra-op threads of the framework bindings")
      ->capture_default_str();
  cmd->callback([a, &action] { action = [a] { return run(*a); }; });
}

}  // namespace metaop::cli
