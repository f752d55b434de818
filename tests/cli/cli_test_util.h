// Running the meshtrain command line in-process (cli::run) with stdout and
// stderr captured, plus scratch directories and small files.
#pragma once

#include <gtest/gtest.h>

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "meshtrain/cli/cli.h"

namespace meshtrain::cli::testing {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = ::testing::TempDir() + "/mt_cli_XXXXXX";
    EXPECT_NE(::mkdtemp(tmpl.data()), nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

inline void write_file(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

struct Result {
  int code = -1;
  std::string out, err;
};

// meshtrain ARGS... in this process.
inline Result run_cli(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"meshtrain"};
  argv.insert(argv.end(), args.begin(), args.end());
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  Result r;
  r.code = run(argv);
  r.out = ::testing::internal::GetCapturedStdout();
  r.err = ::testing::internal::GetCapturedStderr();
  return r;
}

inline bool contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

// A usage error: exit 2, the message and the command's usage line on stderr.
inline void expect_usage_error(const std::vector<std::string>& args, const std::string& needle,
                               const std::string& usage) {
  const Result r = run_cli(args);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, needle)) << r.err;
  EXPECT_TRUE(contains(r.err, "Usage: " + usage)) << r.err;
}

// A failing command: exit 1 and "meshtrain CMD: error: ...needle...".
inline void expect_failure(const std::vector<std::string>& args, const std::string& needle) {
  const Result r = run_cli(args);
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, ": error: ")) << r.err;
  EXPECT_TRUE(contains(r.err, needle)) << r.err;
}

// A corpus of short fortunes and a tiny model's config training on it.
inline std::string tiny_config(const TempDir& dir, const std::string& extra_data = "") {
  std::string corpus;
  for (int i = 0; i < 40; ++i) corpus += "A tiny fortune, number " + std::to_string(i) + ".\n%\n";
  write_file(dir / "corpus/fortunes", corpus);
  const std::string cfg = dir / "tiny.toml";
  write_file(cfg, "[model]\nvocab_size = 259\nd_model = 16\nn_layers = 1\nn_heads = 2\nn_kv_heads = 1\n"
                  "ffn_hidden = 32\nmax_seq_len = 32\n"
                  "[data]\npath = \"" + dir / "data" + "\"\nsources = [\"" + dir / "corpus" + "\"]\n"
                  "format = \"fortune\"\nseq_len = 32\nval_fraction = 0.1\n" + extra_data +
                  "[training]\nsteps = 2\nmicro_batch = 2\neval_rows = 4\n"
                  "[optimizer]\nlr = 1e-2\nwarmup_steps = 0\n"
                  "[metrics]\nrun_dir = \"" + dir / "run" + "\"\nlog_every = 1\n"
                  "[checkpoint]\nevery = 2\n");
  return cfg;
}

}  // namespace meshtrain::cli::testing
