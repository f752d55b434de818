#include "meshtrain/parallel/schedule_zero_bubble.h"

#include "meshtrain/parallel/schedule_list.h"

namespace meshtrain::parallel {

Schedule zb_h1_schedule(int p, int m) {
  ListPolicy policy;
  policy.split_backward = true;
  policy.alternate = true;
  // Every rank may hold p live micro-batches, 1F1B's peak on its first
  // stage: the deferred W's of the later ranks need the room.
  policy.max_live.assign(size_t(p), p);
  std::vector<int> chunk_rank;
  for (int c = 0; c < p; ++c) chunk_rank.push_back(c);
  return list_schedule("zb-h1", p, m, chunk_rank, policy);
}

Schedule zb_v_schedule(int p, int m) {
  ListPolicy policy;
  policy.split_backward = true;
  policy.max_live.assign(size_t(p), 2 * p);
  // Oldest micro-batch first, and of its two chunks on this rank the later
  // one: a forward moves towards the loss, a backward frees the way for
  // the earlier chunk's.
  policy.forward_key = [](int mb, int c) { return std::array<int, 3>{mb, -c, 0}; };
  policy.backward_key = [](int mb, int c) { return std::array<int, 3>{mb, -c, 0}; };
  std::vector<int> chunk_rank;
  for (int c = 0; c < 2 * p; ++c) chunk_rank.push_back(c < p ? c : 2 * p - 1 - c);
  return list_schedule("zb-v", p, m, chunk_rank, policy);
}

}  // namespace meshtrain::parallel
