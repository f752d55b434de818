#include "meshtrain/model/moe_layer.h"

#include <algorithm>

#include "meshtrain/model/linear_init.h"

namespace meshtrain::model {

MoeLayer::MoeLayer(const ModelConfig& cfg, ParameterStore& params, const std::string& prefix,
                   comm::ProcessGroup* ep)
    : cfg_(cfg), op_(params.precision().compute), acc_(params.precision().accumulate()), ep_(ep) {
  router_ = bind_linear(params, prefix + ".router", false, TpStyle::Replicate, "the MoE router");
  // This rank's routed experts only (the partition's 1/ep of them): the
  // blocks the exchange hands it are theirs.
  const ModelPartition& part = params.spec().partition;
  MT_CHECK(part.ep_size == (ep ? ep->size() : 1), "expert partition over ", part.ep_size,
           " ranks but the ep group has ", ep ? ep->size() : 1);
  const int64_t per_rank = cfg.n_experts / part.ep_size;
  first_expert_ = part.ep_rank * per_rank;
  for (int64_t e = first_expert_; e < first_expert_ + per_rank; ++e)
    experts_.emplace_back(cfg, params, prefix + ".experts." + std::to_string(e));
  // The experts' unit is the one of the block's segment marked experts (param_spec.h).
  params_ = &params;
  const ModelSpec& spec = params.spec();
  for (int u : spec.segment_units(spec.units[size_t(router_.weight->spec->unit)].segment))
    if (spec.units[size_t(u)].experts) expert_unit_ = u;
  MT_CHECK(expert_unit_ >= 0, prefix, ": no unit of routed experts in the block's segment");
  if (cfg.moe_shared_expert) shared_ = std::make_unique<Mlp>(cfg, params, prefix + ".shared_expert");
}

kernels::MoeRoutingConfig moe_routing_config(const ModelConfig& cfg, int64_t seq) {
  return {cfg.n_experts, cfg.experts_top_k, seq, cfg.moe_capacity_factor, cfg.moe_aux_loss_coeff,
          cfg.moe_renormalize, cfg.moe_force_balance};
}

kernels::MoeRoutingConfig MoeLayer::routing_config(int64_t seq) const { return moe_routing_config(cfg_, seq); }

MoeLayer::Saved MoeLayer::forward(const kernels::KernelTable& k, const Tensor& xn, int64_t seq, const Tensor& y,
                                  const Tensor& base, MoeLayerStats* stats,
                                  const std::shared_ptr<CachingAllocator>& alloc) const {
  const int64_t n = xn.dim(0), d = cfg_.d_model, E = cfg_.n_experts;
  Saved s;
  // Router logits in the accumulate type (fp32 under every policy); the
  // routing decisions are index logic over them (kernels/moe_routing.h).
  Tensor logits = activation(alloc, acc_, {n, E}, MemCategory::Workspace);
  router_.forward(k, xn, logits);
  auto routing = std::make_shared<kernels::MoeRouting>(k.route(routing_config(seq), logits));
  const kernels::MoeRouting& r = *routing;
  s.routing = routing;

  // Every rank takes part in the exchange, with or without tokens.
  const int64_t buffer_rows = kernels::expert_rows_bucket(std::max<int64_t>(r.begin[size_t(E)], 1));
  s.x_experts = activation(alloc, xn.dtype(), {buffer_rows, d});
  s.y_experts = activation(alloc, acc_, {buffer_rows, d});
  // Each block's kept rows are gathered; only its padding rows (and the
  // buffer's tail) are zeroed: they compute, never combine.
  for (int64_t e = 0; e < E; ++e) {
    const int64_t b = r.begin[size_t(e)], kept = r.count[size_t(e)];
    k.gather_rows(xn, r.rows_of_expert.data() + b, kept, s.x_experts.slice(b, r.begin[size_t(e + 1)]));
    if (b + kept < r.begin[size_t(e + 1)]) k.fill(s.x_experts.slice(b + kept, r.begin[size_t(e + 1)]), 0.0);
  }
  if (r.begin[size_t(E)] < buffer_rows) k.fill(s.x_experts.slice(r.begin[size_t(E)], buffer_rows), 0.0);
  auto exchange = std::make_shared<ExpertExchange>(ep_, r.begin, E);
  s.exchange = exchange;
  s.x_blocks = exchange->dispatch(s.x_experts, alloc, MemCategory::Activations);
  const Tensor y_blocks =
      exchange->local() ? s.y_experts : activation(alloc, acc_, {s.x_blocks.dim(0), d}, MemCategory::Workspace);
  for (const ExpertExchange::Block& b : exchange->blocks())
    s.blocks.push_back(local_expert(b.expert).forward(k, s.x_blocks.slice(b.offset, b.offset + b.rows),
                                                      y_blocks.slice(b.offset, b.offset + b.rows), Tensor(), alloc));
  exchange->give_back(y_blocks, s.y_experts);
  if (shared_)
    s.shared = shared_->forward(k, xn, y, base, alloc);
  else if (!base.defined())
    k.fill(y, 0.0);
  else if (base.raw() != y.raw())
    k.copy(y, base);
  if (!r.comb_token.empty())
    k.add_rows(y, r.comb_token.data(), s.y_experts, r.comb_row.data(), r.comb_gate.data(),
               int64_t(r.comb_token.size()));
  if (stats) {
    stats->tokens.resize(size_t(E), 0);
    for (int64_t e = 0; e < E; ++e) stats->tokens[size_t(e)] += r.count[size_t(e)];
    stats->assigned += r.assigned;
    stats->dropped += r.dropped;
    stats->aux_sum += r.aux_sum;
    stats->a2a_bytes += exchange->sent_bytes(d * int64_t(dtype_size(xn.dtype()))) +
                        exchange->sent_bytes(d * int64_t(dtype_size(acc_)));  // dispatch + combine
  }
  return s;
}

void MoeLayer::backward(const kernels::KernelTable& k, const Tensor& xn, const Saved& s, const Tensor& dy,
                        bool dy_changes, const Tensor& dxn, double aux_scale, WeightGrads& wg,
                        const std::shared_ptr<CachingAllocator>& alloc) const {
  const kernels::MoeRouting& r = *s.routing;
  const int64_t n = xn.dim(0), E = cfg_.n_experts, kept = int64_t(r.comb_token.size());
  if (shared_) shared_->backward(k, xn, s.shared, dy, dy_changes, dxn, wg, alloc);
  else k.fill(dxn, 0.0);
  std::vector<double> dgate(static_cast<size_t>(kept));
  const MemCategory grads_cat = wg.deferred() ? MemCategory::Activations : MemCategory::Workspace;
  if (kept > 0)  // d gate = dy[t] . y_e[t]
    k.dot_rows(dy, r.comb_token.data(), s.y_experts, r.comb_row.data(), dgate.data(), kept);
  // The experts' output gradient rows (gate * dy[t]) go to the owners; their
  // input gradients come back into the same rows.
  Tensor dy_experts = activation(alloc, acc_, {s.y_experts.dim(0), cfg_.d_model}, grads_cat);
  k.fill(dy_experts, 0.0);
  if (kept > 0) k.add_rows(dy_experts, r.comb_row.data(), dy, r.comb_token.data(), r.comb_gate.data(), kept);
  const ExpertExchange& ex = *s.exchange;
  const Tensor dy_blocks = ex.dispatch(dy_experts, alloc, grads_cat);
  Tensor dx_experts = activation(alloc, acc_, {s.y_experts.dim(0), cfg_.d_model}, MemCategory::Workspace);
  const Tensor dx_blocks =
      ex.local() ? dx_experts : activation(alloc, acc_, {dy_blocks.dim(0), cfg_.d_model}, MemCategory::Workspace);
  // The experts' rows are routed rows, not the micro-batch's token blocks.
  const int64_t token_blocks = wg.token_blocks();
  wg.set_token_blocks(0);
  for (size_t i = 0; i < ex.blocks().size(); ++i) {
    const ExpertExchange::Block& b = ex.blocks()[i];
    // Reproducible mode: each source rank's gradients into its own lane.
    if (params_->has_grad_lanes() && (i == 0 || ex.blocks()[i - 1].source != b.source))
      wg.call([store = params_, unit = expert_unit_, lane = b.source] { store->switch_grad_lane(unit, lane); });
    experts_[size_t(b.expert - first_expert_)].backward(k, s.x_blocks.slice(b.offset, b.offset + b.rows), s.blocks[i],
                                        dy_blocks.slice(b.offset, b.offset + b.rows), false,
                                        dx_blocks.slice(b.offset, b.offset + b.rows), wg, alloc);
  }
  wg.set_token_blocks(token_blocks);
  ex.give_back(dx_blocks, dx_experts);
  if (kept > 0) k.add_rows(dxn, r.comb_token.data(), dx_experts, r.comb_row.data(), nullptr, kept);  // (token, slot) order
  // Router: softmax backward of the gates' and the aux loss's gradients.
  Tensor dlogits = activation(alloc, acc_, {n, E}, wg.deferred() ? MemCategory::Activations : MemCategory::Workspace);
  k.router_backward(r, routing_config(r.seq), dgate.data(), aux_scale, dlogits);
  const Tensor dl_op = as_operand(k, dlogits, op_, alloc);
  wg.linear(k, router_, xn, dl_op, false);
  router_.backward_input(k, dl_op, dxn, true);
}

}  // namespace meshtrain::model
