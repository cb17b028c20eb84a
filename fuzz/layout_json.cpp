// Fuzz target: the CLI's layout JSON (layout_from_json_text); a layout that parses must print to
// JSON and parse back equal, and (when it has at most 4096 ranks) report its ranks.
#include "check.hpp"
#include "decode.hpp"

#include <reshard/ext/json.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const reshard_fuzz::input in(data, size);
  return reshard_fuzz::expect_errors([&] {
    const reshard::layout l = reshard::layout_from_json_text(in.rest_text(), "--src");
    FUZZ_CHECK(reshard::layout_from_json(reshard::to_json(l), "again") == l);
    if (reshard::num_ranks(l) <= 4096) FUZZ_CHECK(reshard::layout_report(l)["ranks"].size() == std::size_t(reshard::num_ranks(l)));
  });
}
