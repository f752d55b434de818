// Progress of long commands (data prepare, tokenizer and checkpoint
// export) on stderr: a live line on a terminal once the work has taken more
// than a second, otherwise a plain line every 10 s, so short runs and logs
// stay quiet.
#pragma once

#include <string>

#include "meshtrain/core/status_line.h"

namespace meshtrain::app {

// A ProgressFn that draws "<what>: <phase> 42% (12.0 MiB of 28.5 MiB), ETA 5s".
// `unit` "bytes" formats done/total as sizes, anything else as counts.
ProgressFn stderr_progress(const std::string& what, const std::string& unit);

}  // namespace meshtrain::app
