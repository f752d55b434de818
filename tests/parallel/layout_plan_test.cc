// The placement algebra of the layout plan (docs/math.md (M.12), (M.38), (M.61)):
// for every mesh of up to 8 ranks over (pp, dp, cp, tp) and every parameter of a
// Llama-style and a GPT-2-style model (uneven vocabulary and hidden splits,
// shared KV heads), the pieces tile each global tensor exactly once; replicas
// hold identical boxes; the norm and the checkpoint count every logical element
// exactly once; impossible counts are rejected naming the arithmetic.
#include "meshtrain/parallel/layout_plan.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "meshtrain/core/error.h"

using namespace meshtrain;

namespace {

model::ModelConfig llama() {
  model::ModelConfig c;
  c.vocab_size = 37;  // splits unevenly over 2, 4 and 8 ranks
  c.d_model = 16;
  c.n_layers = 8;
  c.n_heads = 8;
  c.n_kv_heads = 2;  // split at tp = 2, shared by 2 and 4 ranks at tp = 4, 8
  c.head_dim = 2;
  c.ffn_hidden = 22;  // uneven over 4 and 8
  c.max_seq_len = 8;
  c.finalize();
  return c;
}

model::ModelConfig gpt2() {
  model::ModelConfig c = llama();
  c.norm = model::NormKind::LayerNorm;
  c.positions = model::PositionKind::Learned;
  c.mlp = model::MlpKind::Gelu;
  c.tied_embeddings = true;
  c.bias = true;
  c.n_kv_heads = 8;
  c.finalize();
  return c;
}

std::vector<comm::MeshShape> meshes_up_to(int max_world) {
  std::vector<comm::MeshShape> out;
  for (int pp = 1; pp <= max_world; ++pp)
    for (int dp = 1; pp * dp <= max_world; ++dp)
      for (int cp = 1; pp * dp * cp <= max_world; ++cp)
        for (int tp = 1; pp * dp * cp * tp <= max_world; ++tp) {
          comm::MeshShape m;
          m.pp = pp, m.dp = dp, m.cp = cp, m.tp = tp;
          out.push_back(m);
        }
  return out;
}

// Element counts of one global tensor: how many distinct pieces, norm
// copies and checkpoint copies cover each element.
struct Coverage {
  std::vector<int> pieces, norm, checkpoint;
  explicit Coverage(int64_t n) : pieces(size_t(n)), norm(size_t(n)), checkpoint(size_t(n)) {}
};

void check_mesh(const model::ModelConfig& cfg, const comm::MeshShape& mesh) {
  const model::ModelSpec global = model::build_model_spec(cfg);
  std::map<std::string, Coverage> cover;
  for (const auto& p : global.params) cover.emplace(p.name, Coverage(p.numel()));
  // Boxes seen per (parameter, dp, cp): replicas across dp and cp must hold
  // the same set of boxes.
  std::map<std::tuple<std::string, int, int>, std::multiset<std::string>> boxes_by_replica;
  std::map<std::string, std::set<std::vector<int64_t>>> distinct;  // pieces already counted
  for (int r = 0; r < mesh.world_size(); ++r) {
    const parallel::LayoutPlan plan(cfg, mesh, r, parallel::LayoutOptions{});
    const int dp = plan.coord(comm::Axis::Dp), cp = plan.coord(comm::Axis::Cp);
    for (size_t i = 0; i < plan.spec().params.size(); ++i) {
      const model::ParamSpec& p = plan.spec().params[i];
      const parallel::ParamLayout& l = plan.param(int(i));
      // A tied embedding sits on the first stage and, as a copy, with the
      // head on the last; everything else on its chunk's stage.
      const bool tied = cfg.tied_embeddings && p.unit == 0 && mesh.pp > 1;
      const std::vector<int> stages = tied ? std::vector<int>{0, mesh.pp - 1} : std::vector<int>{plan.coord(comm::Axis::Pp)};
      EXPECT_EQ(l.stages, stages) << p.name;
      if (tied) {
        EXPECT_EQ(plan.tied_units(), std::vector<int>{0});
      }
      std::vector<int64_t> key = p.global_offset;
      for (int64_t d : p.shape.dims()) key.push_back(d);
      std::string box;
      for (int64_t v : key) box += std::to_string(v) + ",";
      boxes_by_replica[{p.name, dp, cp}].insert(box);
      Coverage& c = cover.at(p.name);
      const bool fresh = dp == 0 && cp == 0 && distinct[p.name].insert(key).second;
      for (int64_t e = 0; e < p.numel(); ++e) {
        const size_t g = size_t(p.global_flat(e));
        if (fresh) c.pieces[g]++;
        // dp and cp replicas (the data group) are counted by ZeRO ownership
        if (l.counts_in_norm && dp == 0 && cp == 0) c.norm[g]++;
        if (l.writes_checkpoint && dp == 0 && cp == 0) c.checkpoint[g]++;
      }
    }
  }
  for (const auto& [name, c] : cover) {
    for (size_t g = 0; g < c.pieces.size(); ++g) {
      ASSERT_EQ(c.pieces[g], 1) << name << " element " << g << " on " << mesh.str();
      ASSERT_EQ(c.norm[g], 1) << name << " element " << g << " counted in the norm " << c.norm[g] << " times on "
                              << mesh.str();
      ASSERT_EQ(c.checkpoint[g], 1) << name << " element " << g << " written " << c.checkpoint[g] << " times on "
                                    << mesh.str();
    }
  }
  for (const auto& [key, boxes] : boxes_by_replica) {
    const auto& first = boxes_by_replica.at({std::get<0>(key), 0, 0});
    EXPECT_EQ(boxes, first) << std::get<0>(key) << ": replicas over dp/cp must hold the same boxes on " << mesh.str();
  }
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(LayoutPlan, PiecesTileEveryTensorOnceOnEveryMeshUpTo8Ranks) {
  int placed = 0, rejected = 0;
  for (const auto& cfg : {llama(), gpt2()})
    for (const auto& mesh : meshes_up_to(8)) {
      SCOPED_TRACE(mesh.str() + (cfg.tied_embeddings ? " gpt2" : " llama"));
      if (cfg.n_heads % mesh.tp != 0) {
        // 8 query heads cannot be split over 3, 5, 6 or 7 ranks.
        EXPECT_THROW(parallel::LayoutPlan(cfg, mesh, 0, {}), ConfigError);
        ++rejected;
        continue;
      }
      check_mesh(cfg, mesh);
      ++placed;
    }
  EXPECT_EQ(placed + rejected, 2 * 63);  // every (pp, dp, cp, tp) with product <= 8
  EXPECT_EQ(rejected, 2 * 7);            // tp = 3 (4 meshes), 5, 6, 7
}

TEST(LayoutPlan, UnevenSplitsAreNeverRoundedDown) {
  comm::MeshShape mesh;
  mesh.tp = 4;
  std::vector<int64_t> vocab_rows, hidden_rows;
  for (int r = 0; r < 4; ++r) {
    const parallel::LayoutPlan plan(llama(), mesh, r, {});
    vocab_rows.push_back(plan.spec().find("model.embed_tokens.weight").shape[0]);
    hidden_rows.push_back(plan.spec().find("model.layers.0.mlp.up_proj.weight").shape[0]);
  }
  EXPECT_EQ(vocab_rows, (std::vector<int64_t>{10, 9, 9, 9}));   // 37 = 10 + 9 + 9 + 9
  EXPECT_EQ(hidden_rows, (std::vector<int64_t>{6, 6, 5, 5}));   // 22 = 6 + 6 + 5 + 5
}

TEST(LayoutPlan, SharedKvHeadsAreSummedOverTheRanksThatShareThem) {
  comm::MeshShape mesh;
  mesh.tp = 8;  // 2 KV heads over 8 ranks: each head on 4 ranks
  for (int r = 0; r < 8; ++r) {
    const parallel::LayoutPlan plan(llama(), mesh, r, {});
    const auto& spec = plan.spec();
    for (size_t i = 0; i < spec.params.size(); ++i) {
      if (spec.params[i].name != "model.layers.3.self_attn.k_proj.weight") continue;
      EXPECT_EQ(spec.params[i].global_offset[0], (r / 4) * 2) << "rank " << r;  // head r / 4, 2 rows per head
      EXPECT_EQ(plan.param(int(i)).tp_replicas, 4);
      EXPECT_TRUE(plan.param(int(i)).share_sums);  // partial: summed over the 4 (default mode)
      EXPECT_EQ(plan.param(int(i)).counts_in_norm, r % 4 == 0);
    }
  }
}

TEST(LayoutPlan, GradientGroupsFollowThePlacement) {
  comm::MeshShape mesh;
  mesh.tp = 2;
  mesh.dp = 2;
  parallel::LayoutOptions sp;
  sp.sequence_parallel = true;
  const parallel::LayoutPlan plain(llama(), mesh, 0, {}), seq(llama(), mesh, 0, sp);
  auto axes = [](const parallel::LayoutPlan& p, const std::string& name) {
    for (size_t i = 0; i < p.spec().params.size(); ++i)
      if (p.spec().params[i].name == name) return p.param(int(i)).reduce_axes;
    return comm::Axes{};
  };
  const std::string norm = "model.layers.0.input_layernorm.weight", q = "model.layers.0.self_attn.q_proj.weight";
  EXPECT_EQ(axes(plain, norm), comm::Axes(comm::Axis::Dp));
  EXPECT_EQ(axes(seq, norm), comm::Axis::Dp | comm::Axis::Tp);  // each rank saw a sequence shard
  EXPECT_EQ(axes(seq, q), comm::Axes(comm::Axis::Dp));           // sharded: nothing to sum over tp
}

TEST(LayoutPlan, ImpossibleCountsAreRejectedWithTheArithmetic) {
  comm::MeshShape mesh;
  mesh.tp = 3;
  const std::string heads = error_of([&] { parallel::LayoutPlan(llama(), mesh, 0, {}); });
  EXPECT_NE(heads.find("model.n_heads = 8 does not split over parallel.tp = 3 (8 % 3 = 2)"), std::string::npos)
      << heads;
  model::ModelConfig kv = llama();
  kv.n_heads = 6;
  kv.n_kv_heads = 3;
  kv.head_dim = 2;
  mesh.tp = 2;
  const std::string shared = error_of([&] { parallel::LayoutPlan(kv, mesh, 0, {}); });
  EXPECT_NE(shared.find("model.n_kv_heads = 3 and parallel.tp = 2: neither divides the other"), std::string::npos)
      << shared;
  comm::MeshShape deep;
  deep.pp = 9;
  const std::string stages = error_of([&] { parallel::LayoutPlan(llama(), deep, 0, {}); });
  EXPECT_NE(stages.find("9 chunks but model.n_layers = 8"), std::string::npos) << stages;
  EXPECT_NE(error_of([&] { parallel::pipeline_chunks(8, 2, 1, {3, 4}); }).find("adds up to 7 blocks"),
            std::string::npos);
  EXPECT_NE(error_of([&] { model::split_extent(5, 2, 2, 0, "x"); }).find("not whole granules of 2"), std::string::npos);
  EXPECT_NE(error_of([&] { model::split_extent(6, 2, 4, 0, "x"); }).find("3 granules of 2 cannot be split over 4"),
            std::string::npos);
}

TEST(LayoutPlan, PipelineChunksCarryTheEmbeddingAndTheHead) {
  const auto c = parallel::pipeline_chunks(8, 2, 2, {});
  ASSERT_EQ(c.size(), 4u);
  EXPECT_EQ(c[0].first, 0);  // embedding + blocks 0, 1
  EXPECT_EQ(c[0].last, 2);
  EXPECT_EQ(c[1].first, 3);
  EXPECT_EQ(c[3].last, 9);   // blocks 6, 7 + head (segment 9)
  EXPECT_EQ(c[2].pp_rank, 0);  // interleaved: chunk c on rank c % pp
  EXPECT_EQ(c[3].pp_rank, 1);
  const auto e = parallel::pipeline_chunks(8, 3, 1, {2, 5, 1});
  EXPECT_EQ(e[1].first, 3);
  EXPECT_EQ(e[1].last, 7);
}

TEST(LayoutPlan, TableNamesEveryParameterAndEveryRank) {
  comm::MeshShape mesh;
  mesh.tp = 2;
  mesh.dp = 2;
  parallel::LayoutOptions o;
  o.zero_stage = 1;
  const std::string t = parallel::plan_table(llama(), mesh, o, PrecisionPolicy::uniform(DType::F32));
  for (const auto& p : model::build_model_spec(llama()).params) EXPECT_NE(t.find(p.name), std::string::npos) << p.name;
  const size_t row = t.find("model.embed_tokens.weight");
  const std::string line = t.substr(row, t.find('\n', row) - row);
  EXPECT_NE(line.find("[19, 16]"), std::string::npos) << line;  // vocab 37 over 2 ranks: 19 + 18
  EXPECT_NE(line.find("[18, 16]"), std::string::npos) << line;
  EXPECT_NE(t.find("rank   3 (pp 0 dp 1 cp 0 tp 1)"), std::string::npos) << t;
  auto row_of = [](const std::string& table, const std::string& name) {
    const size_t at = table.find(name + " ");
    return table.substr(at, table.find('\n', at) - at);
  };
  // KV heads: 2 over 2 ranks, none shared.
  EXPECT_EQ(row_of(t, "model.layers.0.self_attn.k_proj.weight").find("tp:"), std::string::npos) << t;
  mesh.tp = 4;
  mesh.dp = 1;
  const std::string shared = parallel::plan_table(llama(), mesh, o, PrecisionPolicy::uniform(DType::F32));
  const std::string k = row_of(shared, "model.layers.0.self_attn.k_proj.weight");
  EXPECT_NE(k.find("S(0)x2"), std::string::npos) << k;  // 2 KV heads over 4 ranks
  EXPECT_NE(k.find("dp+tp:2"), std::string::npos) << k;
  // Reproducible mode: each of the two computes the head's whole gradient (docs/math.md (M.76)).
  o.canonical_blocks = 8;
  const std::string whole = row_of(parallel::plan_table(llama(), mesh, o, PrecisionPolicy::uniform(DType::F32)),
                                   "model.layers.0.self_attn.k_proj.weight");
  EXPECT_NE(whole.find("S(0)x2"), std::string::npos) << whole;
  EXPECT_EQ(whole.find("tp:"), std::string::npos) << whole;
}
