// meshtrain version   (the same as meshtrain --version)
#include <cstdio>

#include "meshtrain/app/version.h"
#include "meshtrain/cli/command.h"

namespace meshtrain::cli {
namespace {

void setup(CLI::App& root, Action& action) {
  add_command(root, "version", "print the version, git commit, build type, ISA level and library versions",
              "meshtrain version")
      ->callback([&action] {
        action = [] {
          std::fputs(app::version_text(app::version_info()).c_str(), stdout);
          return 0;
        };
      });
}

const bool registered = register_command(110, setup);

}  // namespace
}  // namespace meshtrain::cli
