// How a command joins the CLI: a file in cli/ defines a setup function
// that adds its subcommand (options, help, example) to the root and sets the
// action to run after a successful parse, and registers it at static
// initialization:
//
//   namespace {
//   void setup(CLI::App& root, Action& action) {
//     auto* cmd = add_command(root, "plan", "print the parallel plan", "meshtrain plan configs/demo.toml");
//     auto q = std::make_shared<app::PlanRequest>();
//     cmd->add_option("CONFIG", q->config, "training config (TOML)")->required();
//     cmd->callback([q, &action] { action = [q] { std::puts(app::plan(*q).c_str()); return 0; }; });
//   }
//   const bool registered = register_command(80, setup);
//   }
//
// The work itself is an mt_app function; the command only parses and prints.
#pragma once

#include <functional>
#include <string>

#include <CLI/CLI.hpp>

namespace meshtrain::cli {

using Action = std::function<int()>;  // returns the exit code
using CommandSetup = void (*)(CLI::App& root, Action& action);

// `order` sorts the commands in the help listing. Returns true (for the
// static initializer).
bool register_command(int order, CommandSetup setup);

// A subcommand with its description and an example shown under --help.
CLI::App* add_command(CLI::App& parent, const std::string& name, const std::string& description,
                      const std::string& example);

// A failed job's restarts and elastic membership, the same options on
// `train` and `launch`: --max-restarts N, --elastic, --min-ranks M.
void add_restart_options(CLI::App* cmd, int& max_restarts, bool& elastic, int& min_ranks);

// A number strictly between lo and hi (CLI::Range includes its ends).
CLI::Validator open_range(double lo, double hi);

}  // namespace meshtrain::cli
