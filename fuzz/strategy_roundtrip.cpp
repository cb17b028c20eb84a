// Fuzz target (round trip): a strategy decoded from the input (fuzz/decode_io.hpp) is encoded as
// protobuf and as JSON and decoded back: equal, but for what the format cannot hold (kept_by).
// Each encoder refuses exactly the content it cannot hold; a file without layouts never reads.
// Byte 0, bit 0: through files (write_strategy / read_strategy, format by suffix), else memory.
#include "check.hpp"
#include "decode_io.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace reshard::io;
  reshard_fuzz::input in(data, size);
  const bool files = in.flag();
  const reshard_fuzz::strategy_content c = reshard_fuzz::decode_strategy(in);
  for (const bool json : {false, true}) {
    std::optional<strategy_file> back;
    const auto path = reshard_fuzz::scratch_dir() / (json ? "s.json" : "s.ckpt");
    reshard_fuzz::expect_errors([&] {
      if (files) write_strategy(path, c.file, true), back = read_strategy(path);
      else if (json) back = decode_strategy_json(encode_strategy_json(c.file), "r.json");
      else back = decode_strategy_protobuf(reshard_fuzz::as_bytes(encode_strategy_protobuf(c.file)), "r");
    });
    FUZZ_CHECK(back.has_value() == ((json ? c.valid_json : c.valid_protobuf) && c.has_layouts));
    if (back) FUZZ_CHECK(*back == reshard_fuzz::kept_by(c.file, json));
  }
  return 0;
}
