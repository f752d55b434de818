#include "meshtrain/comm/recording/recording_context.h"

namespace meshtrain::comm {

ParallelContext recording_context(const MeshShape& shape, int rank, int completion_lag) {
  ParallelContext ctx;
  ctx.rank = rank;
  ctx.world_size = shape.world_size();
  ctx.ledger = std::make_shared<CommLedger>();
  ctx.world = std::make_shared<RecordingGroup>("world", SplitPlace{ctx.world_size, rank}, ctx.ledger, completion_lag);
  ctx.mesh = Mesh::create(shape, ctx.world);
  ctx.allocator = CachingAllocator::create(Device::Meta);
  return ctx;
}

}  // namespace meshtrain::comm
