#include <gtest/gtest.h>

#include <numeric>

#include "checkpoint/ckpt_test_util.h"

namespace meshtrain::checkpoint {
namespace {

// Flat index of every element of `box` in row-major order of `shape`.
std::vector<int64_t> flat_indices(const Shape& shape, const Box& box) {
  std::vector<int64_t> all(size_t(shape.numel()));
  std::iota(all.begin(), all.end(), 0);
  std::vector<int64_t> out(size_t(box.numel()));
  copy_region(all.data(), full_box(shape), out.data(), box, box, sizeof(int64_t));
  return out;
}

TEST(FlatRangeToBoxes, EveryRangeOfSmallShapesIsCoveredInOrderByFewBoxes) {
  for (const Shape& s : {Shape{7}, Shape{3, 4}, Shape{2, 3, 4}, Shape{3, 1, 2, 5}}) {
    for (int64_t b = 0; b <= s.numel(); ++b)
      for (int64_t e = b; e <= s.numel(); ++e) {
        const auto boxes = flat_range_to_boxes(s, b, e);
        EXPECT_LE(boxes.size(), size_t(2 * s.rank() - 1)) << s.str() << " [" << b << "," << e << ")";
        std::vector<int64_t> got;
        for (const Box& box : boxes) {
          ASSERT_TRUE(box_inside(box, s)) << box.str();
          const auto idx = flat_indices(s, box);
          // Each box is one contiguous flat run.
          for (size_t i = 1; i < idx.size(); ++i) ASSERT_EQ(idx[i], idx[i - 1] + 1) << box.str();
          got.insert(got.end(), idx.begin(), idx.end());
        }
        std::vector<int64_t> want(size_t(e - b));
        std::iota(want.begin(), want.end(), b);
        ASSERT_EQ(got, want) << s.str() << " [" << b << "," << e << ")";
      }
  }
}

TEST(FlatRangeToBoxes, AlignedRangesAreOneBoxAndScalarsWork) {
  EXPECT_EQ(flat_range_to_boxes(Shape{4, 5}, 5, 15).size(), 1u);
  EXPECT_EQ(flat_range_to_boxes(Shape{4, 5}, 0, 20).size(), 1u);
  EXPECT_EQ(flat_range_to_boxes(Shape{4, 5}, 3, 18).size(), 3u);  // tail of row 0, rows 1-2, head of row 3
  EXPECT_EQ(flat_range_to_boxes(Shape{}, 0, 1).size(), 1u);
  EXPECT_TRUE(flat_range_to_boxes(Shape{4, 5}, 7, 7).empty());
  EXPECT_THROW(flat_range_to_boxes(Shape{4, 5}, 3, 21), CheckpointError);
}

TEST(CopyRegion, CopiesBetweenDifferentlyShapedBoxes) {
  const Shape s{4, 6};
  const Box src{{0, 2}, {4, 4}}, dst{{1, 0}, {2, 6}}, region{{1, 2}, {2, 3}};
  std::vector<int64_t> all(24);
  std::iota(all.begin(), all.end(), 0);
  std::vector<int64_t> src_buf(16), dst_buf(12, -1);
  copy_region(all.data(), full_box(s), src_buf.data(), src, src, sizeof(int64_t));
  copy_region(src_buf.data(), src, dst_buf.data(), dst, region, sizeof(int64_t));
  const std::vector<int64_t> want = {-1, -1, 8, 9, 10, -1, -1, -1, 14, 15, 16, -1};
  EXPECT_EQ(dst_buf, want);
}

}  // namespace
}  // namespace meshtrain::checkpoint
