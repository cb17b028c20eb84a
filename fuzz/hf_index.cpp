// Fuzz target: reading a Hugging Face index, model.safetensors.index.json (io/hf.hpp
// decode_hf_index): every file it names is a plain name, and the index hf_index_json writes for
// the same weight_map reads back equal.
#include "check.hpp"
#include "decode_io.hpp"

#include <reshard/io/hf.hpp>

#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace reshard::io;
  const reshard_fuzz::input in(data, size);
  return reshard_fuzz::expect_errors([&] {
    const auto map = decode_hf_index(in.rest_text(), "fuzz.index.json");
    FUZZ_CHECK(!map.empty());
    for (const auto& [name, file] : map)
      FUZZ_CHECK(!file.empty() && file.find('/') == std::string::npos && file != "." && file != "..");
    FUZZ_CHECK(decode_hf_index(hf_index_json(1, map), "again.json") == map);  // names read are UTF-8
  });
}
