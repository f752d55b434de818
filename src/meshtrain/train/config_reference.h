// docs/config.md, generated: every [model] key from the field table
// (model/model_config_fields.h) with its type, default, meaning and Hugging
// Face name. tests/train/config_reference_test.cc fails when the committed
// file differs, so the reference cannot drift from the code.
#pragma once

#include <string>

namespace meshtrain::train {

std::string config_reference_markdown();

}  // namespace meshtrain::train
