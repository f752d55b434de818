#include "meshtrain/cli/commands.h"
#include "meshtrain/core/error.h"

namespace meshtrain::cli {

int cmd_verify(const Args&) { MT_THROW(ConfigError, "'meshtrain verify' is not built in this version"); }

}  // namespace meshtrain::cli
