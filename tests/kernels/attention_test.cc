#include "meshtrain/kernels/cpu/attention.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "kernel_test_util.h"
#include "meshtrain/core/dtype.h"
#include "support/numeric.h"

using namespace meshtrain::kernels;
using meshtrain::testing::finite_difference;
using meshtrain::testing::max_rel_diff;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

int64_t q_elems(const AttentionShape& s) { return s.batch * s.seq * s.q_heads * s.head_dim; }
int64_t kv_elems(const AttentionShape& s) { return s.batch * s.seq * s.kv_heads * s.head_dim; }

std::vector<double> randn(int64_t n, uint32_t seed, double stddev = 1.0) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> dist(0.0, stddev);
  std::vector<double> x(n);
  for (auto& v : x) v = dist(rng);
  return x;
}

template <typename T>
std::vector<T> cast(const std::vector<double>& x) {
  return std::vector<T>(x.begin(), x.end());
}
template <typename T>
std::vector<double> to_double(const std::vector<T>& x) {
  return std::vector<double>(x.begin(), x.end());
}

// Documents of the given lengths, repeated per batch row (ids restart per row).
std::vector<int32_t> segments(int64_t batch, const std::vector<int64_t>& lens) {
  std::vector<int32_t> seg;
  for (int64_t b = 0; b < batch; ++b)
    for (size_t d = 0; d < lens.size(); ++d)
      for (int64_t i = 0; i < lens[d]; ++i) seg.push_back(static_cast<int32_t>(d + 10 * b));
  return seg;
}

struct Inputs {
  AttentionShape s;
  std::vector<double> q, k, v, dout;
  std::vector<int32_t> seg;  // empty: one document per row
  double scale;
  const int32_t* seg_ptr() const { return seg.empty() ? nullptr : seg.data(); }
};

Inputs make_inputs(AttentionShape s, std::vector<int64_t> docs, uint32_t seed) {
  Inputs in{s, randn(q_elems(s), seed), randn(kv_elems(s), seed + 1), randn(kv_elems(s), seed + 2),
            randn(q_elems(s), seed + 3), {}, 1.0 / std::sqrt(static_cast<double>(s.head_dim))};
  if (!docs.empty()) in.seg = segments(s.batch, docs);
  return in;
}

bool legal(const Inputs& in, int64_t b, int64_t i, int64_t j) {
  return j <= i && (in.seg.empty() || in.seg[b * in.s.seq + i] == in.seg[b * in.s.seq + j]);
}

// Full masked softmax in double: out [B,T,Hq,D], lse [B,Hq,T].
void reference_forward(const Inputs& in, std::vector<double>& out, std::vector<double>& lse) {
  const auto& s = in.s;
  const int64_t T = s.seq, H = s.q_heads, Hk = s.kv_heads, D = s.head_dim, G = H / Hk;
  out.assign(q_elems(s), 0.0);
  lse.assign(s.batch * H * T, -kInf);
  std::vector<double> sc(T);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        double m = -kInf;
        for (int64_t j = 0; j < T; ++j) {
          sc[j] = -kInf;
          if (!legal(in, b, i, j)) continue;
          double dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += in.q[((b * T + i) * H + h) * D + d] * in.k[((b * T + j) * Hk + h / G) * D + d];
          sc[j] = in.scale * dot;
          m = std::max(m, sc[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < T; ++j) {
          if (sc[j] == -kInf) continue;
          const double p = std::exp(sc[j] - m);
          sum += p;
          for (int64_t d = 0; d < D; ++d)
            out[((b * T + i) * H + h) * D + d] += p * in.v[((b * T + j) * Hk + h / G) * D + d];
        }
        for (int64_t d = 0; d < D; ++d) out[((b * T + i) * H + h) * D + d] /= sum;
        lse[(b * H + h) * T + i] = m + std::log(sum);
      }
}

void reference_backward(const Inputs& in, const std::vector<double>& out, const std::vector<double>& lse,
                        std::vector<double>& dq, std::vector<double>& dk, std::vector<double>& dv) {
  const auto& s = in.s;
  const int64_t T = s.seq, H = s.q_heads, Hk = s.kv_heads, D = s.head_dim, G = H / Hk;
  dq.assign(q_elems(s), 0.0);
  dk.assign(kv_elems(s), 0.0);
  dv.assign(kv_elems(s), 0.0);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        const double* qi = &in.q[((b * T + i) * H + h) * D];
        const double* doi = &in.dout[((b * T + i) * H + h) * D];
        double di = 0;
        for (int64_t d = 0; d < D; ++d) di += doi[d] * out[((b * T + i) * H + h) * D + d];
        for (int64_t j = 0; j < T; ++j) {
          if (!legal(in, b, i, j)) continue;
          const int64_t kj = ((b * T + j) * Hk + h / G) * D;
          double dot = 0, dp = 0;
          for (int64_t d = 0; d < D; ++d) {
            dot += qi[d] * in.k[kj + d];
            dp += doi[d] * in.v[kj + d];
          }
          const double p = std::exp(in.scale * dot - lse[(b * H + h) * T + i]);
          const double ds = p * (dp - di) * in.scale;
          for (int64_t d = 0; d < D; ++d) {
            dv[kj + d] += p * doi[d];
            dq[((b * T + i) * H + h) * D + d] += ds * in.k[kj + d];
            dk[kj + d] += ds * qi[d];
          }
        }
      }
}

template <typename T>
struct Result {
  std::vector<T> out, lse, dq, dk, dv;
};

template <typename T>
Result<T> run(const Inputs& in) {
  Result<T> r;
  const auto q = cast<T>(in.q), k = cast<T>(in.k), v = cast<T>(in.v), dout = cast<T>(in.dout);
  r.out.assign(q_elems(in.s), T(7));
  r.lse.assign(in.s.batch * in.s.q_heads * in.s.seq, T(7));
  attention_forward<T>(in.s, q.data(), k.data(), v.data(), in.seg_ptr(), T(in.scale), r.out.data(), r.lse.data());
  r.dq.assign(q_elems(in.s), T(7));  // garbage: backward overwrites
  r.dk.assign(kv_elems(in.s), T(7));
  r.dv.assign(kv_elems(in.s), T(7));
  attention_backward<T>(in.s, q.data(), k.data(), v.data(), in.seg_ptr(), T(in.scale), r.out.data(), r.lse.data(),
                        dout.data(), r.dq.data(), r.dk.data(), r.dv.data());
  return r;
}

struct Case {
  AttentionShape s;
  std::vector<int64_t> docs;
};

std::vector<Case> cases() {
  return {
      {{2, 37, 2, 2, 8}, {}},                 // T < one tile, GQA 1
      {{1, 64, 4, 2, 16}, {}},                // exactly one tile, GQA 2
      {{2, 130, 4, 1, 24}, {}},               // T not a multiple of the tile, GQA 4, D not a multiple of 16
      {{2, 150, 8, 2, 64}, {40, 1, 70, 39}},  // packed documents incl. a one-token one, GQA 4
      {{1, 200, 2, 1, 80}, {64, 64, 72}},     // documents aligned with tiles (whole tiles skipped), D > 64
      {{1, 257, 4, 4, 32}, {257}},            // one explicit document
      {{1, 700, 4, 1, 64}, {300, 400}},       // a long row: the backward packs its kv group in 2-3 spans
  };
}

TEST(Attention, ForwardAndBackwardMatchReferenceDouble) {
  uint32_t seed = 1;
  for (const auto& c : cases()) {
    const Inputs in = make_inputs(c.s, c.docs, seed += 10);
    std::vector<double> out, lse, dq, dk, dv;
    reference_forward(in, out, lse);
    reference_backward(in, out, lse, dq, dk, dv);
    const Result<double> r = run<double>(in);
    SCOPED_TRACE(testing::Message() << "T=" << c.s.seq << " Hq=" << c.s.q_heads << " Hkv=" << c.s.kv_heads);
    // floor 1e-3: gradient entries near 0 come from cancelling sums
    EXPECT_LT(max_rel_diff(r.out, out, 1e-3), 1e-11);
    EXPECT_LT(max_rel_diff(r.lse, lse, 1e-3), 1e-12);
    EXPECT_LT(max_rel_diff(r.dq, dq, 1e-3), 1e-11);
    EXPECT_LT(max_rel_diff(r.dk, dk, 1e-3), 1e-11);
    EXPECT_LT(max_rel_diff(r.dv, dv, 1e-3), 1e-11);
  }
}

// At every runnable ISA level (scalar loops, AVX2 and AVX-512 micro-kernels
// with their masked tails).
TEST(Attention, FloatAgreesWithDoubleAtEveryIsaLevel) {
  for (Isa isa : test::runnable_levels()) {
  ScopedIsa level(isa);
  SCOPED_TRACE(isa_name(isa));
  uint32_t seed = 500;
  for (const auto& c : cases()) {
    const Inputs in = make_inputs(c.s, c.docs, seed += 10);
    const Result<double> rd = run<double>(in);
    const Result<float> rf = run<float>(in);
    SCOPED_TRACE(testing::Message() << "T=" << c.s.seq << " D=" << c.s.head_dim);
    // floor 1: small entries are compared by absolute error
    EXPECT_LT(max_rel_diff(to_double(rf.out), rd.out, 1.0), 1e-5);
    EXPECT_LT(max_rel_diff(to_double(rf.lse), rd.lse, 1.0), 1e-6);
    EXPECT_LT(max_rel_diff(to_double(rf.dq), rd.dq, 1.0), 1e-4);
    EXPECT_LT(max_rel_diff(to_double(rf.dk), rd.dk, 1.0), 1e-4);
    EXPECT_LT(max_rel_diff(to_double(rf.dv), rd.dv, 1.0), 1e-4);
  }
  }
}

// L = sum(out * dout), so dL/dx is what backward returns for upstream dout.
TEST(Attention, GradientsMatchFiniteDifferences) {
  const std::vector<Case> small = {{{2, 9, 4, 2, 3}, {4, 5}}, {{1, 70, 2, 1, 4}, {30, 40}}};
  uint32_t seed = 900;
  for (const auto& c : small) {
    Inputs in = make_inputs(c.s, c.docs, seed += 10);
    const Result<double> r = run<double>(in);
    auto loss_with = [&](std::vector<double> Inputs::*field) {
      return [&, field](const std::vector<double>& x) {
        Inputs t = in;
        t.*field = x;
        std::vector<double> out(q_elems(t.s)), lse(t.s.batch * t.s.q_heads * t.s.seq);
        attention_forward<double>(t.s, t.q.data(), t.k.data(), t.v.data(), t.seg_ptr(), t.scale, out.data(),
                                  lse.data());
        double l = 0;
        for (size_t i = 0; i < out.size(); ++i) l += out[i] * t.dout[i];
        return l;
      };
    };
    SCOPED_TRACE(testing::Message() << "T=" << c.s.seq);
    EXPECT_LT(max_rel_diff(r.dq, finite_difference(loss_with(&Inputs::q), in.q, 1e-5), 1e-4), 1e-5);
    EXPECT_LT(max_rel_diff(r.dk, finite_difference(loss_with(&Inputs::k), in.k, 1e-5), 1e-4), 1e-5);
    EXPECT_LT(max_rel_diff(r.dv, finite_difference(loss_with(&Inputs::v), in.v, 1e-5), 1e-4), 1e-5);
  }
}

// Changing another document of the same row (its q, k, v and upstream
// gradient) leaves this document's outputs and gradients bit-identical.
template <typename T>
void check_packing_isolation() {
  const std::vector<int64_t> docs = {30, 50, 47};  // doc 1 = positions [30, 80)
  Inputs a = make_inputs({2, 127, 4, 2, 16}, docs, 77);
  Inputs b = a;
  const auto& s = a.s;
  const int64_t T_ = s.seq;
  auto in_doc1 = [](int64_t t) { return t >= 30 && t < 80; };
  std::mt19937 rng(5);
  std::normal_distribution<double> dist(0, 3);
  for (int64_t bt = 0; bt < s.batch * T_; ++bt) {
    if (in_doc1(bt % T_)) continue;
    for (int64_t e = 0; e < s.q_heads * s.head_dim; ++e) {
      b.q[bt * s.q_heads * s.head_dim + e] = dist(rng);
      b.dout[bt * s.q_heads * s.head_dim + e] = dist(rng);
    }
    for (int64_t e = 0; e < s.kv_heads * s.head_dim; ++e) {
      b.k[bt * s.kv_heads * s.head_dim + e] = dist(rng);
      b.v[bt * s.kv_heads * s.head_dim + e] = dist(rng);
    }
  }
  const Result<T> ra = run<T>(a), rb = run<T>(b);
  int64_t checked = 0;
  for (int64_t bt = 0; bt < s.batch * T_; ++bt) {
    if (!in_doc1(bt % T_)) continue;
    for (int64_t e = 0; e < s.q_heads * s.head_dim; ++e) {
      const int64_t i = bt * s.q_heads * s.head_dim + e;
      ASSERT_EQ(ra.out[i], rb.out[i]);
      ASSERT_EQ(ra.dq[i], rb.dq[i]);
      ++checked;
    }
    for (int64_t e = 0; e < s.kv_heads * s.head_dim; ++e) {
      const int64_t i = bt * s.kv_heads * s.head_dim + e;
      ASSERT_EQ(ra.dk[i], rb.dk[i]);
      ASSERT_EQ(ra.dv[i], rb.dv[i]);
    }
    for (int64_t h = 0; h < s.q_heads; ++h) {
      const int64_t i = ((bt / T_) * s.q_heads + h) * T_ + bt % T_;
      ASSERT_EQ(ra.lse[i], rb.lse[i]);
    }
  }
  EXPECT_EQ(checked, s.batch * 50 * s.q_heads * s.head_dim);
  EXPECT_NE(ra.out[0], rb.out[0]);  // the other documents did change
}

TEST(Attention, PackedDocumentsAreIsolatedFloat) { check_packing_isolation<float>(); }
TEST(Attention, PackedDocumentsAreIsolatedDouble) { check_packing_isolation<double>(); }

// Context-parallel use: a query shard at global offset against K/V blocks
// computed separately (some fully masked) and merged (docs/math.md (M.49)).
template <typename T>
void check_merge(const std::vector<int64_t>& docs) {
  const AttentionShape s{2, 160, 4, 2, 16};
  const Inputs in = make_inputs(s, docs, 31);
  const auto q = cast<T>(in.q), k = cast<T>(in.k), v = cast<T>(in.v), dout = cast<T>(in.dout);
  const Result<T> full = run<T>(in);
  const int64_t H = s.q_heads, Hk = s.kv_heads, D = s.head_dim, T_ = s.seq;

  // Slice positions [p0, p0 + n) of a [B, T, heads, D] tensor (or of seg).
  auto slice = [&](const auto& x, int64_t heads_d, int64_t p0, int64_t n) {
    std::decay_t<decltype(x)> y;
    for (int64_t b = 0; b < s.batch; ++b)
      y.insert(y.end(), x.begin() + (b * T_ + p0) * heads_d, x.begin() + (b * T_ + p0 + n) * heads_d);
    return y;
  };
  const int64_t qp0 = 50, qn = 50;  // query shard [50, 100)
  const auto qsh = slice(q, H * D, qp0, qn);
  const std::vector<int32_t> qseg = in.seg.empty() ? std::vector<int32_t>{} : slice(in.seg, 1, qp0, qn);
  const AttentionSpan qs{qn, qp0, qseg.empty() ? nullptr : qseg.data()};
  // K/V blocks: [0, 50) and [50, 100) are live, [100, 160) is fully masked by causality.
  const std::vector<std::pair<int64_t, int64_t>> blocks = {{0, 50}, {50, 50}, {100, 60}};

  const int64_t rows = s.batch * H * qn;
  std::vector<T> o(rows * D), a(rows), l(rows), o2(rows * D), a2(rows), l2(rows);
  std::vector<T> dq(s.batch * qn * H * D, T(0)), dk(kv_elems(s), T(0)), dv(kv_elems(s), T(0));
  SoftmaxState<T> acc{o.data(), a.data(), l.data()}, part{o2.data(), a2.data(), l2.data()};
  softmax_state_init(acc, rows, D);
  std::vector<T> folded_o(rows * D), folded_a(rows), folded_l(rows);
  SoftmaxState<T> folded{folded_o.data(), folded_a.data(), folded_l.data()};
  softmax_state_init(folded, rows, D);
  for (const auto& [kp0, kn] : blocks) {
    const auto ksh = slice(k, Hk * D, kp0, kn), vsh = slice(v, Hk * D, kp0, kn);
    const std::vector<int32_t> kseg = in.seg.empty() ? std::vector<int32_t>{} : slice(in.seg, 1, kp0, kn);
    const AttentionSpan ks{kn, kp0, kseg.empty() ? nullptr : kseg.data()};
    softmax_state_init(part, rows, D);
    attention_partial_forward<T>(s, qsh.data(), qs, ksh.data(), vsh.data(), ks, T(in.scale), part);
    if (kp0 == 100)
      for (int64_t r = 0; r < rows; ++r) {  // a fully masked block is an explicit zero state
        ASSERT_EQ(a2[r], -std::numeric_limits<T>::infinity());
        ASSERT_EQ(l2[r], T(0));
      }
    softmax_state_merge(acc, part, rows, D);
    attention_partial_forward<T>(s, qsh.data(), qs, ksh.data(), vsh.data(), ks, T(in.scale), folded);
  }
  // Merging a fully masked state into itself, and into a live one, changes nothing and makes no NaN.
  softmax_state_merge(part, part, rows, D);
  softmax_state_merge(acc, part, rows, D);

  std::vector<T> out(s.batch * qn * H * D), lse(rows), out_f(out.size()), lse_f(rows);
  softmax_state_finalize(s, qn, acc, out.data(), lse.data());
  softmax_state_finalize(s, qn, folded, out_f.data(), lse_f.data());
  const double tol = sizeof(T) == 4 ? 1e-5 : 1e-12;
  const double floor = sizeof(T) == 4 ? 1.0 : 1e-3;
  const auto want_out = to_double(slice(full.out, H * D, qp0, qn));
  EXPECT_LT(max_rel_diff(to_double(out), want_out, floor), tol);
  EXPECT_LT(max_rel_diff(to_double(out_f), want_out, floor), tol);
  std::vector<double> want_lse;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = qp0; t < qp0 + qn; ++t) want_lse.push_back(full.lse[(b * H + h) * T_ + t]);
  EXPECT_LT(max_rel_diff(to_double(lse), want_lse, floor), tol);

  // Backward per K/V block with the final out/lse, accumulated: equals the
  // full gradients of these queries and (for the shard's contribution) keys.
  const auto dosh = slice(dout, H * D, qp0, qn);
  for (const auto& [kp0, kn] : blocks) {
    const auto ksh = slice(k, Hk * D, kp0, kn), vsh = slice(v, Hk * D, kp0, kn);
    const std::vector<int32_t> kseg = in.seg.empty() ? std::vector<int32_t>{} : slice(in.seg, 1, kp0, kn);
    const AttentionSpan ks{kn, kp0, kseg.empty() ? nullptr : kseg.data()};
    std::vector<T> dkb(s.batch * kn * Hk * D, T(0)), dvb(dkb.size(), T(0));
    attention_partial_backward<T>(s, qsh.data(), qs, ksh.data(), vsh.data(), ks, T(in.scale), out.data(),
                                  lse.data(), dosh.data(), dq.data(), dkb.data(), dvb.data());
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t e = 0; e < kn * Hk * D; ++e) {
        dk[(b * T_ + kp0) * Hk * D + e] += dkb[b * kn * Hk * D + e];
        dv[(b * T_ + kp0) * Hk * D + e] += dvb[b * kn * Hk * D + e];
      }
  }
  EXPECT_LT(max_rel_diff(to_double(dq), to_double(slice(full.dq, H * D, qp0, qn)), floor), 10 * tol);
  // The full dk/dv sum over all query shards; check against the reference
  // restricted to this shard's queries.
  Inputs shard = in;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t t = 0; t < T_; ++t)
      if (t < qp0 || t >= qp0 + qn)
        for (int64_t e = 0; e < H * D; ++e) shard.dout[(b * T_ + t) * H * D + e] = 0;
  std::vector<double> rout, rlse, rdq, rdk, rdv;
  reference_forward(shard, rout, rlse);
  reference_backward(shard, rout, rlse, rdq, rdk, rdv);
  EXPECT_LT(max_rel_diff(to_double(dk), rdk, floor), 10 * tol);
  EXPECT_LT(max_rel_diff(to_double(dv), rdv, floor), 10 * tol);
}

TEST(Attention, PartialStatesMergeToFullResult) {
  check_merge<double>({});
  check_merge<float>({});
}
TEST(Attention, PartialStatesMergeToFullResultWithDocuments) {
  check_merge<double>({20, 40, 100});  // query shard [50,100) sees no key of doc 0: block [0,50) is partly masked
  check_merge<float>({20, 40, 100});
  check_merge<double>({50, 110});  // block [0,50) is doc 0 only: fully masked for every shard query
}

// Each output element is computed by one task in a fixed order, so the thread
// count does not change a single bit.
TEST(Attention, ResultsDoNotDependOnThreadCountAtEveryIsaLevel) {
  const Inputs in = make_inputs({3, 190, 8, 4, 64}, {100, 90}, 4242);
  for (Isa isa : test::runnable_levels()) {
  ScopedIsa level(isa);
  SCOPED_TRACE(isa_name(isa));
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const Result<float> r1 = run<float>(in);
  omp_set_num_threads(2);
  const Result<float> r2 = run<float>(in);
  omp_set_num_threads(saved);
  EXPECT_EQ(r1.out, r2.out);
  EXPECT_EQ(r1.lse, r2.lse);
  EXPECT_EQ(r1.dq, r2.dq);
  EXPECT_EQ(r1.dk, r2.dk);
  EXPECT_EQ(r1.dv, r2.dv);
  }
}

// Under the bf16 policy q, k, v and out are bf16 (docs/math.md (M.80)):
// the kernel widens the inputs exactly and computes in f32, so it has the
// bits of the f32 kernel on the widened values, with out rounded once as it
// is written; the backward reads that rounded out.
TEST(Attention, Bf16InputsHaveTheBitsOfF32OnTheirValuesAtEveryIsaLevel) {
  using meshtrain::bf16;
  auto to_bits = [](const std::vector<double>& x) {
    std::vector<uint16_t> b(x.size());
    for (size_t i = 0; i < x.size(); ++i) b[i] = bf16::from_float(float(x[i]));
    return b;
  };
  auto widen = [](const std::vector<uint16_t>& b) {
    std::vector<float> x(b.size());
    for (size_t i = 0; i < b.size(); ++i) x[i] = std::bit_cast<float>(uint32_t(b[i]) << 16);
    return x;
  };
  for (Isa isa : test::runnable_levels()) {
    ScopedIsa level(isa);
    SCOPED_TRACE(isa_name(isa));
    uint32_t seed = 900;
    for (const auto& c : cases()) {
      SCOPED_TRACE(testing::Message() << "T=" << c.s.seq << " D=" << c.s.head_dim);
      const Inputs in = make_inputs(c.s, c.docs, seed += 10);
      const auto q16 = to_bits(in.q), k16 = to_bits(in.k), v16 = to_bits(in.v);
      const auto q = widen(q16), k = widen(k16), v = widen(v16), dout = cast<float>(in.dout);
      const int64_t nq = q_elems(in.s), nk = kv_elems(in.s), nl = in.s.batch * in.s.q_heads * in.s.seq;
      const float scale = float(in.scale);
      std::vector<float> out(nq), lse(nl), lse16(nl);
      std::vector<uint16_t> out16(nq);
      attention_forward<float>(in.s, q.data(), k.data(), v.data(), in.seg_ptr(), scale, out.data(), lse.data());
      attention_forward<float>(in.s, q16.data(), k16.data(), v16.data(), in.seg_ptr(), scale, out16.data(),
                               lse16.data());
      EXPECT_EQ(lse16, lse);
      EXPECT_EQ(out16, to_bits(to_double(out)));
      const auto out_values = widen(out16);
      std::vector<float> dq(nq), dk(nk), dv(nk), dq16(nq, 7.f), dk16(nk, 7.f), dv16(nk, 7.f);
      attention_backward<float>(in.s, q.data(), k.data(), v.data(), in.seg_ptr(), scale, out_values.data(),
                                lse.data(), dout.data(), dq.data(), dk.data(), dv.data());
      attention_backward<float>(in.s, q16.data(), k16.data(), v16.data(), in.seg_ptr(), scale, out16.data(),
                                lse16.data(), dout.data(), dq16.data(), dk16.data(), dv16.data());
      EXPECT_EQ(dq16, dq);
      EXPECT_EQ(dk16, dk);
      EXPECT_EQ(dv16, dv);
    }
  }
}

// Queries that see no key of a K/V block (only possible for a partial span)
// finalize to out = 0, lse = -inf, and give zero gradients, never NaN.
TEST(Attention, RowsWithoutLegalKeysAreZero) {
  const AttentionShape s{1, 0, 2, 1, 16};
  const Inputs in = make_inputs({1, 20, 2, 1, 16}, {}, 99);
  const std::vector<double>& q = in.q;  // queries: positions [0, 10); keys: [10, 20)
  const std::vector<double> kb(in.k.begin() + 10 * 16, in.k.end()), vb(in.v.begin() + 10 * 16, in.v.end());
  const AttentionSpan qs{10, 0, nullptr}, ks{10, 10, nullptr};
  const int64_t rows = 2 * 10;
  std::vector<double> o(rows * 16, 1.0), a(rows), l(rows), out(10 * 2 * 16, 1.0), lse(rows);
  SoftmaxState<double> st{o.data(), a.data(), l.data()};
  softmax_state_init(st, rows, 16);
  attention_partial_forward<double>(s, q.data(), qs, kb.data(), vb.data(), ks, in.scale, st);
  softmax_state_finalize(s, 10, st, out.data(), lse.data());
  for (double x : out) ASSERT_EQ(x, 0.0);
  for (double x : lse) ASSERT_EQ(x, -kInf);
  std::vector<double> dq(out.size(), 0.0), dk(kb.size(), 0.0), dv(kb.size(), 0.0);
  attention_partial_backward<double>(s, q.data(), qs, kb.data(), vb.data(), ks, in.scale, out.data(), lse.data(),
                                     in.dout.data(), dq.data(), dk.data(), dv.data());
  for (double x : dq) ASSERT_EQ(x, 0.0);
  for (double x : dk) ASSERT_EQ(x, 0.0);
  for (double x : dv) ASSERT_EQ(x, 0.0);
}

// A key span whose rows lie row_stride positions apart (a prefix of each
// row, as reproducible mode's chunk-pair attention reads them) computes
// exactly what the same keys packed back to back do: out, lse, dq, and dk, dv
// written at the strided rows (the rest untouched).
TEST(Attention, KeyRowStrideReadsAPrefixOfEachRow) {
  const int64_t B = 3, T = 40, H = 4, Hk = 2, D = 16, len = 24, q0 = 16, nq = 8;
  const Inputs in = make_inputs({B, T, H, Hk, D}, {13, 27}, 7);
  const AttentionShape s{B, nq, H, Hk, D};
  // Queries [q0, q0 + nq) of each row back to back, their document ids.
  std::vector<double> q, dout;
  std::vector<int32_t> qseg, kseg;
  std::vector<double> kp, vp;  // keys [0, len) of each row back to back
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = q0; i < q0 + nq; ++i) {
      q.insert(q.end(), in.q.begin() + (b * T + i) * H * D, in.q.begin() + (b * T + i + 1) * H * D);
      dout.insert(dout.end(), in.dout.begin() + (b * T + i) * H * D, in.dout.begin() + (b * T + i + 1) * H * D);
      qseg.push_back(in.seg[size_t(b * T + i)]);
    }
    kp.insert(kp.end(), in.k.begin() + b * T * Hk * D, in.k.begin() + (b * T + len) * Hk * D);
    vp.insert(vp.end(), in.v.begin() + b * T * Hk * D, in.v.begin() + (b * T + len) * Hk * D);
    kseg.insert(kseg.end(), in.seg.begin() + b * T, in.seg.begin() + b * T + len);
  }
  const AttentionSpan qs{nq, q0, qseg.data()}, packed{len, 0, kseg.data()}, strided{len, 0, in.seg.data(), T};
  const int64_t rows = B * H * nq;
  auto forward = [&](const double* k, const double* v, AttentionSpan ks, std::vector<double>& out,
                     std::vector<double>& lse) {
    std::vector<double> o(static_cast<size_t>(rows * D)), a(static_cast<size_t>(rows)), l(static_cast<size_t>(rows));
    const SoftmaxState<double> st{o.data(), a.data(), l.data()};
    softmax_state_init(st, rows, D);
    attention_partial_forward<double>(s, q.data(), qs, k, v, ks, in.scale, st);
    out.assign(q.size(), 0.0);
    lse.assign(size_t(rows), 0.0);
    softmax_state_finalize(s, nq, st, out.data(), lse.data());
  };
  std::vector<double> out_p, lse_p, out_s, lse_s;
  forward(kp.data(), vp.data(), packed, out_p, lse_p);
  forward(in.k.data(), in.v.data(), strided, out_s, lse_s);
  EXPECT_EQ(out_p, out_s);
  EXPECT_EQ(lse_p, lse_s);
  std::vector<double> dq_p(q.size()), dk_p(kp.size()), dv_p(kp.size()), dq_s(q.size()), dk_s(in.k.size()),
      dv_s(in.k.size());
  attention_partial_backward<double>(s, q.data(), qs, kp.data(), vp.data(), packed, in.scale, out_p.data(),
                                     lse_p.data(), dout.data(), dq_p.data(), dk_p.data(), dv_p.data());
  attention_partial_backward<double>(s, q.data(), qs, in.k.data(), in.v.data(), strided, in.scale, out_p.data(),
                                     lse_p.data(), dout.data(), dq_s.data(), dk_s.data(), dv_s.data());
  EXPECT_EQ(dq_p, dq_s);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < T * Hk * D; ++j) {
      const size_t at = size_t(b * T * Hk * D + j);
      const double want_k = j < len * Hk * D ? dk_p[size_t(b * len * Hk * D + j)] : 0.0;
      const double want_v = j < len * Hk * D ? dv_p[size_t(b * len * Hk * D + j)] : 0.0;
      ASSERT_EQ(dk_s[at], want_k) << "row " << b << " element " << j;
      ASSERT_EQ(dv_s[at], want_v) << "row " << b << " element " << j;
    }
  EXPECT_NE(dk_p, std::vector<double>(dk_p.size(), 0.0));
}

TEST(Attention, MergeWithEmptyStatesIsExact) {
  const int64_t rows = 3, D = 2;
  const double ninf = -kInf;
  std::vector<double> o1 = {1, 2, 0, 0, 5, 6}, a1 = {0.5, ninf, 1.0}, l1 = {2, 0, 3};
  std::vector<double> o2 = {0, 0, 3, 4, 1, 1}, a2 = {ninf, 0.25, 1.0}, l2 = {0, 4, 1};
  softmax_state_merge(SoftmaxState<double>{o1.data(), a1.data(), l1.data()},
                      SoftmaxState<double>{o2.data(), a2.data(), l2.data()}, rows, D);
  EXPECT_EQ(o1, (std::vector<double>{1, 2, 3, 4, 6, 7}));
  EXPECT_EQ(a1, (std::vector<double>{0.5, 0.25, 1.0}));
  EXPECT_EQ(l1, (std::vector<double>{2, 4, 4}));
}

}  // namespace

// docs/math.md (M.49) is associative up to rounding: three partial states (one
// of them fully masked for some rows) merged in any grouping and order give
// the same state (f64: 1e-14 relative).
TEST(Attention, ThreeStateMergeDoesNotDependOnGrouping) {
  const int64_t rows = 4, D = 3;
  const double ninf = -kInf;
  struct S {
    std::vector<double> o, a, l;
    SoftmaxState<double> st() { return {o.data(), a.data(), l.data()}; }
  };
  const S x{{1, 2, 3, 0, 0, 0, 4, 5, 6, 1, 1, 1}, {0.5, ninf, 2.0, -1.0}, {2, 0, 1.5, 3}};
  const S y{{2, 1, 0, 7, 8, 9, 0, 0, 0, 2, 2, 2}, {1.5, 0.25, ninf, -0.5}, {1, 4, 0, 2}};
  const S z{{0, 0, 1, 1, 0, 2, 3, 3, 3, 0, 1, 0}, {-2.0, 3.0, 1.0, -3.0}, {0.5, 2, 2, 1}};
  auto merged = [&](S first, S second, S third, bool right_first) {
    if (right_first) {  // first . (second . third)
      softmax_state_merge(second.st(), third.st(), rows, D);
      softmax_state_merge(first.st(), second.st(), rows, D);
    } else {  // (first . second) . third
      softmax_state_merge(first.st(), second.st(), rows, D);
      softmax_state_merge(first.st(), third.st(), rows, D);
    }
    std::vector<double> all = first.o;
    all.insert(all.end(), first.l.begin(), first.l.end());
    for (int64_t r = 0; r < rows; ++r) all.push_back(first.a[size_t(r)]);
    return all;
  };
  const std::vector<double> want = merged(x, y, z, false);
  for (const auto& got : {merged(x, y, z, true), merged(x, z, y, false), merged(y, z, x, false),
                          merged(z, x, y, true), merged(z, y, x, false)}) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-14 * std::max(1.0, std::abs(want[i])));
  }
}

namespace {

// Reproducible mode's chunk pairs as the kernel sees them: rows of T
// positions cut into 2 V chunks of c; chunk i's queries back to back
// against the keys [0, (i + 1) c) of each row (a key span with a row
// stride), pair v (chunks v and 2 V - 1 - v) a leaf of the tree.
// attention_chunk_tree_backward against one attention_partial_backward
// call per chunk in that order into a zeroed buffer per pair, the buffers
// then added in the tree (test::block_tree_sum): the same bits.
template <typename T>
void check_chunks_match_calls(const Inputs& in, int64_t chunks_per_row, bool per_query) {
  const AttentionShape& full = in.s;
  const int64_t B = full.batch, Tn = full.seq, H = full.q_heads, Hk = full.kv_heads, D = full.head_dim;
  const int64_t c = Tn / chunks_per_row, V = chunks_per_row / 2, heads = per_query ? H : Hk;
  AttentionShape s{B, c, H, Hk, D};
  s.kv_grads_per_query = per_query;
  const std::vector<T> k = cast<T>(in.k), v = cast<T>(in.v);
  struct Chunk {
    std::vector<T> q, dout, out, lse, dq;
    std::vector<int32_t> qseg;
    AttentionSpan qs, ks;
  };
  std::vector<Chunk> chunk(static_cast<size_t>(chunks_per_row));
  for (int64_t i = 0; i < chunks_per_row; ++i) {
    Chunk& ch = chunk[size_t(i)];
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = i * c; t < (i + 1) * c; ++t) {
        const int64_t at = (b * Tn + t) * H * D;
        ch.q.insert(ch.q.end(), in.q.begin() + at, in.q.begin() + at + H * D);
        ch.dout.insert(ch.dout.end(), in.dout.begin() + at, in.dout.begin() + at + H * D);
        if (!in.seg.empty()) ch.qseg.push_back(in.seg[size_t(b * Tn + t)]);
      }
    ch.qs = {c, i * c, in.seg.empty() ? nullptr : ch.qseg.data()};
    ch.ks = {(i + 1) * c, 0, in.seg_ptr(), Tn};
    const int64_t rows = B * H * c;
    std::vector<T> o(static_cast<size_t>(rows * D)), a(static_cast<size_t>(rows)), l(static_cast<size_t>(rows));
    const SoftmaxState<T> st{o.data(), a.data(), l.data()};
    softmax_state_init(st, rows, D);
    attention_partial_forward<T>(s, ch.q.data(), ch.qs, k.data(), v.data(), ch.ks, T(in.scale), st);
    ch.out.assign(ch.q.size(), T(0));
    ch.lse.assign(size_t(rows), T(0));
    softmax_state_finalize(s, c, st, ch.out.data(), ch.lse.data());
  }
  const std::vector<int64_t> order = [&] {
    std::vector<int64_t> o;
    for (int64_t p = 0; p < V; ++p) o.push_back(p), o.push_back(2 * V - 1 - p);
    return o;
  }();
  const size_t pair_elems = size_t(B * Tn * heads * D);
  // The reference: a buffer per pair, one call per chunk, the tree.
  std::vector<std::vector<T>> dq_calls(static_cast<size_t>(chunks_per_row)), dk_pairs, dv_pairs;
  std::vector<AttentionChunk<T>> calls;
  for (size_t n = 0; n < order.size(); ++n) {
    Chunk& ch = chunk[size_t(order[n])];
    dq_calls[size_t(order[n])].assign(ch.q.size(), T(0));
    if (n % 2 == 0) dk_pairs.emplace_back(pair_elems, T(0)), dv_pairs.emplace_back(pair_elems, T(0));
    calls.push_back({ch.q.data(), ch.qs, ch.ks, ch.out.data(), ch.lse.data(), ch.dout.data(),
                     dq_calls[size_t(order[n])].data(), dk_pairs.back().data(), dv_pairs.back().data(), int(n / 2)});
  }
  for (const AttentionChunk<T>& ch : calls)
    attention_partial_backward<T>(s, ch.q, ch.qs, k.data(), v.data(), ch.ks, T(in.scale), ch.out, ch.lse, ch.dout,
                                  ch.dq, ch.dk, ch.dv);
  const std::vector<T> dk_want = test::block_tree_sum(dk_pairs, 0, dk_pairs.size()),
                       dv_want = test::block_tree_sum(dv_pairs, 0, dv_pairs.size());
  for (int threads : {1, 2}) {
    std::vector<std::vector<T>> dq_one(static_cast<size_t>(chunks_per_row));
    std::vector<T> dk_one(pair_elems, T(7)), dv_one(pair_elems, T(7));  // written, never read
    for (size_t n = 0; n < order.size(); ++n) {
      dq_one[size_t(order[n])].assign(size_t(calls[n].qs.len * B * H * D), T(0));
      calls[n].dq = dq_one[size_t(order[n])].data();
    }
    test::with_threads(threads, [&] {
      attention_chunk_tree_backward<T>(s, calls.data(), int(calls.size()), k.data(), v.data(), T(in.scale),
                                       dk_one.data(), dv_one.data());
      return 0;
    });
    EXPECT_EQ(dq_calls, dq_one) << "threads " << threads;
    EXPECT_EQ(dk_want, dk_one) << "threads " << threads;
    EXPECT_EQ(dv_want, dv_one) << "threads " << threads;
  }
  EXPECT_NE(dk_want, std::vector<T>(pair_elems, T(0)));
}

}  // namespace

TEST(Attention, ChunkTreeHasTheBitsOfOneCallPerChunkAndTheTree) {
  // bench-small's grouping (2 query heads a KV head) with documents, per
  // KV head and per query head, 3 and 8 pairs; 7 pairs; spans long enough to
  // take several batches of packed queries, one chunk longer than a batch
  // (4 query heads of 128 features: a batch holds 256 rows at f32).
  const Inputs docs = make_inputs({3, 96, 4, 2, 16}, {37, 59}, 31);
  const Inputs seven = make_inputs({2, 112, 4, 2, 16}, {}, 41);  // 14 chunks: 7 pairs, 3 subtrees folded
  const Inputs long_spans = make_inputs({1, 1200, 4, 1, 128}, {}, 37);
  for (Isa isa : test::runnable_levels()) {
    ScopedIsa level(isa);
    SCOPED_TRACE(isa_name(isa));
    for (bool per_query : {false, true}) {
      SCOPED_TRACE(per_query ? "per query head" : "per KV head");
      check_chunks_match_calls<float>(docs, 6, per_query);   // 3 pairs: a tree folded
      check_chunks_match_calls<float>(docs, 16, per_query);  // 8 pairs
    }
    check_chunks_match_calls<float>(seven, 14, true);
    check_chunks_match_calls<float>(long_spans, 4, false);
  }
  check_chunks_match_calls<double>(docs, 6, true);
}
