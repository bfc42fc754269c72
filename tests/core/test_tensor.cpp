#include <gtest/gtest.h>

#include "core/error.h"
#include "core/tensor.h"

using namespace mlxcel;

TEST(Tensor, ViewsShareStorageAndContiguousCopies) {
  std::vector<float> v(24);
  for (int i = 0; i < 24; ++i) v[i] = static_cast<float>(i);
  Tensor t = Tensor::from_f32(v, {2, 3, 4}, DType::kF32);
  EXPECT_TRUE(t.is_contiguous());
  Tensor s = t.slice(2, 1, 3);  // [2,3,2]
  EXPECT_FALSE(s.is_contiguous());
  auto sv = s.to_f32();
  ASSERT_EQ(sv.size(), 12u);
  EXPECT_EQ(sv[0], 1.0f);
  EXPECT_EQ(sv[1], 2.0f);
  EXPECT_EQ(sv[2], 5.0f);
  Tensor tr = t.transpose(0, 2);  // [4,3,2]
  auto tv = tr.to_f32();
  EXPECT_EQ(tv[1], 12.0f);
  Tensor sel = t.select(0, 1);
  EXPECT_EQ(sel.to_f32()[0], 12.0f);
  EXPECT_EQ(t.reshape({6, 4}).dim(0), 6);
  EXPECT_THROW(t.reshape({5, 5}), Error);
  EXPECT_THROW(s.reshape({12}), Error);
}

TEST(Tensor, BF16RoundTrip) {
  Tensor t = Tensor::from_f32({1.0f, -2.5f, 3.140625f}, {3}, DType::kBF16);
  auto back = t.to_f32();
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_EQ(back[1], -2.5f);
  EXPECT_EQ(back[2], 3.140625f);
}

TEST(Error, CategoryAndMessage) {
  try {
    throw_error(ErrorCategory::kUnsupported, "mode nvfp4 on rocm");
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kUnsupported);
    EXPECT_EQ(category_name(e.category()), "unsupported");
    EXPECT_STREQ(e.what(), "mode nvfp4 on rocm");
  }
}
