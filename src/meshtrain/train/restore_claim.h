// Which claim a resume can make (docs/math.md, "Rule: restore claims"), a
// pure function of the layout that saved a checkpoint and the layout that
// continues it: the global window, the kernels, reproducible mode and the
// order of every sum (layout_facts.h). The claims a layout does not decide
// (weights only, changed settings) are resume_checks.h's.
#pragma once

#include <string>

#include "meshtrain/train/layout_facts.h"

namespace meshtrain::train {

enum class ClaimKind { AssetsComplete, NumericallyClose, BitwiseReplay };

struct RestoreClaim {
  ClaimKind kind = ClaimKind::AssetsComplete;
  std::string text;  // "<kind>: <why>", as the resume line prints it
};

RestoreClaim restore_claim(const LayoutFacts& saved, const LayoutFacts& now);

}  // namespace meshtrain::train
