// Fuzz target: reading a rename map (io/rename_map.hpp, the CLI's --rename-map); what reads must
// print as JSON and read back equal.
#include "check.hpp"
#include "decode_io.hpp"

#include <reshard/io/rename_map.hpp>

#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace reshard::io;
  const reshard_fuzz::input in(data, size);
  return reshard_fuzz::expect_errors([&] {
    const auto map = decode_rename_map(in.rest_text(), "fuzz.json");
    FUZZ_CHECK(decode_rename_map(nlohmann::json(map).dump(), "again.json") == map);  // names read are UTF-8
  });
}
