// types.h (chunk partition, op names, Fingerprint) and comm_stats.h
// (StatsRecorder, CommStats::total / str).
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "meshtrain/comm/comm_stats.h"
#include "meshtrain/comm/types.h"

namespace meshtrain::comm {
namespace {

TEST(CommTypes, ChunksAreBalancedAndCoverExactly) {
  for (size_t count = 0; count <= 41; ++count) {
    for (int parts = 1; parts <= 9; ++parts) {
      size_t next = 0, min_size = count, max_size = 0;
      for (int i = 0; i < parts; ++i) {
        const size_t s = chunk_size(count, parts, i), o = chunk_offset(count, parts, i);
        ASSERT_EQ(o, next) << "chunks must be contiguous: count=" << count << " parts=" << parts << " i=" << i;
        next = o + s;
        min_size = std::min(min_size, s);
        max_size = std::max(max_size, s);
        // The first count % parts chunks are the larger ones.
        const bool larger = size_t(i) < count % size_t(parts);
        EXPECT_EQ(s, count / size_t(parts) + (larger ? 1 : 0));
      }
      EXPECT_EQ(next, count) << "chunks must cover [0, count): count=" << count << " parts=" << parts;
      EXPECT_LE(max_size - min_size, 1u);
    }
  }
}

TEST(CommTypes, ChunkExamples) {
  // 10 over 4: 3 3 2 2.
  EXPECT_EQ(chunk_size(10, 4, 0), 3u);
  EXPECT_EQ(chunk_size(10, 4, 1), 3u);
  EXPECT_EQ(chunk_size(10, 4, 2), 2u);
  EXPECT_EQ(chunk_size(10, 4, 3), 2u);
  EXPECT_EQ(chunk_offset(10, 4, 2), 6u);
  EXPECT_EQ(chunk_offset(10, 4, 3), 8u);
  // Fewer elements than parts: trailing chunks are empty, offsets stay at count.
  EXPECT_EQ(chunk_size(2, 4, 1), 1u);
  EXPECT_EQ(chunk_size(2, 4, 2), 0u);
  EXPECT_EQ(chunk_offset(2, 4, 3), 2u);
  // Zero elements.
  EXPECT_EQ(chunk_size(0, 3, 0), 0u);
  EXPECT_EQ(chunk_offset(0, 3, 2), 0u);
  // Divisible.
  EXPECT_EQ(chunk_size(12, 3, 2), 4u);
  EXPECT_EQ(chunk_offset(12, 3, 2), 8u);
  // Large counts (no overflow in the offset formula).
  const size_t big = (size_t(1) << 40) + 5;
  EXPECT_EQ(chunk_offset(big, 8, 7) + chunk_size(big, 8, 7), big);
}

TEST(CommTypes, Names) {
  EXPECT_EQ(reduce_op_name(ReduceOp::Sum), "sum");
  EXPECT_EQ(reduce_op_name(ReduceOp::Avg), "avg");
  EXPECT_EQ(reduce_op_name(ReduceOp::Max), "max");
  EXPECT_EQ(reduce_op_name(ReduceOp::Min), "min");
  const char* kinds[] = {"all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast",
                         "send",       "recv",           "barrier",    "split"};
  ASSERT_EQ(std::size(kinds), size_t(kNumOpKinds));
  for (int k = 0; k < kNumOpKinds; ++k) EXPECT_EQ(op_kind_name(OpKind(k)), kinds[k]) << k;
  EXPECT_EQ(op_kind_name(OpKind(kNumOpKinds)), "?");
  EXPECT_EQ(reduce_op_name(ReduceOp(9)), "?");
}

TEST(CommTypes, FingerprintStrShowsRelevantFields) {
  Fingerprint ar{OpKind::AllReduce, 7, 1024, DType::BF16, -1, ReduceOp::Max};
  EXPECT_EQ(ar.str(), "all_reduce(seq=7, count=1024, dtype=bf16, op=max)");
  Fingerprint rs{OpKind::ReduceScatter, 1, 9, DType::F32, -1, ReduceOp::Avg};
  EXPECT_EQ(rs.str(), "reduce_scatter(seq=1, count=9, dtype=f32, op=avg)");
  // Broadcast names its root; the reduce op means nothing there.
  Fingerprint bc{OpKind::Broadcast, 3, 4, DType::I64, 2, ReduceOp::Sum};
  EXPECT_EQ(bc.str(), "broadcast(seq=3, count=4, dtype=i64, root=2)");
  Fingerprint ba{OpKind::Barrier, 12, 0, DType::F32, -1, ReduceOp::Sum};
  EXPECT_EQ(ba.str(), "barrier(seq=12, count=0, dtype=f32)");
}

TEST(CommTypes, FingerprintEqualityComparesEveryField) {
  const Fingerprint base{OpKind::AllReduce, 5, 100, DType::F32, -1, ReduceOp::Sum};
  EXPECT_EQ(base, base);
  Fingerprint f = base;
  f.kind = OpKind::AllGather;
  EXPECT_NE(f, base);
  f = base, f.seq = 6;
  EXPECT_NE(f, base);
  f = base, f.count = 101;
  EXPECT_NE(f, base);
  f = base, f.dtype = DType::F64;
  EXPECT_NE(f, base);
  f = base, f.root = 0;
  EXPECT_NE(f, base);
  f = base, f.op = ReduceOp::Avg;
  EXPECT_NE(f, base);
}

TEST(CommStatsTest, AddAccumulatesPerKindAndAddTimeDoesNotCountCalls) {
  StatsRecorder rec;
  rec.add(OpKind::AllReduce, 100, 0.5, 0.25);
  rec.add(OpKind::AllReduce, 200, 1.0, 0.5);
  rec.add(OpKind::Send, 8, 0.125, 0.0);
  rec.add_time(OpKind::AllReduce, 0.25, 0.25);  // e.g. a later Work::wait()
  rec.add_time(OpKind::Barrier, 2.0, 1.0);      // time without a counted call
  const CommStats s = rec.snapshot();
  EXPECT_EQ(s[OpKind::AllReduce].calls, 2u);
  EXPECT_EQ(s[OpKind::AllReduce].bytes, 300u);
  EXPECT_DOUBLE_EQ(s[OpKind::AllReduce].call_s, 1.75);
  EXPECT_DOUBLE_EQ(s[OpKind::AllReduce].wait_s, 1.0);
  EXPECT_EQ(s[OpKind::Send].calls, 1u);
  EXPECT_EQ(s[OpKind::Barrier].calls, 0u);
  EXPECT_DOUBLE_EQ(s[OpKind::Barrier].call_s, 2.0);
  EXPECT_EQ(s[OpKind::Broadcast].calls, 0u);

  const OpStats t = s.total();
  EXPECT_EQ(t.calls, 3u);
  EXPECT_EQ(t.bytes, 308u);
  EXPECT_DOUBLE_EQ(t.call_s, 1.75 + 0.125 + 2.0);
  EXPECT_DOUBLE_EQ(t.wait_s, 1.0 + 0.0 + 1.0);
}

TEST(CommStatsTest, SnapshotIsACopyAndResetClears) {
  StatsRecorder rec;
  rec.add(OpKind::AllGather, 64, 0.1, 0.05);
  const CommStats before = rec.snapshot();
  rec.add(OpKind::AllGather, 64, 0.1, 0.05);
  EXPECT_EQ(before[OpKind::AllGather].calls, 1u);
  EXPECT_EQ(rec.snapshot()[OpKind::AllGather].calls, 2u);
  rec.reset();
  const CommStats after = rec.snapshot();
  EXPECT_EQ(after.total().calls, 0u);
  EXPECT_EQ(after.total().bytes, 0u);
  EXPECT_EQ(after.total().call_s, 0.0);
  EXPECT_EQ(after.str(), "");
}

TEST(CommStatsTest, StrHasOneLinePerKindWithCalls) {
  StatsRecorder rec;
  rec.add(OpKind::ReduceScatter, 4096, 0.001, 0.0005);
  rec.add(OpKind::ReduceScatter, 4096, 0.001, 0.0005);
  rec.add(OpKind::Recv, 12, 0.0, 0.0);
  rec.add_time(OpKind::Broadcast, 1.0, 1.0);  // no calls: no line
  const std::string s = rec.snapshot().str();
  std::istringstream in(s);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 2u) << s;
  // Kinds appear in enum order.
  EXPECT_EQ(lines[0].rfind("reduce_scatter", 0), 0u) << lines[0];
  EXPECT_NE(lines[0].find("calls=2 bytes=8192 call=0.002000s wait=0.001000s"), std::string::npos) << lines[0];
  EXPECT_EQ(lines[1].rfind("recv", 0), 0u) << lines[1];
  EXPECT_NE(lines[1].find("calls=1 bytes=12 "), std::string::npos) << lines[1];
  EXPECT_EQ(s.find("broadcast"), std::string::npos) << s;
  EXPECT_EQ(s.back(), '\n');
}

TEST(CommStatsTest, RecorderIsThreadSafe) {
  StatsRecorder rec;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&rec, t] {
      for (int i = 0; i < 2000; ++i) {
        rec.add(OpKind(t % 2), 3, 0.0, 0.0);
        rec.add_time(OpKind::Barrier, 0.5, 0.25);
      }
    });
  for (auto& th : threads) th.join();
  const CommStats s = rec.snapshot();
  EXPECT_EQ(s[OpKind::AllReduce].calls, 4000u);
  EXPECT_EQ(s[OpKind::ReduceScatter].calls, 4000u);
  EXPECT_EQ(s.total().bytes, 3u * 8000u);
  EXPECT_DOUBLE_EQ(s[OpKind::Barrier].call_s, 4000.0);
  EXPECT_DOUBLE_EQ(s[OpKind::Barrier].wait_s, 2000.0);
}

}  // namespace
}  // namespace meshtrain::comm
