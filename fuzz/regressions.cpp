// fuzz/regressions.cpp: every finding of the fuzz targets (and of reading their code) as a named
// unit test, beside the crashing input kept in fuzz/corpus/<target>/regress-*. See
// docs/reliability.md for the list.
#include <reshard/convert.hpp>
#include <reshard/ext/json.hpp>
#include <reshard/io/safetensors.hpp>
#include <reshard/io/strategy.hpp>
#include <reshard/layout.hpp>
#include <reshard/plan.hpp>

#include "../verify/testing.hpp"
#include "decode.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <new>
#include <string>

#include <unistd.h>

// The largest single allocation since the last reset: a hostile input must be refused without
// allocating in proportion to the sizes it claims.
namespace {
std::atomic<std::size_t> largest{0};
void note(std::size_t n) {
  for (std::size_t l = largest.load(); n > l && !largest.compare_exchange_weak(l, n);) {
  }
}
}  // namespace
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"  // new and delete below pair malloc/free
#endif
void* operator new(std::size_t n) {
  note(n);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {  // std::stable_partition's buffer
  note(n);
  return std::malloc(n ? n : 1);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace {

using reshard_test::error_of;

// layout.hpp validate(): a divisible layout with optimizer sharding listed the bounds of every
// dim-0 slice to check them, so that 120 bytes of layout JSON (2^30 slices) allocated 8 GiB and
// took a minute before the error.
TEST(fuzz_regressions, optimizer_sharding_check_does_not_list_slices) {
  largest = 0;
  const std::string msg = error_of([] {
    reshard::layout_from_json_text(R"({"dev_matrix":[1073741824,2],"tensor_map":[1],"shape":[1073741824],)"
                                   R"("opt_shard":{"step":1,"size":2}})",
                                   "--src");
  });
  EXPECT_NE(msg.find("optimizer sharding splits dim 0 slices into 2 parts, but slice 0 has 1 rows"),
            std::string::npos)
      << msg;
  EXPECT_LT(largest.load(), std::size_t{1} << 20);
  // the check is still exact: dev [2,4], dim 0 split by the axis of 2, a replica group of 4
  reshard::layout l{{2, 4}, {{0}}, {8}, reshard::split_mode::divisible, {}, {1, 4}, 0};
  EXPECT_NO_THROW(reshard::validate(l));
  l.shape = {12};
  EXPECT_NE(error_of([&] { reshard::validate(l); }).find("slice 0 has 6 rows"), std::string::npos);
  l.split_sizes = {{8, 4}};
  EXPECT_NO_THROW(reshard::validate(l));
  l.split_sizes = {{4, 8}};
  l.opt.size = 2;
  EXPECT_NO_THROW(reshard::validate(l));
  l.split_sizes = {{3, 9}};
  EXPECT_NE(error_of([&] { reshard::validate(l); }).find("slice 0 has 3 rows"), std::string::npos);
  l.split_sizes = {{4, 7}};
  EXPECT_NE(error_of([&] { reshard::validate(l); }).find("sum to 11"), std::string::npos);
}

// layout.hpp to_string(), printing an invalid layout in validate()'s message: the last rank of
// `ranks[first..last]` was first_rank + num_ranks - 1, and num_ranks of dev [4,2,2^63-1]
// overflowed (UBSan, plan_convert regress-to_string_rank_count_overflow).
TEST(fuzz_regressions, printing_a_layout_whose_rank_count_overflows) {
  reshard::layout l;
  l.dev_matrix = {4, 2, std::numeric_limits<reshard::index_t>::max()};
  l.first_rank = 15;
  EXPECT_EQ(reshard::to_string(l), "dev[4,2,9223372036854775807] map[] shape[] ranks[15..?]");
  EXPECT_NE(error_of([&] { reshard::validate(l); }).find("device matrix has more than 2^31 devices"),
            std::string::npos);
  l.dev_matrix = {2};
  l.first_rank = std::numeric_limits<reshard::index_t>::max();
  EXPECT_NE(error_of([&] { reshard::validate(l); }).find("ranks[9223372036854775807..?]"), std::string::npos);
  l.first_rank = 3;
  EXPECT_EQ(reshard::to_string(l), "dev[2] map[] shape[] ranks[3..4]");
}

// layout.hpp to_string() and validate(): a tensor map axis of INT_MIN was printed as
// nd - 1 - axis in int, which overflowed (UBSan, plan_convert regress-to_string_axis_int_min).
TEST(fuzz_regressions, printing_an_axis_of_int_min) {
  reshard::layout l;
  l.dev_matrix = {2};
  l.dim_axes = {{std::numeric_limits<int>::min()}};
  l.shape = {4};
  EXPECT_EQ(reshard::to_string(l), "dev[2] map[2147483648] shape[4]");
  EXPECT_NE(error_of([&] { reshard::validate(l); }).find("dim 0 names device axis 2147483648"), std::string::npos);
}

// ext/json.hpp layout_from_json_text(): nlohmann throws out_of_range (not parse_error) for a
// number that overflows a double, which escaped as a non-reshard exception
// (layout_json regress-number_out_of_range).
TEST(fuzz_regressions, layout_json_number_out_of_range) {
  for (const char* text : {"888e88888888888888888", R"({"dev_matrix": [1e999], "tensor_map": [], "shape": []})"}) {
    std::string msg;
    EXPECT_NO_THROW(msg = error_of([&] { reshard::layout_from_json_text(text, "--src"); })) << text;
    EXPECT_NE(msg.find("--src: invalid JSON: number overflow parsing"), std::string::npos) << msg;
  }
}

// io/safetensors.hpp safetensors_writer: metadata {"w": "Int4"} beside an Int8 tensor "w" was
// written, and the file read back an Int4 tensor (safetensors_roundtrip regress-int8_marked_int4).
TEST(fuzz_regressions, safetensors_int8_tensor_marked_int4_is_refused) {
  const auto path = std::filesystem::temp_directory_path() / ("reshard_regress_" + std::to_string(::getpid()));
  const std::int64_t shape[] = {2};
  const std::byte data[2] = {};
  const reshard::io::safetensors_tensor_view t[] = {{"w", reshard::io::dtype::int8, shape, data}};
  const std::string msg = error_of([&] { reshard::io::write_safetensors(path, t, {.metadata = {{"w", "Int4"}}}); });
  EXPECT_NE(msg.find("tensor 'w': metadata 'w' = 'Int4' would make this Int8 tensor read back as Int4"),
            std::string::npos)
      << msg;
  EXPECT_FALSE(std::filesystem::exists(path));
  reshard::io::write_safetensors(path, t, {.metadata = {{"w", "other"}}});  // any other value is kept
  EXPECT_EQ(reshard::io::safetensors_file(path).entries()[0].type, reshard::io::dtype::int8);
  std::filesystem::remove(path);
}

// io/strategy.hpp encode_strategy_protobuf(): a tuple layout of a 0-d tensor (two empty
// TensorMaps) was written as one empty TensorMap and read back as an ordinary layout
// (strategy_roundtrip regress-tuple_layout_0d, strategy_protobuf regress-tuple_layout_0d).
TEST(fuzz_regressions, tuple_layout_of_a_0d_tensor_round_trips) {
  reshard::io::strategy_file s;
  s.layouts.emplace_back("t", reshard::io::param_layout{});
  s.layouts[0].second.tuple_form = true;
  const std::string bytes = reshard::io::encode_strategy_protobuf(s);
  EXPECT_NE(bytes.find(std::string("\x12\x00\x12\x00", 4)), std::string::npos);  // two empty TensorMaps
  const auto back = reshard::io::decode_strategy_protobuf(std::as_bytes(std::span(bytes.data(), bytes.size())), "s");
  EXPECT_EQ(back, s);
}

// convert.hpp merge(): the layout was not validated, and a device axis of size 0 divided by zero
// (SIGFPE) while its geometry was derived (found reading the code; plan_convert now also checks
// that merge refuses every invalid layout it decodes).
TEST(fuzz_regressions, merge_refuses_an_invalid_layout) {
  reshard::layout l;
  l.dev_matrix = {0};
  l.dim_axes = {{0}};
  l.shape = {4};
  std::byte full[16];
  const std::string msg = error_of([&] { reshard::merge(l, {}, full, 4); });
  EXPECT_NE(msg.find("merge: layout dev[0] map[0] shape[4]: device matrix axis 0 has size 0"), std::string::npos) << msg;
}

// convert.hpp group_jobs(): when a strided copy followed a single contiguous run (a job with no
// dims), the grouping read the row stride of the run's dim -1 before checking that the two walk
// alike: pointer arithmetic out of bounds (UBSan "addition of unsigned offset overflowed",
// plan_convert regress-group_jobs_single_run_lead, found by re-fuzzing the new converter).
TEST(fuzz_regressions, grouping_a_strided_copy_after_a_single_run) {
  const std::uint8_t bytes[] = {0x71, 0x86, 0x21, 0x60, 0x04, 0x25, 0x25, 0x25, 0x25, 0x25, 0x25, 0x25, 0x98, 0xca, 0x25, 0x25, 0x25, 0x25, 0x98, 0xca, 0x34, 0x1d, 0xe2};
  reshard_fuzz::input in(bytes, sizeof bytes);
  const reshard_fuzz::layout_pair p = reshard_fuzz::decode_layout_pair(in);
  ASSERT_EQ(reshard::to_string(p.a), "dev[6,6] map[0,1,-1,-1] shape[7,5,4,11] split=chunk ranks[15..50]");
  ASSERT_EQ(reshard::to_string(p.b), "dev[3,1,1,1] map[-1,-1,-1,-1] shape[7,5,4,11]");
  ASSERT_EQ(p.element_bytes, 4u);
  // every element is its own index; the 3 targets each hold the whole tensor
  const std::size_t n = 7 * 5 * 4 * 11;
  std::vector<std::int32_t> full(n);
  for (std::size_t i = 0; i < n; ++i) full[i] = static_cast<std::int32_t>(i);
  std::vector<std::vector<std::int32_t>> src(36);
  std::vector<std::byte*> src_ptr;
  for (std::size_t r = 0; r < src.size(); ++r) {
    src[r].resize(static_cast<std::size_t>(reshard::volume(reshard::box_of(p.a, p.a.first_rank + static_cast<reshard::index_t>(r)))));
    src_ptr.push_back(reinterpret_cast<std::byte*>(src[r].data()));
  }
  reshard::split(p.a, reinterpret_cast<const std::byte*>(full.data()), src_ptr, 4);
  std::vector<std::vector<std::int32_t>> dst(3, std::vector<std::int32_t>(n, -1));
  std::vector<std::byte*> dst_ptr;
  for (auto& d : dst) dst_ptr.push_back(reinterpret_cast<std::byte*>(d.data()));
  const std::vector<const std::byte*> src_const(src_ptr.begin(), src_ptr.end());
  for (unsigned threads : {1u, 2u}) {
    reshard::convert(reshard::plan(p.a, p.b), src_const, dst_ptr, 4, {.threads = threads});
    for (const auto& d : dst) EXPECT_EQ(d, full) << threads << " threads";
  }
}

}  // namespace
