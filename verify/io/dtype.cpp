// Tests of reshard/io/dtype.hpp: the name tables, element sizes and checked size arithmetic.
#include <reshard/io/dtype.hpp>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using namespace reshard::io;

// The facts of docs/formats.md (#3-checkpoint-files, #4-safetensors-files) hold at compile time.
static_assert(ms_name(dtype::bfloat16) == "BFloat16");
static_assert(dtype_from_ms_name("Int4") == dtype::int4);
static_assert(!dtype_from_ms_name("float32"));  // case-sensitive
static_assert(element_size(dtype::float16) == 2 && element_size(dtype::str) == 4 && element_size(dtype::int4) == 1);
static_assert(safetensors_name(dtype::boolean) == "BOOL");
static_assert(!safetensors_name(dtype::int4) && !safetensors_name(dtype::str));
static_assert(byte_size(dtype::float32, std::array<std::int64_t, 2>{2, 2}) == 16);

TEST(dtype, ms_names_are_the_spec_list_and_round_trip) {
  const std::vector<std::string> spec{"Int8",    "UInt8",   "Int16",   "UInt16", "Int32",    "UInt32", "Int64", "UInt64",
                                      "Float16", "Float32", "Float64", "Bool",   "BFloat16", "Int4",   "str"};
  ASSERT_EQ(all_dtypes.size(), spec.size());
  for (std::size_t i = 0; i < spec.size(); ++i) {
    EXPECT_EQ(ms_name(all_dtypes[i]), spec[i]);
    EXPECT_EQ(dtype_from_ms_name(spec[i]), all_dtypes[i]);
  }
  EXPECT_FALSE(dtype_from_ms_name(""));
  EXPECT_FALSE(dtype_from_ms_name("Float8"));
  EXPECT_FALSE(dtype_from_ms_name("Float32 "));
}

TEST(dtype, element_sizes) {
  const std::vector<std::size_t> sizes{1, 1, 2, 2, 4, 4, 8, 8, 2, 4, 8, 1, 2, 1, 4};
  for (std::size_t i = 0; i < sizes.size(); ++i) EXPECT_EQ(element_size(all_dtypes[i]), sizes[i]) << all_dtypes[i];
}

TEST(dtype, safetensors_names_are_the_spec_list_and_round_trip) {
  const std::set<std::string> spec{"BOOL", "U8", "I8", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "I64", "U64", "F64"};
  std::set<std::string> seen;
  for (auto t : all_dtypes) {
    auto st = safetensors_name(t);
    if (!st) continue;
    seen.insert(std::string(*st));
    EXPECT_EQ(dtype_from_safetensors_name(*st), t);
  }
  EXPECT_EQ(seen, spec);
  EXPECT_EQ(dtype_from_safetensors_name("F32"), dtype::float32);
  EXPECT_FALSE(dtype_from_safetensors_name("F8_E4M3"));
  EXPECT_FALSE(dtype_from_safetensors_name(""));
}

TEST(dtype, numpy_names) {
  EXPECT_EQ(numpy_name(dtype::float32), "float32");
  EXPECT_EQ(numpy_name(dtype::boolean), "bool");
  EXPECT_EQ(numpy_name(dtype::int4), "int8");  // qint4x2 storage
  for (auto t : all_dtypes) {
    if (t != dtype::int4) {
      EXPECT_EQ(dtype_from_numpy_name(numpy_name(t)), t) << t;
    }
  }
  EXPECT_EQ(dtype_from_numpy_name("int8"), dtype::int8);
  EXPECT_EQ(dtype_from_numpy_name("bool_"), dtype::boolean);
  EXPECT_FALSE(dtype_from_numpy_name("complex64"));
}

TEST(dtype, prints_the_mindspore_name) {
  std::ostringstream os;
  os << dtype::uint64;
  EXPECT_EQ(os.str(), "UInt64");
}

TEST(dtype, element_count_and_byte_size) {
  EXPECT_EQ(element_count(std::vector<std::int64_t>{}), 1u);
  EXPECT_EQ(element_count(std::vector<std::int64_t>{3, 0, 5}), 0u);
  EXPECT_EQ(element_count(std::vector<std::int64_t>{2, 3, 4}), 24u);
  EXPECT_FALSE(element_count(std::vector<std::int64_t>{2, -1}));
  EXPECT_FALSE(element_count(std::vector<std::int64_t>{1 << 30, 1 << 30, 1 << 30}));
  EXPECT_EQ(element_count(std::vector<std::int64_t>{0, -1}), std::nullopt);  // negative wins over zero
  const std::int64_t big = std::numeric_limits<std::int64_t>::max();
  EXPECT_EQ(element_count(std::vector<std::int64_t>{big}), static_cast<std::uint64_t>(big));
  EXPECT_FALSE(byte_size(dtype::int16, std::vector<std::int64_t>{big}));
  EXPECT_EQ(byte_size(dtype::float64, std::vector<std::int64_t>{3, 2}), 48u);
  EXPECT_EQ(byte_size(dtype::int4, std::vector<std::int64_t>{4, 2}), 8u);
  // Regression (CI, seed 14969752058116688217): this product is 9223492668069847440, just past
  // 2^63 - 1, and must be refused rather than returned.
  EXPECT_FALSE(element_count(std::vector<std::int64_t>{39092, 62124, 58955, 64421}));
}

RC_GTEST_PROP(dtype, byte_size_is_the_product_when_it_fits, ()) {
  const auto dims = *rc::gen::container<std::vector<std::uint16_t>>(*rc::gen::inRange<std::size_t>(0, 5),
                                                                    rc::gen::arbitrary<std::uint16_t>());
  const auto t = *rc::gen::elementOf(all_dtypes);
  std::vector<std::int64_t> shape(dims.begin(), dims.end());
  std::uint64_t n = 1;
  for (auto d : dims) n *= d;  // < 2^64 for four 16-bit factors, but not always < 2^63
  constexpr auto int64_max = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  if (n <= int64_max)
    RC_ASSERT(element_count(shape) == n);
  else
    RC_ASSERT(!element_count(shape));  // four 16-bit factors can pass 2^63 - 1
  if (n <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) / element_size(t))
    RC_ASSERT(byte_size(t, shape) == n * element_size(t));
  else
    RC_ASSERT(!byte_size(t, shape));
}
