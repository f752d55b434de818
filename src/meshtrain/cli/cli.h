// The meshtrain command line: parses argv with CLI11 and runs the command.
// Exit codes: 0 success (also --help, --version), 1 the command failed (one
// line "meshtrain CMD: error: ..." on stderr), 2 a usage error (the error,
// the command's usage line and where to get help, on stderr).
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace meshtrain::cli {

// argv[0] is the program name.
int run(const std::vector<std::string>& argv);

// The whole command tree, for help, completion and tests that walk it.
std::unique_ptr<CLI::App> build_app();

}  // namespace meshtrain::cli
