#include "meshtrain/cli/commands.h"
#include "meshtrain/core/error.h"

namespace meshtrain::cli {

int cmd_ckpt(const Args&) { MT_THROW(ConfigError, "'meshtrain ckpt' is not built in this version"); }

}  // namespace meshtrain::cli
