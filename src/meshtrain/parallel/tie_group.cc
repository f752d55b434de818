#include "meshtrain/parallel/tie_group.h"

#include <algorithm>

namespace meshtrain::parallel {

std::shared_ptr<comm::ProcessGroup> make_tie_group(comm::ProcessGroup* pp, const std::vector<int>& stages) {
  if (!pp || stages.empty()) return nullptr;
  const auto at = std::find(stages.begin(), stages.end(), pp->rank());
  const bool member = at != stages.end();
  // Key: the position in `stages`, so the first stage is rank 0 of the group
  // (the threads backend sums in rank order: embedding + head).
  return pp->split(member ? 0 : -1, member ? int(at - stages.begin()) : 0, pp->name() + ".tie");
}

}  // namespace meshtrain::parallel
