// Fuzz target (differential): two layouts of one small tensor, valid or not (fuzz/decode.hpp);
// plan + convert against the reference "split the full tensor by B" (fuzz/reference.hpp).
#include "check.hpp"
#include "decode.hpp"
#include "reference.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  reshard_fuzz::input in(data, size);
  const reshard_fuzz::layout_pair layouts = reshard_fuzz::decode_layout_pair(in);
  return reshard_fuzz::expect_errors([&] { reshard_fuzz::check_plan_convert(layouts); });
}
