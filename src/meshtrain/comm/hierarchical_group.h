// Hierarchical collectives for a group whose ranks span nodes (docs/comm.md,
// "Hierarchical collectives"; docs/math.md (M.70)-(M.71)): composed from two
// groups split from it, `intra` (this rank's node's members, over shared
// memory) and `inter` (the members of every node with this rank's local
// index, one per node, over the link). With n nodes of l members each,
// member a·l + j of the group being local rank j of node a:
//   all_reduce     = reduce_scatter inside the node (rank j keeps chunk j of
//                    l), all_reduce of that chunk across the nodes, then
//                    all_gather inside the node;
//   reduce_scatter = the R = n·l chunks reordered local-index major (chunk
//                    a·l + j into bundle j), reduce_scatter inside the node
//                    (rank j keeps bundle j), reduce_scatter of the bundle
//                    across the nodes;
//   all_gather     = the reverse: all_gather across the nodes into bundle j,
//                    all_gather inside the node, reordered back.
// Balanced chunks compose (types.h): bundle j holds chunk_size(count, l, j)
// elements and its n pieces are the group's chunks a·l + j, so results land
// exactly where the flat collective puts them, for any count.
//
// Not a backend: every phase is an operation of the sub-groups, whatever
// their backend (one code path for threads and MPI). A HierarchicalGroup is
// a ProcessGroup, so the data-parallel engine uses it unchanged; the three
// collectives above run on a worker thread of its own, one operation after
// another in issue order (so the non-blocking forms overlap computation as
// the backends' do, and every member issues the sub-groups' operations in
// the same order); everything else, and whatever `choose` sends flat, runs
// on the flat group itself. 16-bit sums stay flat: the flat collective
// rounds once, the composition would round after each phase.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "meshtrain/comm/process_group.h"

namespace meshtrain::comm {

// `comm.hierarchical`: auto (chosen per collective, docs/comm.md), on, off.
enum class HierarchicalMode { Auto, On, Off };
HierarchicalMode parse_hierarchical_mode(const std::string& text);  // ConfigError naming the key
std::string_view to_string(HierarchicalMode mode);

// Where a group's members run: n nodes of l members each, this member
// being local rank `local_rank` of node `node`.
struct NodeLayout {
  int nodes = 1, local = 1, node = 0, local_rank = 0;
  std::string str() const;  // "2 nodes x 2 ranks"
};

// Bytes one rank sends over the link for a hierarchical all-reduce,
// reduce-scatter or all-gather of message size M (docs/math.md (M.71)): its
// inter-node phase moves the rank's 1/l piece on a ring of n, 2(n-1)/n · M/l
// for an all-reduce, (n-1)/n · M/l for the others.
double link_bytes_per_rank(OpKind kind, const NodeLayout& layout, double M);

// The layout of a group whose member i runs on host_of_member[i], as
// `rank`: empty, with the reason in *why, unless it spans at least two
// nodes with the same number (at least two) of members on each, every
// node's members contiguous in group rank order (as in a world numbered
// node by node, node_placement.h).
std::optional<NodeLayout> node_layout(const std::vector<std::string>& host_of_member, int rank, std::string* why);

class HierarchicalGroup final : public ProcessGroup {
 public:
  // Whether an op of this kind, dtype and count runs hierarchically (the
  // same answer on every member for the same op). Null: always.
  using Choice = std::function<bool(OpKind kind, DType dtype, size_t count)>;
  // Collective over `flat` (splits it into intra and inter).
  static std::shared_ptr<HierarchicalGroup> create(std::shared_ptr<ProcessGroup> flat, const NodeLayout& layout,
                                                   Choice choose = {});
  ~HierarchicalGroup() override;

  int rank() const override { return flat_->rank(); }
  int size() const override { return flat_->size(); }
  std::string_view backend() const override { return flat_->backend(); }
  using ProcessGroup::split;
  std::shared_ptr<ProcessGroup> split(int color, int key, const std::string& name,
                                      const GroupOptions& options) override;
  void abort(const std::string& reason) override;

  const NodeLayout& layout() const { return layout_; }
  ProcessGroup& flat() const { return *flat_; }
  ProcessGroup& intra() const { return *intra_; }
  ProcessGroup& inter() const { return *inter_; }
  // What an op runs as: hierarchical (true) or on the flat group.
  bool hierarchical(OpKind kind, DType dtype, size_t count) const;
  // Runs `job` on the worker after every operation issued before it: what
  // else uses the sub-groups (reproducible mode's tree) goes through here,
  // so the sub-groups see one thread and one order. Collective in the
  // sense of the sub-groups' ops inside the job.
  Work submit(std::function<void(ProcessGroup& intra, ProcessGroup& inter)> job);

 protected:
  Work start(OpDesc& d, bool async) override;
  int backend_max_tag() const override { return flat_->max_tag(); }

 private:
  HierarchicalGroup(std::shared_ptr<ProcessGroup> flat, std::shared_ptr<ProcessGroup> intra,
                    std::shared_ptr<ProcessGroup> inter, const NodeLayout& layout, Choice choose);
  Work delegate(const OpDesc& d, bool async);
  void all_reduce_phases(const OpDesc& d);
  void reduce_scatter_phases(const OpDesc& d);
  void all_gather_phases(const OpDesc& d);
  void worker_main(int compute_threads, int fault_rank);

  std::shared_ptr<ProcessGroup> flat_, intra_, inter_;
  NodeLayout layout_;
  Choice choose_;
  std::vector<char> scratch_;  // the reordered vector (worker only), grow-only

  struct Job {
    std::function<void()> run;
    std::shared_ptr<WorkImpl> work;
  };
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  // Finished ops' handles, released by the issuing thread (submit, the
  // destructor): a failed op's exception is read there, so it is destroyed
  // there too, never on the worker under the reader's feet.
  std::vector<std::shared_ptr<WorkImpl>> finished_;
  bool stopping_ = false;
  std::thread worker_;
};

// The group's hierarchical form, or null when it is a plain group.
HierarchicalGroup* as_hierarchical(ProcessGroup& group);

}  // namespace meshtrain::comm
