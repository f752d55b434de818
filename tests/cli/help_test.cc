// Covers src/meshtrain/cli/completion_command.cc, cli/eval_command.cc, cli/help_command.cc,
// cli/launch_command.cc, cli/report_command.cc, cli/scale_command.cc, cli/timeline_command.cc,
// cli/tokenizer_command.cc, cli/version_command.cc (every command's help, usage errors, version, completion).
// CLI conventions: --help/-h on every command (walking the command tree),
// `help COMMAND`, usage errors with exit 2 and the usage line, typed and
// range-checked numbers, --version, and the generated bash completion.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>

#include <CLI/CLI.hpp>

#include "cli_test_util.h"

namespace meshtrain::cli {
namespace {

using namespace testing;

// Every command node below the root, as argument paths.
void walk(const CLI::App& app, std::vector<std::string> path, std::vector<std::vector<std::string>>* out) {
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    auto p = path;
    p.push_back(sub->get_name());
    out->push_back(p);
    walk(*sub, p, out);
  }
}

const CLI::App* find(const CLI::App& root, const std::vector<std::string>& path) {
  const CLI::App* app = &root;
  for (const auto& name : path) app = app->get_subcommand(name);
  return app;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& w : v) s += (s.empty() ? "" : " ") + w;
  return s;
}

TEST(CliHelp, EveryCommandAnswersHelpWithUsageOptionsDefaultsAndAnExample) {
  const auto root = build_app();
  std::vector<std::vector<std::string>> paths;
  walk(*root, {}, &paths);
  ASSERT_GE(paths.size(), 20u);
  for (const auto& path : paths) {
    const CLI::App* app = find(*root, path);
    const bool leaf = app->get_subcommands([](const CLI::App*) { return true; }).empty();
    for (const char* flag : {"--help", "-h"}) {
      auto args = path;
      args.push_back(flag);
      const Result r = run_cli(args);
      SCOPED_TRACE(join(args));
      EXPECT_EQ(r.code, 0) << r.err;
      EXPECT_TRUE(r.err.empty()) << r.err;
      EXPECT_TRUE(contains(r.out, "Usage: meshtrain " + join(path))) << r.out;
      EXPECT_TRUE(contains(r.out, "Example:\n  ")) << r.out;
      // Every option and positional the command accepts is named.
      for (const CLI::Option* o : app->get_options()) {
        for (const auto& n : o->get_lnames()) EXPECT_TRUE(contains(r.out, "--" + n)) << r.out;
        if (o->get_positional()) { EXPECT_TRUE(contains(r.out, o->get_name())) << r.out; }
      }
      if (!leaf) { EXPECT_TRUE(contains(r.out, "Commands:")) << r.out; }
    }
    // `meshtrain help PATH` prints the same page.
    auto args = path;
    args.insert(args.begin(), "help");
    const Result h = run_cli(args);
    EXPECT_EQ(h.code, 0) << join(args);
    EXPECT_EQ(h.out, run_cli([&] { auto a = path; a.push_back("--help"); return a; }()).out) << join(args);
  }
}

TEST(CliHelp, DefaultsAreShown) {
  EXPECT_TRUE(contains(run_cli({"verify", "--help"}).out, "=3")) << "default --steps";
  EXPECT_TRUE(contains(run_cli({"generate", "--help"}).out, "--tokens INT:INT in [0 - 1048576]=64"));
  EXPECT_TRUE(contains(run_cli({"tokenizer", "train", "--help"}).out, "=4096"));
}

TEST(CliHelp, TopLevelListsEveryCommand) {
  for (const auto& args : std::vector<std::vector<std::string>>{{"--help"}, {"help"}, {"-h"}}) {
    const Result r = run_cli(args);
    EXPECT_EQ(r.code, 0);
    for (const char* cmd : {"train ", "verify ", "plan ", "data prepare ", "data inspect ", "tokenizer train ", "ckpt inspect ",
                            "ckpt verify ", "ckpt export ", "ckpt import ", "ckpt diff ", "generate ", "eval ",
                            "report ", "timeline ", "bench comm ", "completion ", "help "})
      EXPECT_TRUE(contains(r.out, "  " + std::string(cmd))) << cmd << "\n" << r.out;
  }
  // No command at all: the same list on stderr, exit 2.
  const Result none = run_cli({});
  EXPECT_EQ(none.code, 2);
  EXPECT_TRUE(contains(none.err, "ckpt diff"));
}

TEST(CliUsage, ErrorsExitTwoWithTheUsageLine) {
  expect_usage_error({"frobnicate"}, "frobnicate", "meshtrain");
  expect_usage_error({"verify", "c.toml", "--layout", "dp=2", "--steps", "abc"}, "--steps", "meshtrain verify");
  expect_usage_error({"verify", "c.toml", "--layout", "dp=2", "--steps", "0"}, "--steps", "meshtrain verify");
  expect_usage_error({"verify", "c.toml"}, "--layout is required", "meshtrain verify");
  expect_usage_error({"verify", "c.toml", "--layout", "dp=2", "--bitwise", "--tolerance", "0.1"}, "excludes",
                     "meshtrain verify");
  expect_usage_error({"verify", "c.toml", "--layout", "dp=2", "--fast"}, "--fast", "meshtrain verify");
  expect_usage_error({"generate", "--from", "d", "--prompt", "x", "--top-k", "-3"}, "--top-k", "meshtrain generate");
  expect_usage_error({"generate", "--from", "d", "--prompt", "x", "--tokens", "ten"}, "--tokens",
                     "meshtrain generate");
  expect_usage_error({"generate", "--from", "d", "--prompt", "x", "--temperature", "-0.5"}, "--temperature",
                     "meshtrain generate");
  expect_usage_error({"generate", "--prompt", "x"}, "--from is required", "meshtrain generate");
  expect_usage_error({"train"}, "CONFIG is required", "meshtrain train");
  expect_usage_error({"train", "a.toml", "--set"}, "--set", "meshtrain train");
  expect_usage_error({"data"}, "needs one of the commands prepare, inspect", "meshtrain data");
  expect_usage_error({"data", "shuffle"}, "shuffle", "meshtrain data");
  expect_usage_error({"data", "prepare", "in.txt"}, "--out is required", "meshtrain data prepare");
  expect_usage_error({"data", "prepare", "--out", "o", "--val-fraction", "1", "in.txt"}, "--val-fraction",
                     "meshtrain data prepare");
  expect_usage_error({"data", "prepare", "--out", "o", "--val-fraction", "half", "in.txt"}, "--val-fraction",
                     "meshtrain data prepare");
  expect_usage_error({"data", "prepare", "--out", "o", "--seed", "x1", "in.txt"}, "--seed", "meshtrain data prepare");
  expect_usage_error({"data", "prepare", "--out", "o", "--format", "csv", "in.txt"}, "--format",
                     "meshtrain data prepare");
  expect_usage_error({"ckpt"}, "needs one of the commands inspect, verify, export, import, diff", "meshtrain ckpt");
  expect_usage_error({"ckpt", "diff", "a"}, "DIR_B", "meshtrain ckpt diff");
  expect_usage_error({"ckpt", "export", "d"}, "--out is required", "meshtrain ckpt export");
  expect_usage_error({"ckpt", "export", "d", "--out", "m.safetensors", "--dtype", "q4_0"}, "--dtype",
                     "meshtrain ckpt export");
  expect_usage_error({"bench", "comm", "--ranks", "x"}, "--ranks", "meshtrain bench comm");
  expect_usage_error({"bench", "comm", "--ops", "all_reduce,gossip"}, "gossip", "meshtrain bench comm");
  expect_usage_error({"bench", "comm", "--backend", "nccl"}, "nccl", "meshtrain bench comm");
  expect_usage_error({"tokenizer", "train", "--out", "t.model", "--vocab", "100", "c.txt"}, "--vocab",
                     "meshtrain tokenizer train");
  expect_usage_error({"tokenizer", "train", "--out", "t.model", "--type", "wordpiece", "c.txt"}, "--type",
                     "meshtrain tokenizer train");
  expect_usage_error({"eval", "--from", "d", "--data", "x", "--text", "/"}, "excludes", "meshtrain eval");
  expect_usage_error({"report"}, "RUN_DIR is required", "meshtrain report");
  expect_usage_error({"completion", "fish"}, "fish", "meshtrain completion");
  // The error never comes from a bare conversion routine.
  EXPECT_FALSE(contains(run_cli({"verify", "c", "--layout", "dp=2", "--steps", "abc"}).err, "stoi"));
}

TEST(CliUsage, FailuresExitOneWithOneErrorLine) {
  TempDir dir;
  expect_failure({"train", dir / "missing.toml"}, "cannot read config file");
  expect_failure({"verify", dir / "none.toml", "--layout", "dp=2"}, "cannot read config file");
  expect_failure({"bench", "comm", "--min-bytes", "2", "--max-bytes", "1K"}, "--min-bytes");
  expect_usage_error({"bench", "comm", "--min-bytes", "lots"}, "bad size 'lots'", "meshtrain bench comm");
  expect_usage_error({"eval", "--from", dir / "nowhere"}, "--data DIR or --text FILE is required", "meshtrain eval");
  expect_failure({"eval", "--from", dir / "nowhere", "--data", dir / "d"}, "nowhere");
  expect_failure({"data", "inspect", dir / "nothing"}, "meta.json");
  const Result r = run_cli({"help", "nonsense"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(contains(r.err, "no command 'nonsense'")) << r.err;
}

TEST(CliVersion, NamesVersionCommitBuildIsaAndLibraries) {
  for (const auto& args : std::vector<std::vector<std::string>>{{"--version"}, {"version"}}) {
    const Result r = run_cli(args);
    EXPECT_EQ(r.code, 0);
    EXPECT_EQ(r.out.rfind("meshtrain ", 0), 0u) << r.out;
    for (const char* key : {"git commit: ", "build type: ", "kernels: ", "chosen at run time", "CPU: ", "GEMM: ", "(f32: ", "MESHTRAIN_GEMM",
                            "oneDNN: 2.", "MPI: "})
      EXPECT_TRUE(contains(r.out, key)) << key << "\n" << r.out;
  }
}

// The completion script, run by bash: `meshtrain ckpt d<TAB>` offers diff,
// `meshtrain generate --to<TAB>` offers --tokens and --top-k.
TEST(CliCompletion, BashCompletesCommandsAndOptions) {
  TempDir dir;
  const Result r = run_cli({"completion", "bash"});
  ASSERT_EQ(r.code, 0);
  write_file(dir / "meshtrain.bash", r.out);
  auto complete = [&](const std::string& words, int cword) {
    const std::string cmd = "bash -c 'source " + dir / "meshtrain.bash" + "; COMP_WORDS=(" + words +
                            "); COMP_CWORD=" + std::to_string(cword) + "; _meshtrain; echo \"${COMPREPLY[*]}\"' 2>&1";
    std::FILE* p = ::popen(cmd.c_str(), "r");
    std::string out;
    char buf[256];
    while (p && std::fgets(buf, sizeof buf, p)) out += buf;
    if (p) ::pclose(p);
    return out;
  };
  EXPECT_EQ(complete("meshtrain ckpt d", 2), "diff\n");
  EXPECT_EQ(complete("meshtrain gen", 1), "generate\n");
  const std::string opts = complete("meshtrain generate --to", 2);
  EXPECT_TRUE(contains(opts, "--tokens")) << opts;
  EXPECT_TRUE(contains(opts, "--top-k")) << opts;
  EXPECT_TRUE(contains(complete("meshtrain data prepare --", 3), "--tokenizer"));
}

}  // namespace
}  // namespace meshtrain::cli
