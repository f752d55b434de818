// Resuming from the ranks a failure left (docs/comm.md, "Elastic
// membership"): when a rank fails, every rank that sees the failure from
// outside (its collectives aborted) writes everything it holds of the state
// at its last completed step (Trainer::live_state_request) beside the
// checkpoints, without talking to the others; after the launch has ended,
// the supervisor keeps one copy of every piece and commits them as that
// step's checkpoint when they cover the whole state (each piece held by
// some survivor: data-parallel replicas of ZeRO-0 or of the model-parallel
// shards), so the job resumes with no step lost; otherwise from its latest
// checkpoint. The threads backend only: under mpirun a failed rank ends
// every process of the job, so no live peer is left to write.
#pragma once

#include <string>

#include "meshtrain/train/trainer.h"

namespace meshtrain::train {

// This rank's live state into <checkpoint root>/.live-step-S/; nothing when
// the failure came while the update was changing the state. Never throws:
// the failure being handled is the one to report.
void write_live_state(const Trainer& t, int rank);

struct LiveStateCommit {
  std::string committed;  // the checkpoint directory made from live state, or ""
  int64_t step = -1;
  int ranks = 0;          // ranks whose state it holds
  std::string why_not;    // when nothing was committed though live state was written
};

// After the launch ended: the newest step whose live state is complete is
// committed as root/step-S (unless a checkpoint of that step or a later one
// is committed already); every .live-step-* directory is removed.
LiveStateCommit commit_live_state(const std::string& root, int keep_last);

}  // namespace meshtrain::train
