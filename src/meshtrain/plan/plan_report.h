// `meshtrain plan` output of a Prediction: plain text for people, JSON for
// tools (the same figures; bytes as integers, times in seconds).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "meshtrain/plan/prediction.h"

namespace meshtrain::plan {

std::string render_text(const Prediction& p);
nlohmann::json render_json(const Prediction& p);

}  // namespace meshtrain::plan
