// Fuzz target: the strict JSON reader (io/json_reader.hpp). What it accepts, nlohmann's own parser
// accepts as the same value, and the value printed reads back equal; check_known_keys refuses
// exactly the keys outside its list.
#include "check.hpp"
#include "decode_io.hpp"

#include <reshard/io/json_reader.hpp>

#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace reshard::io;
  const reshard_fuzz::input in(data, size);
  return reshard_fuzz::expect_errors([&] {
    const std::string_view text = in.rest_text();
    const auto j = parse_json_strict<nlohmann::ordered_json>(text, "fuzz.json: ");
    FUZZ_CHECK(nlohmann::ordered_json::parse(text.begin(), text.end()) == j);
    FUZZ_CHECK(parse_json_strict<nlohmann::ordered_json>(j.dump(), "again.json: ") == j);  // strings are UTF-8
    if (j.is_object()) {
      bool unknown = false;
      for (auto it = j.begin(); it != j.end(); ++it)
        unknown = unknown || (it.key() != "dev_matrix" && it.key() != "tensor_map" && it.key() != "field");
      try {
        check_known_keys(j, {"dev_matrix", "tensor_map", "field"}, "fuzz.json: ");
        FUZZ_CHECK(!unknown);
      } catch (const reshard::error&) {
        FUZZ_CHECK(unknown);
      }
    }
  });
}
