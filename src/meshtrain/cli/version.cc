#include "meshtrain/cli/commands.h"

namespace meshtrain::cli {

std::string version_string() { return std::string("meshtrain ") + MESHTRAIN_VERSION; }

}  // namespace meshtrain::cli
