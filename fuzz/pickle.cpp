// Fuzz target: the restricted unpickler (io/pickle.hpp) and the DCP metadata decoder
// (io/dcp.hpp). Byte 0, bit 0: admit persistent ids (torch.save's data.pkl); bit 1: decode the
// rest as a DCP `.metadata`. Every global in a decoded value is allow-listed (or a getattr of an
// allow-listed enum), and every chunk of decoded metadata lies inside its tensor.
#include "check.hpp"
#include "decode.hpp"

#include <reshard/io/dcp.hpp>

#include <unordered_set>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace reshard::io;
  reshard_fuzz::input in(data, size);
  const auto mode = in.byte();
  return reshard_fuzz::expect_errors([&] {
    if (mode & 2) {
      for (const auto& t : parse_dcp_metadata(in.rest(), "fuzz.metadata").tensors)
        for (const auto& c : t.chunks)
          for (std::size_t d = 0; d < t.size.size(); ++d) FUZZ_CHECK(c.offsets[d] + c.sizes[d] <= t.size[d]);
      return;
    }
    pickle_options o;
    o.persistent_ids = (mode & 1) != 0;
    const auto doc = unpickle(in.rest(), "fuzz.pkl", o);
    FUZZ_CHECK(doc.node_count() <= in.rest().size());  // at most one value per opcode
    std::unordered_set<const pickle_node*> seen;        // the value is a graph: visit each node once
    std::vector<const pickle_node*> todo{&doc.root()};
    while (!todo.empty()) {
      const auto* n = todo.back();
      todo.pop_back();
      if (!n || !seen.insert(n).second) continue;
      if (n->kind == pickle_kind::global)
        FUZZ_CHECK(find_pickle_global(n->text, n->name) || n->name.find("MEM_FORMAT_ENCODING.") != std::string::npos);
      FUZZ_CHECK((n->kind == pickle_kind::object) == (n->callable != nullptr));
      todo.insert(todo.end(), n->items.begin(), n->items.end());
      for (const auto& [k, v] : n->entries) todo.insert(todo.end(), {k, v});
      todo.insert(todo.end(), {n->callable, n->args, n->state});
    }
  });
}
