#include "meshtrain/cli/commands.h"
#include "meshtrain/core/error.h"

namespace meshtrain::cli {

int cmd_generate(const Args&) { MT_THROW(ConfigError, "'meshtrain generate' is not built in this version"); }

}  // namespace meshtrain::cli
