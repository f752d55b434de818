// The tensor-parallel plan as data (model/tp_plan.h): rules matched by
// module-name patterns, first match wins, unmatched modules replicated; the
// pure model (every parameter replicated) runs on one rank exactly as the
// planned one; a layer refuses a plan that places one of its parameters in
// a style it does not compute, naming the parameter and both styles.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "meshtrain/core/error.h"
#include "meshtrain/model/attention_layer.h"
#include "meshtrain/model/mlp_layer.h"
#include "meshtrain/model/segments.h"
#include "meshtrain/model/tp_plan.h"
#include "model/model_fixtures.h"

using namespace meshtrain;
using namespace meshtrain::testing;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

namespace {

model::ModelConfig ready(model::ModelConfig c) {
  c.finalize();
  return c;
}

// The rank-local store of tp rank 0 of `tp` for a plan.
model::ParameterStore store_at(const model::ModelConfig& cfg, model::TpPlan plan, int tp,
                               const std::shared_ptr<CachingAllocator>& alloc) {
  model::ModelSpec global = model::pure_model_spec(cfg);
  model::parallelize(global, cfg, plan);
  model::ModelPartition part;
  part.tp_size = tp;
  return model::ParameterStore(model::localize(global, cfg, part), PrecisionPolicy::uniform(DType::F64), alloc);
}

}  // namespace

TEST(TpPlan, PatternsMatchModulesFirstRuleWinsAndTheRestReplicate) {
  const model::TpRule rules[] = {
      {"model.layers.1.*", model::TpStyle::Replicate},
      {"model.layers.*.q_proj", model::TpStyle::Column, model::TpGranule::Head},
      {"model.layers.*.down_proj", model::TpStyle::Row},
  };
  EXPECT_EQ(model::match_tp_rule(rules, "model.layers.1.self_attn.q_proj"), &rules[0]);
  // `*` spans dots: a pattern reaches inside attention and into experts.
  EXPECT_EQ(model::match_tp_rule(rules, "model.layers.0.self_attn.q_proj"), &rules[1]);
  EXPECT_EQ(model::match_tp_rule(rules, "model.layers.3.mlp.experts.7.down_proj"), &rules[2]);
  EXPECT_EQ(model::match_tp_rule(rules, "model.layers.0.self_attn.q_proj_b"), nullptr);  // whole names only
  EXPECT_EQ(model::match_tp_rule(rules, "lm_head"), nullptr);
  EXPECT_EQ(model::module_of("model.layers.3.mlp.down_proj.bias"), "model.layers.3.mlp.down_proj");

  const model::ModelConfig cfg = ready(tiny_gpt2());
  model::ModelSpec spec = model::pure_model_spec(cfg);
  model::parallelize(spec, cfg, rules);
  EXPECT_EQ(spec.find("model.layers.0.mlp.fc_out.weight").tp_style, model::TpStyle::Replicate);  // no rule
  EXPECT_EQ(spec.find("model.layers.1.mlp.fc_out.weight").tp_style, model::TpStyle::Replicate);
  EXPECT_EQ(spec.find("model.norm.weight").tp, model::Placement::replicate());
}

TEST(TpPlan, StylesBecomePlacementsWithTheirGranules) {
  model::ModelConfig c = tiny_gpt2();
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 2;
  c = ready(c);
  const model::ModelSpec spec = model::build_model_spec(c);
  // Column: weight and bias by output rows, K/V in whole KV heads at most
  // n_kv_heads distinct pieces; row: weight by input columns, bias whole.
  EXPECT_EQ(spec.find("model.layers.0.self_attn.q_proj.weight").tp, model::Placement::shard(0, c.head_dim));
  EXPECT_EQ(spec.find("model.layers.0.self_attn.q_proj.bias").tp, model::Placement::shard(0, c.head_dim));
  EXPECT_EQ(spec.find("model.layers.0.self_attn.k_proj.weight").tp, model::Placement::shard(0, c.head_dim, 2));
  EXPECT_EQ(spec.find("model.layers.0.self_attn.o_proj.weight").tp, model::Placement::shard(1, c.head_dim));
  EXPECT_EQ(spec.find("model.layers.0.self_attn.o_proj.bias").tp, model::Placement::replicate());
  EXPECT_EQ(spec.find("model.layers.0.mlp.fc_in.weight").tp, model::Placement::shard(0));
  EXPECT_EQ(spec.find("model.layers.0.mlp.fc_out.weight").tp, model::Placement::shard(1));
  EXPECT_EQ(spec.find("model.embed_tokens.weight").tp_style, model::TpStyle::Vocab);
  EXPECT_EQ(spec.find("model.embed_positions.weight").tp, model::Placement::replicate());
  // Every parameter the pure model has, the planned one has with the same
  // shape and order: the plan changes placements only.
  const model::ModelSpec pure = model::pure_model_spec(c);
  ASSERT_EQ(pure.params.size(), spec.params.size());
  for (size_t i = 0; i < pure.params.size(); ++i) {
    EXPECT_EQ(pure.params[i].name, spec.params[i].name);
    EXPECT_EQ(pure.params[i].global_shape, spec.params[i].global_shape);
    EXPECT_EQ(pure.params[i].tp_style, model::TpStyle::Replicate);
  }
}

TEST(TpPlan, ThePureModelRunsOnOneRankAsThePlannedOne) {
  for (const model::ModelConfig& cfg : {ready(tiny_llama()), ready(tiny_gpt2())}) {
    const OwnedBatch b = tiny_batch();
    double loss[2];
    for (int planned = 0; planned < 2; ++planned) {
      auto alloc = CachingAllocator::create();
      model::ModelSpec spec = planned ? model::build_model_spec(cfg) : model::pure_model_spec(cfg);
      model::Transformer m(cfg, alloc, exec_in(DType::F64), model::localize(spec, cfg, model::ModelPartition::whole()),
                           nullptr, nullptr, nullptr);
      m.params().initialize(cfg.seed);
      loss[planned] = m.forward_loss(b.view()).loss_sum;
    }
    EXPECT_EQ(loss[0], loss[1]);
  }
}

TEST(TpPlan, ALayerRefusesAPlanThatDisagreesWithWhatItComputes) {
  const model::ModelConfig cfg = ready(tiny_llama());
  auto alloc = CachingAllocator::create();
  // The attention output projection made column-parallel.
  const model::TpRule o_column[] = {{"model.layers.*.o_proj", model::TpStyle::Column, model::TpGranule::Head}};
  std::vector<model::TpRule> plan(model::default_tp_plan().begin(), model::default_tp_plan().end());
  plan.insert(plan.begin(), o_column[0]);
  for (int tp : {1, 2}) {
    model::ParameterStore ps = store_at(cfg, plan, tp, alloc);
    EXPECT_THAT([&] { model::SelfAttention attn(cfg, ps, "model.layers.0.self_attn", nullptr); },
                ThrowsMessage<ConfigError>(AllOf(HasSubstr("model.layers.0.self_attn.o_proj.weight column-parallel"),
                                                 HasSubstr("computes it row-parallel"))));
  }
  // A replicated feed-forward is the same arithmetic on a group of one, and
  // refused on two (the regions around it split and reduce).
  const model::TpRule mlp_whole[] = {{"model.layers.*.mlp.*", model::TpStyle::Replicate}};
  model::ParameterStore one = store_at(cfg, mlp_whole, 1, alloc);
  EXPECT_NO_THROW(model::Mlp(cfg, one, "model.layers.0.mlp"));
  model::ParameterStore two = store_at(cfg, mlp_whole, 2, alloc);
  EXPECT_THAT([&] { model::Mlp(cfg, two, "model.layers.0.mlp"); },
              ThrowsMessage<ConfigError>(AllOf(HasSubstr("gate_proj.weight replicate-parallel"),
                                               HasSubstr("replicate runs only on a group of one"))));
  // A norm split by the plan is refused on a group larger than one.
  const model::TpRule norm_split[] = {{"*norm", model::TpStyle::Column}};
  model::ParameterStore split = store_at(cfg, norm_split, 2, alloc);
  EXPECT_THAT([&] { model::HeadSegment(cfg, split, model::TpRegions()); },
              ThrowsMessage<ConfigError>(HasSubstr("model.norm.weight column-parallel")));
}
