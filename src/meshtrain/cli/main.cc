// meshtrain: one binary for training, data, checkpoints, evaluation and
// reports. The commands are in cli/*_command.cc.
#include "meshtrain/cli/cli.h"

int main(int argc, char** argv) { return meshtrain::cli::run(std::vector<std::string>(argv, argv + argc)); }
