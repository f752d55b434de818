// What a user reads when something is off (docs/errors.md, docs/cli.md):
// did-you-mean for a mistyped command or config key, no source locations
// unless --debug, --set tolerating spaces, top-p sampling's option, what
// `launch` gives mpirun as root, and --progress passed to the job.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "cli_test_util.h"
#include "meshtrain/app/training.h"

namespace meshtrain::cli {
namespace {

using namespace testing;

TEST(CliUsability, AMistypedCommandGetsASuggestion) {
  const Result r = run_cli({"trian", "configs/demo.toml"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(contains(r.err, "unknown command 'trian' (did you mean 'train'?)")) << r.err;
  const Result sub = run_cli({"ckpt", "exprot", "x"});
  EXPECT_EQ(sub.code, 2);
  EXPECT_TRUE(contains(sub.err, "(unknown: 'exprot' (did you mean 'export'?))")) << sub.err;
  const Result help = run_cli({"help", "genrate"});
  EXPECT_EQ(help.code, 2);
  EXPECT_TRUE(contains(help.err, "no command 'genrate' in 'meshtrain' (did you mean 'generate'?)")) << help.err;
  const Result far = run_cli({"frobnicate"});
  EXPECT_EQ(far.code, 2);
  EXPECT_TRUE(contains(far.err, "unknown command 'frobnicate'")) << far.err;
  EXPECT_FALSE(contains(far.err, "did you mean")) << far.err;
}

TEST(CliUsability, AMistypedConfigKeyOrSectionGetsASuggestion) {
  TempDir dir;
  const std::string cfg = tiny_config(dir);
  expect_failure({"plan", cfg, "--set", "model.d_modle=16"}, "unknown key model.d_modle (did you mean 'd_model'?)");
  expect_failure({"plan", cfg, "--set", "trainig.steps=3"}, "unknown section [trainig] in");
  expect_failure({"plan", cfg, "--set", "trainig.steps=3"}, "(did you mean 'training'?)");
  write_file(dir / "typo2.toml", "[modle]\nd_model = 16\n");
  expect_failure({"plan", dir / "typo2.toml"}, "unknown section [modle]");
  expect_failure({"plan", dir / "typo2.toml"}, "(did you mean 'model'?)");
}

TEST(CliUsability, ErrorsCarryNoSourceLocationUnlessDebug) {
  TempDir dir;
  const std::string cfg = tiny_config(dir);
  const Result plain = run_cli({"plan", cfg, "--set", "model.no_such_key=1"});
  EXPECT_EQ(plain.code, 1);
  EXPECT_TRUE(contains(plain.err, "unknown key model.no_such_key")) << plain.err;
  EXPECT_FALSE(contains(plain.err, ".cc:")) << "a source location in a user's error: " << plain.err;
  EXPECT_FALSE(contains(plain.err, "[meshtrain/")) << plain.err;
  // --debug, before or after the command, adds where it was raised.
  for (const auto& args : {std::vector<std::string>{"--debug", "plan", cfg, "--set", "model.no_such_key=1"},
                           std::vector<std::string>{"plan", cfg, "--set", "model.no_such_key=1", "--debug"}}) {
    const Result debug = run_cli(args);
    EXPECT_EQ(debug.code, 1);
    EXPECT_TRUE(contains(debug.err, "unknown key model.no_such_key")) << debug.err;
    EXPECT_TRUE(contains(debug.err, " [meshtrain/train/toml_reader.cc:")) << debug.err;
  }
}

TEST(CliUsability, SetToleratesSpacesAroundTheKeyAndValue) {
  TempDir dir;
  const std::string cfg = tiny_config(dir);
  const Result r = run_cli({"plan", cfg, "--set", "parallel.tp = 2", "--set", " parallel . sequence_parallel= true "});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "layout: pp=1 dp=1 cp=1 tp=2")) << r.out;
  EXPECT_TRUE(contains(r.out, "sequence parallel")) << r.out;
  const Result name = run_cli({"plan", cfg, "--set", "metrics.run_dir =  runs/spaced"});
  EXPECT_EQ(name.code, 0) << name.err;
  expect_failure({"plan", cfg, "--set", " = 2"}, "expected section.key=value");
  expect_failure({"plan", cfg, "--set", "parallel. = 2"}, "the key must be section.key");
}

TEST(CliUsability, TopPIsAnOptionOfGenerate) {
  expect_usage_error({"generate", "--from", "x", "--prompt", "a", "--top-p", "0"}, "not in (0, 1]", "meshtrain generate");
  expect_usage_error({"generate", "--from", "x", "--prompt", "a", "--top-p", "1.5"}, "not in (0, 1]",
                     "meshtrain generate");
  // A valid value gets as far as opening the model.
  expect_failure({"generate", "--from", "/nonexistent/model.safetensors", "--prompt", "a", "--top-p", "0.9"},
                 "/nonexistent/model.safetensors");
}

// `launch` with a stand-in mpirun that records its environment and arguments.
TEST(CliUsability, LaunchGivesOpenMpiWhatItNeedsAsRootAndPassesProgress) {
  TempDir dir;
  const std::string cfg = tiny_config(dir);
  const std::string fake = dir / "mpirun";
  write_file(fake, "#!/bin/sh\n{ echo \"root=${OMPI_ALLOW_RUN_AS_ROOT:-unset}\"; "
                   "echo \"confirm=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-unset}\"; echo \"args=$*\"; } > '" +
                       dir / "seen.txt" + "'\n");
  ::chmod(fake.c_str(), 0755);
  ::unsetenv("OMPI_ALLOW_RUN_AS_ROOT");
  ::unsetenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM");
  const Result r = run_cli({"--progress", "plain", "launch", "-n", "2", "--mpirun", fake, cfg});
  ::unsetenv("OMPI_ALLOW_RUN_AS_ROOT");
  ::unsetenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string seen = read_file(dir / "seen.txt");
  const bool root = ::geteuid() == 0;
  EXPECT_TRUE(contains(seen, root ? "root=1\nconfirm=1\n" : "root=unset\nconfirm=unset\n")) << seen;
  EXPECT_EQ(contains(r.err, "running as root: setting OMPI_ALLOW_RUN_AS_ROOT=1"), root) << r.err;
  EXPECT_TRUE(contains(seen, "-np 2 ")) << seen;
  EXPECT_TRUE(contains(seen, " --progress plain train " + cfg)) << seen;
  EXPECT_TRUE(app::mpirun_root_environment(false).empty()) << "another user needs nothing";
}

}  // namespace
}  // namespace meshtrain::cli
