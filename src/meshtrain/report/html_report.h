// `meshtrain report RUN_DIR...`: one self-contained HTML page (inline SVG,
// no script, no network) showing training and validation loss against
// tokens, tokens/s and MFU, gradient norm and learning rate, peak memory by
// category, communication time and its exposed share, skipped steps, the
// layout and precision, and the pipeline timeline when recorded. Several
// runs overlay their curves (one color per run), e.g. to compare layouts.
#pragma once

#include <string>
#include <vector>

#include "meshtrain/report/run_log.h"

namespace meshtrain::report {

// The page is also well-formed XML (XHTML syntax), so tools can parse it.
std::string render_report(const std::vector<RunLog>& runs);

}  // namespace meshtrain::report
