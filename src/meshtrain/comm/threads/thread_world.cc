#include "meshtrain/comm/thread_world.h"

#include <numeric>

#include "meshtrain/comm/threads/thread_group.h"
#include "meshtrain/core/error.h"

namespace meshtrain::comm {

std::shared_ptr<ThreadWorld> ThreadWorld::create(int size, GroupOptions options) {
  MT_REQUIRE(ConfigError, size >= 1, "threads backend needs at least one rank, got ", size);
  std::shared_ptr<ThreadWorld> w(new ThreadWorld());
  w->registry_ = std::make_shared<threads::Registry>();
  std::vector<int> ranks(static_cast<size_t>(size));
  std::iota(ranks.begin(), ranks.end(), 0);
  auto shared = std::make_shared<threads::GroupShared>("world", ranks, options);
  w->registry_->add(shared);
  for (int r = 0; r < size; ++r) w->groups_.push_back(std::make_shared<threads::ThreadGroup>(shared, r, w->registry_));
  return w;
}

ThreadWorld::~ThreadWorld() = default;

std::shared_ptr<ProcessGroup> ThreadWorld::group(int rank) const {
  MT_REQUIRE(CommError, rank >= 0 && rank < size(), "rank ", rank, " outside world of size ", size());
  return groups_[size_t(rank)];
}

void ThreadWorld::abort(const std::string& reason) { registry_->abort_all(reason); }

bool ThreadWorld::aborted() const {
  std::lock_guard<std::mutex> lock(registry_->mu);
  return !registry_->abort_reason.empty();
}

}  // namespace meshtrain::comm
