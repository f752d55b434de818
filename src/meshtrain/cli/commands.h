// Subcommands of the meshtrain executable. Each takes the arguments after
// its own name and returns the process exit code; errors are thrown and
// turned into one stderr line by main.
#pragma once

#include <string>
#include <vector>

namespace meshtrain::cli {

using Args = std::vector<std::string>;

int cmd_train(const Args& args);     // train CONFIG.toml [--set k=v ...]   (train_command.cc)
int cmd_data(const Args& args);      // data prepare ...                    (data_command.cc)
int cmd_bench(const Args& args);     // bench comm ...                      (bench_command.cc)
int cmd_ckpt(const Args& args);      // ckpt inspect|verify|export|import   (ckpt_command.cc)
int cmd_generate(const Args& args);  // generate --from DIR|FILE --prompt   (generate_command.cc)
int cmd_verify(const Args& args);    // verify CONFIG --layout ... --steps K (verify_command.cc)
int cmd_plan(const Args& args);      // plan CONFIG [--layout ...] | plan --params N ... (plan_command.cc)
int cmd_scale(const Args& args);     // scale CONFIG --layouts dp=1 dp=2 ...   (scale_command.cc)
std::string version_string();        // (version.cc)

}  // namespace meshtrain::cli
