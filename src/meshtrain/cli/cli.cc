// The root of the command tree: registry, help layout, error handling and
// the run() entry point shared by main.cc and the tests.
#include "meshtrain/cli/cli.h"

#include <algorithm>
#include <cstdio>
#include <exception>

#include "meshtrain/app/version.h"
#include "meshtrain/cli/command.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/status_line.h"
#include "meshtrain/core/suggest.h"

namespace meshtrain::cli {
namespace {

struct Registered {
  int order;
  CommandSetup setup;
};

std::vector<Registered>& registry() {
  static std::vector<Registered> r;
  return r;
}

// "train", "ckpt diff", ...: the path of a command below the root.
std::string path_of(const CLI::App* app) {
  std::string p;
  for (; app && app->get_parent(); app = app->get_parent()) p = app->get_name() + (p.empty() ? "" : " " + p);
  return p;
}

// Lists every runnable command with its full path (so `ckpt diff` shows up
// in the top-level help, not only under `ckpt --help`).
class Formatter : public CLI::Formatter {
 public:
  std::string make_subcommands(const CLI::App* app, CLI::AppFormatMode mode) const override {
    std::vector<const CLI::App*> leaves;
    collect(app, &leaves);
    if (leaves.empty()) return "";
    std::string out = "\nCommands:\n";
    for (const CLI::App* c : leaves) {
      std::string name = path_of(c);
      const std::string below = path_of(app);
      if (!below.empty()) name = name.substr(below.size() + 1);
      char buf[64];
      std::snprintf(buf, sizeof buf, "  %-22s ", name.c_str());
      out += buf + c->get_description() + "\n";
    }
    return out;
  }

 private:
  static void collect(const CLI::App* app, std::vector<const CLI::App*>* out) {
    for (const CLI::App* c : app->get_subcommands([](const CLI::App*) { return true; })) {
      const auto subs = c->get_subcommands([](const CLI::App*) { return true; });
      if (subs.empty()) out->push_back(c);
      else collect(c, out);
    }
  }
};

// The deepest command the parser entered (the one a usage error is about).
const CLI::App* deepest(const CLI::App* app) {
  for (const CLI::App* sub : app->get_subcommands()) return deepest(sub);
  return app;
}

std::string usage_line(const CLI::App* app) {
  const std::string path = path_of(app);
  static const Formatter formatter;
  return formatter.make_usage(app, "meshtrain" + (path.empty() ? "" : " " + path));
}

std::string failure(const CLI::App* root, const CLI::Error& e) {
  const CLI::App* app = deepest(root);
  const std::string path = path_of(app);
  std::string what = e.what();
  const auto subs = app->get_subcommands([](const CLI::App*) { return true; });
  std::vector<std::string> names;
  for (const CLI::App* s : subs) names.push_back(s->get_name());
  const auto rest = app->remaining();
  if (!subs.empty() && e.get_name() == "RequiredError") {
    // "A subcommand is required": say which ones exist and what was given.
    what = "needs one of the commands";
    for (size_t i = 0; i < subs.size(); ++i) what += (i ? ", " : " ") + subs[i]->get_name();
    if (!rest.empty()) what += " (unknown: '" + rest.front() + "'" + did_you_mean(rest.front(), names) + ")";
  } else if (!subs.empty() && !rest.empty() && dynamic_cast<const CLI::ExtrasError*>(&e)) {
    // `meshtrain trian ...`: a word where a command belongs.
    const std::string& first = rest.front();
    if (!first.empty() && first[0] != '-') what = "unknown command '" + first + "'" + did_you_mean(first, names);
  }
  return "meshtrain" + (path.empty() ? "" : " " + path) + ": error: " + what + "\n" + usage_line(app) +
         "Run 'meshtrain " + (path.empty() ? "" : path + " ") + "--help' for the options and an example.\n";
}

// The root's options given after the command (`meshtrain train c.toml
// --debug`) moved in front of it, where CLI11 looks for them.
std::vector<std::string> global_options_first(const std::vector<std::string>& argv) {
  std::vector<std::string> global, rest;
  for (size_t i = 1; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a == "--") {  // everything after is an argument
      rest.insert(rest.end(), argv.begin() + long(i), argv.end());
      break;
    }
    if (a == "--debug" || a.rfind("--progress=", 0) == 0) {
      global.push_back(a);
    } else if (a == "--progress" && i + 1 < argv.size()) {
      global.push_back(a);
      global.push_back(argv[++i]);
    } else {
      rest.push_back(a);
    }
  }
  global.insert(global.end(), rest.begin(), rest.end());
  return global;
}

}  // namespace

bool register_command(int order, CommandSetup setup) {
  registry().push_back({order, setup});
  return true;
}

CLI::App* add_command(CLI::App& parent, const std::string& name, const std::string& description,
                      const std::string& example) {
  CLI::App* cmd = parent.add_subcommand(name, description);
  if (!example.empty()) cmd->footer("Example:\n  " + example);
  return cmd;
}

void add_restart_options(CLI::App* cmd, int& max_restarts, bool& elastic, int& min_ranks) {
  cmd->add_option("--max-restarts", max_restarts,
                  "restart a failed job from its latest checkpoint at most N times (default: comm.max_restarts "
                  "when comm.restart_on_failure or comm.elastic)")
      ->check(CLI::Range(0, 1000));
  cmd->add_flag("--elastic", elastic,
                "continue on the ranks left after a failure, and grow back when the run directory's capacity file "
                "allows (comm.elastic)");
  cmd->add_option("--min-ranks", min_ranks, "the fewest ranks an elastic job continues on (comm.min_ranks)")
      ->check(CLI::Range(1, 1 << 20));
}

CLI::Validator open_range(double lo, double hi) {
  const std::string desc = "in (" + CLI::detail::to_string(lo) + ", " + CLI::detail::to_string(hi) + ")";
  return CLI::Validator(
      [lo, hi, desc](std::string& text) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(text, v)) return "'" + text + "' is not a number";
        return v > lo && v < hi ? std::string() : "value " + text + " is not " + desc;
      },
      "NUMBER " + desc);
}

std::unique_ptr<CLI::App> build_app(Action& action) {
  auto root = std::make_unique<CLI::App>(
      "meshtrain trains transformer language models on a logical device mesh; every layout computes the same "
      "update as one device.",
      "meshtrain");
  root->formatter(std::make_shared<Formatter>());
  root->option_defaults()->always_capture_default();
  root->failure_message(failure);
  root->require_subcommand(0, 1);
  // Global options (before the command, or anywhere: run() moves them up).
  root->add_flag("--debug")->description("on failure, also print where in the source the error was raised");
  root->add_option("--progress", "progress display: auto (a live line when the output reaches a terminal), plain "
                                 "(log lines only, e.g. for a log file) or live")
      ->check(CLI::IsMember({"auto", "plain", "live"}))
      ->default_str("auto");
  root->set_version_flag("--version",
                         [] {
                           std::string v = app::version_text(app::version_info());
                           v.pop_back();  // CLI11 ends the line
                           return v;
                         },
                         "print the version, git commit, build type, ISA level and library versions");
  root->footer("Run 'meshtrain help COMMAND' or 'meshtrain COMMAND --help' for a command's options and an "
               "example.\nBash completion: source <(meshtrain completion bash)");
  auto& r = registry();
  std::stable_sort(r.begin(), r.end(), [](const Registered& a, const Registered& b) { return a.order < b.order; });
  for (const auto& c : r) c.setup(*root, action);
  return root;
}

std::unique_ptr<CLI::App> build_app() {
  static Action unused;
  return build_app(unused);
}

int run(const std::vector<std::string>& argv) {
  Action action;
  auto root = build_app(action);
  if (argv.size() < 2) {
    std::fputs(root->help().c_str(), stderr);
    return 2;
  }
  // CLI11 takes the arguments in reverse order.
  const std::vector<std::string> ordered = global_options_first(argv);
  std::vector<std::string> args(ordered.rbegin(), ordered.rend());
  try {
    root->parse(args);
  } catch (const CLI::ParseError& e) {
    const int code = root->exit(e);
    return code == 0 ? 0 : 2;
  }
  if (!action) {  // a group such as `meshtrain ckpt` without its subcommand
    std::fputs(failure(root.get(), CLI::RequiredError("a subcommand")).c_str(), stderr);
    return 2;
  }
  const std::string cmd = path_of(deepest(root.get()));
  const bool debug = root->get_option("--debug")->count() > 0;
  const CLI::Option* progress = root->get_option("--progress");
  set_progress_mode(parse_progress_mode(progress->count() ? progress->as<std::string>() : "auto"));
  try {
    return action();
  } catch (const std::exception& e) {
    std::fflush(stdout);
    // The source location is for developers (--debug), not for users.
    const auto* located = dynamic_cast<const Error*>(&e);
    const std::string where = debug && located && !located->where().empty() ? " [" + located->where() + "]" : "";
    std::fprintf(stderr, "meshtrain %s: error: %s%s\n", cmd.c_str(), e.what(), where.c_str());
    return 1;
  }
}

}  // namespace meshtrain::cli
