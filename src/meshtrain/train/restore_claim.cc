#include "meshtrain/train/restore_claim.h"

#include "meshtrain/train/kernel_environment.h"

namespace meshtrain::train {

RestoreClaim restore_claim(const LayoutFacts& saved, const LayoutFacts& now) {
  if (saved.window_rows() != now.window_rows())
    return {ClaimKind::AssetsComplete, "assets complete: the global batch changed (" +
                                           std::to_string(saved.window_rows()) + " -> " +
                                           std::to_string(now.window_rows()) +
                                           " rows per update), so the optimization trajectory differs"};
  // Same reductions but other kernels: the arithmetic itself rounds differently.
  const std::string kernels_changed = kernel_environment_change(saved.kernels, now.kernels);
  if (!kernels_changed.empty())
    return {ClaimKind::NumericallyClose,
            "numerically close: same samples and objective per update; the kernels' arithmetic changed (" +
                kernels_changed + ")"};
  // A pipeline split alone keeps every sum in the same order (the global
  // norm is canonical), except a tied weight's: with its embedding and head
  // on two stages it sums two copies' gradients, one stage interleaves them.
  const bool same_dense_axes = saved.tp == now.tp && saved.tie_sums_two_stages == now.tie_sums_two_stages &&
                               saved.cp == now.cp &&
                               // sequence parallelism sums norm gradients over shards: another order
                               saved.sequence_parallel == now.sequence_parallel;
  // An expert's owner accumulates its sources' blocks together: another
  // order, except in reproducible mode (a lane per source, grad_tree.h).
  const bool same_model_axes = same_dense_axes && saved.ep == now.ep;
  const bool same_reduction = same_model_axes && saved.dp == now.dp && saved.grad_accum == now.grad_accum &&
                              saved.replica_grad_accum == now.replica_grad_accum &&
                              saved.micro_batch == now.micro_batch &&
                              // the head's weight gradient summed in other row chunks
                              saved.head_chunk_rows == now.head_chunk_rows &&
                              // The MPI standard asks reductions to give the same result on the
                              // same arguments in the same order (MPI_REDUCE, advice to
                              // implementors): the same world on the same backend repeats.
                              saved.backend == now.backend;
  // Reproducible mode on both sides with the same canonical blocks: every
  // sum follows the global batch and the model, not the layout (dp x G,
  // ZeRO, backend, tp, sp, cp, pipeline stages and the tied table's two
  // stages; docs/math.md (M.73), (M.74)).
  if (saved.reproducible && now.reproducible && saved.canonical_blocks > 0 &&
      saved.canonical_blocks == now.canonical_blocks && saved.micro_batch == now.micro_batch)
    return {ClaimKind::BitwiseReplay,
            "bitwise replay: reproducible mode with " + std::to_string(now.canonical_blocks) +
                " canonical blocks, same global window and micro-batch (dp x G splits, ZeRO, tp, sp, cp, pipeline "
                "stages and ep are bitwise)"};
  // Reproducible mode on both sides: the reductions follow the global batch,
  // not the split (dp, grad_accum, ZeRO stage, backend).
  // (Under context parallelism the tree's leaves are (replica, cp rank,
  // micro-batch): another dp x G split orders them differently.)
  if (saved.reproducible && now.reproducible && same_dense_axes && saved.micro_batch == now.micro_batch &&
      (now.cp == 1 || same_reduction))
    return {ClaimKind::BitwiseReplay,
            "bitwise replay: reproducible mode, same global window and micro-batch (dp x G splits, ep and ZeRO "
            "stages are bitwise)"};
  if (same_reduction)
    return {ClaimKind::BitwiseReplay,
            "bitwise replay: same data-parallel degree and accumulation (ZeRO stage, pipeline stage and schedule "
            "changes alone are bitwise)"};
  return {ClaimKind::NumericallyClose,
          "numerically close: same samples and objective per update; the reduction order changed"};
}

}  // namespace meshtrain::train
