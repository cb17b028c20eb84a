// Tests of reshard/io/pickle.hpp: golden pickles written by CPython (protocols 2 and 4), the real
// `.metadata` of a torch 1.13 DCP checkpoint, the allow-list (every global outside it refused by
// name, getattr only for its pairs, values not callable), the bounds, and two properties: random
// plain values written by a small pickler (pickle_writer.hpp) survive the round trip, and no
// truncation or byte flip of a valid pickle does anything but decode or throw reshard::error.
#include <reshard/io/pickle.hpp>

#include "io_test_util.hpp"
#include "pickle_writer.hpp"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <variant>
#include <vector>

using namespace reshard::io;
using namespace reshard_test;

namespace {

pickle_document decode(const std::vector<std::byte>& b, bool persistent = false) {
  pickle_options o;
  o.persistent_ids = persistent;
  return unpickle(b, "test.pkl", o);
}
std::string decode_error(const std::vector<std::byte>& b) {
  return error_of([&] { decode(b); });
}

fs::path source_dir() {
  const char* src = std::getenv("RESHARD_SOURCE_DIR");
  EXPECT_TRUE(src && *src) << "RESHARD_SOURCE_DIR is not set";
  return src ? fs::path(src) : fs::path(".");
}

// pickle.dumps({'a': [1, (2, 'x')], 'b': None, 'd': -70000, 'e': 1.5, 'f': True, 'g': 2**40,
// 'h': -1}, protocol=2) by CPython 3.11 (no bytes: protocol 2 writes them as _codecs.encode)
constexpr std::string_view golden_p2 =
    "80027d71002858010000006171015d7102284b014b0258010000007871038671046558010000006271054e58010000"
    "006471064a90eefeff5801000000657107473ff800000000000058010000006671088858010000006771098a060000"
    "00000001580100000068710a4affffffff752e";
// the same dict with 'c': b'\x00\xff' in protocol 4 (FRAME, MEMOIZE, SHORT_BINBYTES)
constexpr std::string_view golden_p4 =
    "80049555000000000000007d94288c0161945d94284b014b028c0178948694658c0162944e8c016394430200ff948c01"
    "64944a90eefeff8c016594473ff80000000000008c016694888c0167948a060000000000018c0168944affffffff752e";

void expect_golden_dict(const pickle_node& r, bool with_bytes) {
  ASSERT_EQ(r.kind, pickle_kind::dict);
  ASSERT_EQ(r.entries.size(), with_bytes ? 8u : 7u);
  const auto* a = r.find("a");
  ASSERT_TRUE(a);
  ASSERT_EQ(a->kind, pickle_kind::list);
  ASSERT_EQ(a->items.size(), 2u);
  EXPECT_EQ(a->items[0]->integer, 1);
  ASSERT_EQ(a->items[1]->kind, pickle_kind::tuple);
  EXPECT_EQ(a->items[1]->items[0]->integer, 2);
  EXPECT_EQ(a->items[1]->items[1]->text, "x");
  EXPECT_EQ(r.find("b")->kind, pickle_kind::none);
  EXPECT_EQ(r.find("d")->integer, -70000);
  EXPECT_EQ(r.find("e")->floating, 1.5);
  EXPECT_TRUE(r.find("f")->boolean);
  EXPECT_EQ(r.find("g")->integer, std::int64_t{1} << 40);
  EXPECT_EQ(r.find("h")->integer, -1);
  if (with_bytes) {
    ASSERT_EQ(r.find("c")->kind, pickle_kind::bytes);
    EXPECT_EQ(r.find("c")->text, std::string("\x00\xff", 2));
  }
  // keys in the order written
  EXPECT_EQ(r.entries.front().first->text, "a");
  EXPECT_EQ(r.entries.back().first->text, "h");
}

}  // namespace

TEST(pickle, cpython_protocol_2) {
  const auto doc = decode(from_hex(golden_p2));
  expect_golden_dict(doc.root(), false);
}

TEST(pickle, cpython_protocol_4) {
  const auto doc = decode(from_hex(golden_p4));
  expect_golden_dict(doc.root(), true);
}

TEST(pickle, ordered_dict_is_a_dict) {
  // pickle.dumps(collections.OrderedDict(), protocol=2)
  const auto doc = decode(from_hex("800263636f6c6c656374696f6e730a4f726465726564446963740a7100295271012e"));
  EXPECT_EQ(doc.root().kind, pickle_kind::dict);
  EXPECT_TRUE(doc.root().entries.empty());
}

TEST(pickle, memo_shares_values) {
  pickle_writer w;
  w.op(']').memoize().get(0).op('a').stop();  // l = []; l.append(l)
  const auto doc = decode(w.data());
  const auto& r = doc.root();
  ASSERT_EQ(r.kind, pickle_kind::list);
  ASSERT_EQ(r.items.size(), 1u);
  EXPECT_EQ(r.items[0], &r);  // the list holds itself, as in Python
}

TEST(pickle, immutable_leaves_are_shared) {
  pickle_writer w;
  w.mark().integer(5).integer(5).op(')').op(')').none().none().integer(300).integer(300).op('t').stop();
  const auto doc = decode(w.data());
  const auto& t = doc.root().items;
  ASSERT_EQ(t.size(), 8u);
  EXPECT_EQ(t[0], t[1]);  // 5
  EXPECT_EQ(t[2], t[3]);  // ()
  EXPECT_EQ(t[4], t[5]);  // None
  EXPECT_NE(t[6], t[7]);  // 300: a node each
  EXPECT_EQ(t[6]->integer, 300);
  EXPECT_EQ(doc.node_count(), 6u);
}

TEST(pickle, objects_share_their_argument_tuple) {
  // 1000 torch.Size objects of one memoized 1000-int tuple: no copy of the tuple each
  pickle_writer w;
  w.op(']').mark().mark();
  for (int i = 0; i < 1000; ++i) w.integer(i);
  w.op('t').memoize().op('0');  // the tuple is memo 0, popped
  for (int i = 0; i < 1000; ++i) w.global("torch", "Size").get(0).op(0x85).op('R');
  w.op('e').stop();
  const auto doc = decode(w.data());
  const auto& list = doc.root();
  ASSERT_EQ(list.items.size(), 1000u);
  EXPECT_EQ(list.items[0]->arguments()[0], list.items[999]->arguments()[0]);
  EXPECT_EQ(list.items[999]->arguments()[0]->items.size(), 1000u);
}

TEST(pickle, torch_113_metadata) {
  const auto bytes = read_bytes(source_dir() / "verify/data/dcp/plain/.metadata");
  ASSERT_FALSE(bytes.empty());
  const auto doc = decode(bytes);
  const auto& r = doc.root();
  ASSERT_EQ(r.kind, pickle_kind::object);
  EXPECT_EQ(r.qualified_name(), "torch.distributed._shard.checkpoint.metadata.Metadata");
  ASSERT_TRUE(r.state);
  const auto* sdm = r.state->find("state_dict_metadata");
  ASSERT_TRUE(sdm);
  ASSERT_EQ(sdm->kind, pickle_kind::dict);
  const auto* w = sdm->find("w");
  ASSERT_TRUE(w);
  EXPECT_EQ(w->qualified_name(), "torch.distributed._shard.checkpoint.metadata.TensorStorageMetadata");
  // TensorProperties' state: (torch.float32, _get_layout('torch.strided'), False,
  // getattr(MEM_FORMAT_ENCODING, 'TORCH_CONTIGUOUS_FORMAT'), False)
  const auto* props = w->state->find("properties");
  ASSERT_TRUE(props && props->state);
  ASSERT_EQ(props->state->items.size(), 5u);
  EXPECT_TRUE(props->state->items[0]->is_global("torch", "float32"));
  EXPECT_EQ(props->state->items[1]->qualified_name(), "torch.serialization._get_layout");
  EXPECT_EQ(props->state->items[1]->arguments()[0]->text, "torch.strided");
  EXPECT_TRUE(props->state->items[3]->is_global("torch.distributed._shard.sharded_tensor.metadata",
                                                "MEM_FORMAT_ENCODING.TORCH_CONTIGUOUS_FORMAT"));
  const auto* size = w->state->find("size");
  ASSERT_TRUE(size);
  EXPECT_EQ(size->qualified_name(), "torch.Size");
  ASSERT_EQ(size->arguments()[0]->items.size(), 2u);
  EXPECT_EQ(size->arguments()[0]->items[0]->integer, 3);
  EXPECT_EQ(size->arguments()[0]->items[1]->integer, 4);
}

TEST(pickle, globals_outside_the_allow_list_are_refused_by_name) {
  for (auto [module, name] : {std::pair{"os", "system"}, {"builtins", "eval"}, {"posix", "system"}, {"torch", "load"},
                              {"torch.distributed.checkpoint.planner", "SavePlan"}, {"_codecs", "encode"},
                              {"torch", "ComplexFloatStorage"}, {"torch", "UntypedStorage"}}) {
    pickle_writer g;
    g.global(module, name).stop();
    EXPECT_NE(decode_error(g.data()).find(std::string("global ") + module + "." + name + " is not allowed"), std::string::npos)
        << module << "." << name;
    pickle_writer s;
    s.stack_global(module, name).stop();
    EXPECT_NE(decode_error(s.data()).find(std::string(module) + "." + name), std::string::npos);
  }
  // the classic payload: os.system('echo pwned') by REDUCE stops at the GLOBAL
  pickle_writer p(2);
  p.global("os", "system").str("echo pwned").op(0x85).op('R').stop();
  const auto e = decode_error(p.data());
  EXPECT_NE(e.find("test.pkl: pickle: global os.system is not allowed (byte 2)"), std::string::npos) << e;
}

TEST(pickle, getattr_only_for_allowed_pairs) {
  const std::string enum_module = "torch.distributed.checkpoint.metadata";
  pickle_writer ok;
  ok.global("builtins", "getattr").global(enum_module, "MEM_FORMAT_ENCODING").str("TORCH_CHANNELS_LAST").op(0x86).op('R').stop();
  EXPECT_TRUE(decode(ok.data()).root().is_global(enum_module, "MEM_FORMAT_ENCODING.TORCH_CHANNELS_LAST"));

  pickle_writer attr;  // an attribute outside the list
  attr.global("builtins", "getattr").global(enum_module, "MEM_FORMAT_ENCODING").str("__class__").op(0x86).op('R').stop();
  EXPECT_NE(decode_error(attr.data()).find("getattr(" + enum_module + ".MEM_FORMAT_ENCODING, '__class__') is not allowed"),
            std::string::npos);
  pickle_writer obj;  // an object that is not an enum
  obj.global("__builtin__", "getattr").global("torch", "Size").str("TORCH_CHANNELS_LAST").op(0x86).op('R').stop();
  EXPECT_NE(decode_error(obj.data()).find("getattr(the global torch.Size"), std::string::npos);
}

TEST(pickle, roles_are_enforced) {
  pickle_writer call_dtype;
  call_dtype.global("torch", "float32").op(')').op('R').stop();
  EXPECT_NE(decode_error(call_dtype.data()).find("the global torch.float32 is not callable"), std::string::npos);
  pickle_writer newobj_fn;
  newobj_fn.global("torch._utils", "_rebuild_tensor_v2").op(')').op(0x81).stop();
  EXPECT_NE(decode_error(newobj_fn.data()).find("NEWOBJ of the global torch._utils._rebuild_tensor_v2"), std::string::npos);
  pickle_writer call_str;
  call_str.str("os.system").op(')').op('R').stop();
  EXPECT_NE(decode_error(call_str.data()).find("REDUCE calls a str"), std::string::npos);
  pickle_writer od;
  od.global("collections", "OrderedDict").op(']').op(0x85).op('R').stop();
  EXPECT_NE(decode_error(od.data()).find("OrderedDict called with arguments"), std::string::npos);
  pickle_writer build_list;
  build_list.op(']').op('}').op('b').stop();
  EXPECT_NE(decode_error(build_list.data()).find("BUILD of a list"), std::string::npos);
  pickle_writer pid;  // no persistent ids in a .metadata
  pid.str("x").op('Q').stop();
  EXPECT_NE(decode_error(pid.data()).find("persistent id (BINPERSID) where none is expected"), std::string::npos);
  EXPECT_EQ(decode(pid.data(), true).root().kind, pickle_kind::persistent_id);
}

TEST(pickle, malformed_input_is_refused_with_its_reason) {
  auto err = [](std::string_view hex) { return decode_error(from_hex(hex)); };
  EXPECT_NE(err("").find("truncated"), std::string::npos);
  EXPECT_NE(err("80044b01").find("truncated: no STOP"), std::string::npos);
  EXPECT_NE(err("80044b").find("truncated: an argument runs past the end"), std::string::npos);
  EXPECT_NE(err("80044b012e00").find("1 bytes after STOP"), std::string::npos);
  EXPECT_NE(err("80044b014b022e").find("STOP with 2 values on the stack"), std::string::npos);
  EXPECT_NE(err("80042e").find("STOP with 0 values"), std::string::npos);
  EXPECT_NE(err("8004284b012e").find("STOP with a MARK open"), std::string::npos);
  EXPECT_NE(err("800449310a2e").find("unsupported opcode 0x49 'I'"), std::string::npos);
  EXPECT_NE(err("8001").find("protocol 1 is not supported"), std::string::npos);
  EXPECT_NE(err("8004680a2e").find("memo entry 10 was never stored"), std::string::npos);
  EXPECT_NE(err("80044e72e80300002e").find("memo index 1000 is beyond the pickle's 9 bytes"), std::string::npos);
  EXPECT_NE(err("80048a09000000000000000000012e").find("integer of 9 bytes"), std::string::npos);
  EXPECT_NE(err("80048c02c3282e").find("not UTF-8"), std::string::npos);
  EXPECT_NE(err("8004612e").find("pop from an empty stack"), std::string::npos);
  EXPECT_NE(err("80044b01284b02612e").find("no value above the MARK"), std::string::npos);
  EXPECT_NE(err("80047d5d4b0173").find("unhashable"), std::string::npos);
  EXPECT_NE(err("8004950a00000000000000").find("frame of 10 bytes runs past the end"), std::string::npos);
}

TEST(pickle, integers_of_every_width) {
  for (std::int64_t v : {std::int64_t{0}, std::int64_t{255}, std::int64_t{256}, std::int64_t{65535}, std::int64_t{65536},
                         std::int64_t{-1}, std::int64_t{INT32_MIN}, std::int64_t{INT32_MAX}, std::int64_t{INT32_MAX} + 1,
                         std::int64_t{INT32_MIN} - 1, INT64_MAX, INT64_MIN, std::int64_t{1} << 40, -(std::int64_t{1} << 40)}) {
    pickle_writer w;
    w.integer(v).stop();
    EXPECT_EQ(decode(w.data()).root().integer, v);
  }
}

TEST(pickle, bounds) {
  pickle_options o;
  o.limits.max_marks = 4;
  pickle_writer marks;
  for (int i = 0; i < 5; ++i) marks.mark();
  EXPECT_NE(error_of([&] { unpickle(marks.data(), "m", o); }).find("more than 4 open MARKs"), std::string::npos);
  o.limits = {};
  o.limits.max_nodes = 10;
  pickle_writer nodes;
  nodes.op(']').mark();
  for (int i = 0; i < 20; ++i) nodes.integer(i);
  nodes.op('e').stop();
  EXPECT_NE(error_of([&] { unpickle(nodes.data(), "n", o); }).find("more than 10 values"), std::string::npos);
  o.limits = {};
  o.limits.max_memo = 2;
  pickle_writer memo;
  memo.none().memoize().memoize().memoize().stop();
  EXPECT_NE(error_of([&] { unpickle(memo.data(), "n", o); }).find("more than 2 memo entries"), std::string::npos);
  // a deep tuple nesting decodes without recursion
  pickle_writer deep;
  deep.none();
  for (int i = 0; i < 100000; ++i) deep.op(0x85);
  deep.stop();
  const auto doc = decode(deep.data());
  EXPECT_EQ(doc.node_count(), 100001u);
}

// ---- properties ---------------------------------------------------------------------------

namespace {

// A plain Python value as the test models it.
struct value;
using value_ptr = std::shared_ptr<value>;
struct value {
  enum kind_t { none, boolean, integer, floating, string, bytes, list, tuple, dict } kind = none;
  std::int64_t i = 0;
  double f = 0;
  std::string s;
  std::vector<value_ptr> items;                          // list, tuple
  std::vector<std::pair<std::string, value_ptr>> entries;  // dict, str keys
};

rc::Gen<value_ptr> gen_value(int depth) {
  using namespace rc;
  auto leaf = gen::oneOf(
      gen::just(std::make_shared<value>()),
      gen::map(gen::arbitrary<bool>(), [](bool b) { auto v = std::make_shared<value>(); v->kind = value::boolean; v->i = b; return v; }),
      gen::map(gen::arbitrary<std::int64_t>(), [](std::int64_t i) { auto v = std::make_shared<value>(); v->kind = value::integer; v->i = i; return v; }),
      gen::map(gen::inRange(-1000000, 1000000), [](int i) { auto v = std::make_shared<value>(); v->kind = value::floating; v->f = i / 64.0; return v; }),
      gen::map(gen::container<std::string>(gen::inRange<char>(' ', '~')), [](std::string s) { auto v = std::make_shared<value>(); v->kind = value::string; v->s = s; return v; }),
      gen::map(gen::arbitrary<std::string>(), [](std::string s) { auto v = std::make_shared<value>(); v->kind = value::bytes; v->s = s; return v; }));
  if (depth == 0) return leaf;
  auto children = gen::resize(6, gen::container<std::vector<value_ptr>>(gen::lazy([depth] { return gen_value(depth - 1); })));
  auto seq = gen::map(gen::pair(gen::element(value::list, value::tuple), children), [](std::pair<value::kind_t, std::vector<value_ptr>> p) {
    auto v = std::make_shared<value>();
    v->kind = p.first;
    v->items = p.second;
    return v;
  });
  auto dict = gen::map(children, [](std::vector<value_ptr> c) {
    auto v = std::make_shared<value>();
    v->kind = value::dict;
    for (std::size_t k = 0; k < c.size(); ++k) v->entries.emplace_back("k" + std::to_string(k), c[k]);
    return v;
  });
  return gen::weightedOneOf<value_ptr>({{3, leaf}, {1, seq}, {1, dict}});
}

void write(pickle_writer& w, const value& v) {
  switch (v.kind) {
    case value::none: w.none(); break;
    case value::boolean: w.boolean(v.i != 0); break;
    case value::integer: w.integer(v.i); break;
    case value::floating: w.floating(v.f); break;
    case value::string: w.str(v.s); break;
    case value::bytes: w.bytes(v.s); break;
    case value::list:
      w.op(']').memoize();
      if (!v.items.empty()) {
        w.mark();
        for (const auto& c : v.items) write(w, *c);
        w.op('e');
      }
      break;
    case value::tuple:
      if (v.items.size() <= 3 && !v.items.empty()) {
        for (const auto& c : v.items) write(w, *c);
        w.op(0x84 + static_cast<int>(v.items.size()));
      } else {
        w.mark();
        for (const auto& c : v.items) write(w, *c);
        w.op('t');
      }
      break;
    case value::dict:
      w.op('}');
      for (const auto& [k, c] : v.entries) {  // SETITEM one by one
        w.str(k);
        write(w, *c);
        w.op('s');
      }
      break;
  }
}

bool same(const value& v, const pickle_node& n) {
  switch (v.kind) {
    case value::none: return n.kind == pickle_kind::none;
    case value::boolean: return n.kind == pickle_kind::boolean && n.boolean == (v.i != 0);
    case value::integer: return n.kind == pickle_kind::integer && n.integer == v.i;
    case value::floating: return n.kind == pickle_kind::floating && n.floating == v.f;
    case value::string: return n.kind == pickle_kind::string && n.text == v.s;
    case value::bytes: return n.kind == pickle_kind::bytes && n.text == v.s;
    case value::list:
    case value::tuple: {
      if (n.kind != (v.kind == value::list ? pickle_kind::list : pickle_kind::tuple) || n.items.size() != v.items.size()) return false;
      for (std::size_t i = 0; i < v.items.size(); ++i)
        if (!same(*v.items[i], *n.items[i])) return false;
      return true;
    }
    case value::dict: {
      if (n.kind != pickle_kind::dict || n.entries.size() != v.entries.size()) return false;
      for (std::size_t i = 0; i < v.entries.size(); ++i)
        if (n.entries[i].first->text != v.entries[i].first || !same(*v.entries[i].second, *n.entries[i].second)) return false;
      return true;
    }
  }
  return false;
}

}  // namespace

RC_GTEST_PROP(pickle, plain_values_survive_the_round_trip, ()) {
  const auto v = *gen_value(3);
  pickle_writer w;
  write(w, *v);
  w.stop();
  const auto doc = decode(w.data());
  RC_ASSERT(same(*v, doc.root()));
}

RC_GTEST_PROP(pickle, truncations_and_flips_decode_or_throw_reshard_error, ()) {
  const auto v = *gen_value(3);
  pickle_writer w;
  write(w, *v);
  w.stop();
  auto bytes = w.data();
  const auto cut = *rc::gen::inRange<std::size_t>(0, bytes.size());
  auto truncated = std::vector<std::byte>(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(cut));
  RC_ASSERT(!decode_error(truncated).empty());  // a proper prefix never ends with its STOP
  const auto at = *rc::gen::inRange<std::size_t>(0, bytes.size());
  bytes[at] ^= static_cast<std::byte>(*rc::gen::inRange(1, 256));
  try {
    decode(bytes);
  } catch (const reshard::error&) {
  }
}
