// The report's "Restarts and membership" section: every launch that resumed
// a run, after a failure (docs/errors.md) or at another layout (elastic
// membership, docs/comm.md): the step it resumed at, the layout it
// continued at, the steps lost and why — the run's layout over time.
#pragma once

#include <string>
#include <vector>

#include "meshtrain/report/run_log.h"

namespace meshtrain::report {

std::string membership_section(const std::vector<RunLog>& runs);

}  // namespace meshtrain::report
