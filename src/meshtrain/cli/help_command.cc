// meshtrain help [COMMAND...]   (the same text as COMMAND --help)
#include <cstdio>

#include "meshtrain/cli/command.h"
#include "meshtrain/core/suggest.h"

namespace meshtrain::cli {
namespace {

void setup(CLI::App& root, Action& action) {
  auto* cmd = add_command(root, "help", "list the commands, or show one command's options and an example",
                          "meshtrain help ckpt export");
  auto words = std::make_shared<std::vector<std::string>>();
  cmd->add_option("COMMAND", *words, "a command, e.g. train or ckpt export");
  CLI::App* top = &root;
  cmd->callback([words, top, &action] {
    action = [words, top] {
      const CLI::App* app = top;
      std::string path = "meshtrain";
      for (const auto& w : *words) {
        const CLI::App* next = nullptr;
        std::vector<std::string> names;
        for (const CLI::App* sub : app->get_subcommands([](const CLI::App*) { return true; })) {
          names.push_back(sub->get_name());
          if (sub->get_name() == w) next = sub;
        }
        if (!next) {
          std::fprintf(stderr, "meshtrain help: error: no command '%s' in '%s'%s\nRun 'meshtrain help' for the list.\n",
                       w.c_str(), path.c_str(), did_you_mean(w, names).c_str());
          return 2;
        }
        path += " " + w;
        app = next;
      }
      // Through the formatter: App::help() would describe the `help` command
      // itself, the subcommand this parse selected.
      std::fputs(app->get_formatter()->make_help(app, app == top ? "" : path, CLI::AppFormatMode::Normal).c_str(),
                 stdout);
      return 0;
    };
  });
}

const bool registered = register_command(1, setup);

}  // namespace
}  // namespace meshtrain::cli
