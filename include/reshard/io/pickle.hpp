// reshard/io/pickle.hpp: a restricted unpickler for the pickles of PyTorch checkpoints: the
// `.metadata` of a Distributed Checkpoint (DCP) and the `data.pkl` of a `torch.save` archive
// (see docs/formats.md#9-pytorch-distributed-checkpoints-dcp).
//
// It decodes, never executes. The result is a tree (a graph, since a pickle may share values
// through its memo) of plain values: None, bool, int (64-bit), float, str, bytes, list, tuple,
// dict (keys in order, as written), plus three opaque kinds:
//   global         an allow-listed global (`torch.float32`, `torch.Size`, ...), as a name;
//   object         what REDUCE or NEWOBJ would have built: the global called, its arguments,
//                  and the BUILD state if any (a dataclass's `__dict__`, TensorProperties' tuple);
//   persistent_id  what BINPERSID refers to (torch.save's storages), only when asked for.
// Only the globals of pickle_allow_list may be named, each in its role (a class may be built, a
// dtype only referred to), `collections.OrderedDict()` becomes a plain dict, and
// `builtins.getattr` is resolved for the allow-listed (object, attribute) pairs only (torch
// 1.13 writes the enum member MEM_FORMAT_ENCODING.TORCH_CONTIGUOUS_FORMAT that way on
// Python 3.11+). Anything else is refused by name: "<file>: pickle: global os.system is not
// allowed (byte 2)".
//
// Opcodes: those of protocols 2 to 5 that these pickles use (PROTO FRAME STOP MARK POP POP_MARK
// DUP NONE NEWTRUE NEWFALSE BININT BININT1 BININT2 LONG1 LONG4 BINFLOAT BINUNICODE
// SHORT_BINUNICODE BINUNICODE8 BINBYTES SHORT_BINBYTES BINBYTES8 EMPTY_DICT EMPTY_LIST
// EMPTY_TUPLE TUPLE TUPLE1 TUPLE2 TUPLE3 LIST DICT APPEND APPENDS SETITEM SETITEMS GLOBAL
// STACK_GLOBAL REDUCE BUILD NEWOBJ NEWOBJ_EX BINPUT LONG_BINPUT MEMOIZE BINGET LONG_BINGET
// BINPERSID); any other is refused naming it and its byte offset. Integers wider than 64 bits
// are refused. The pickle must end with STOP leaving exactly one value, and nothing may follow.
//
// Bounds: the parser is iterative (no recursion on the input's nesting), every node lives in
// one arena owned by the pickle_document (freed without recursion), at most one node per opcode
// (None, True, False, () and the ints 0..255 are shared, an object shares its argument tuple), memo
// indices below the pickle's size, and pickle_limits bounds the stack, the open MARKs, the memo
// and the node count. A value may refer to itself through the
// memo (as in Python): code walking a value must bound its own depth.
#pragma once

#include <reshard/error.hpp>
#include <reshard/io/detail/text.hpp>

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace reshard::io {

/// What a pickle_node is.
enum class pickle_kind : std::uint8_t {
  none, boolean, integer, floating, string, bytes, list, tuple, dict, global, object, persistent_id
};

/// "None", "bool", "int", ... for messages.
constexpr std::string_view kind_name(pickle_kind k) noexcept {
  constexpr std::array<std::string_view, 12> names{
      "None", "bool", "int", "float", "str", "bytes", "list", "tuple", "dict", "global", "object", "persistent id"};
  return names[static_cast<std::size_t>(k)];
}

/// What an allow-listed global may be used for.
enum class pickle_role : std::uint8_t {
  klass,         ///< a class: REDUCE or NEWOBJ builds an object of it
  function,      ///< a function: REDUCE records the call as an object
  value,         ///< referred to only (a dtype, a storage type, an enum member)
  enum_class,    ///< an Enum: REDUCE(cls, (value,)) or getattr(cls, member) names a member
  ordered_dict,  ///< collections.OrderedDict: REDUCE with no arguments is an empty dict
  getattr,       ///< builtins.getattr: resolved for pickle_getattr_allow_list only
};

/// One allow-listed global.
struct pickle_global {
  std::string_view module, name;
  pickle_role role;
};

namespace detail {
inline constexpr std::string_view dcp_meta_113 = "torch.distributed._shard.checkpoint.metadata";
inline constexpr std::string_view dcp_meta_2 = "torch.distributed.checkpoint.metadata";
inline constexpr std::string_view dcp_fs_113 = "torch.distributed._shard.checkpoint.filesystem";
inline constexpr std::string_view dcp_fs_2 = "torch.distributed.checkpoint.filesystem";
inline constexpr std::string_view st_meta_113 = "torch.distributed._shard.sharded_tensor.metadata";
}  // namespace detail

/// The globals the unpickler admits: the DCP dataclasses under torch 1.13's and torch 2.x's
/// module paths (the memory format enum is `_MEM_FORMAT_ENCODING` in later 2.x; StorageMeta,
/// whose checkpoint_id may be a pathlib.PosixPath, is later 2.x's), torch.Size, the dtypes and
/// typed storages reshard can hold, the tensor rebuild function, the layout helper, OrderedDict
/// and getattr.
inline constexpr std::array<pickle_global, 45> pickle_allow_list{{
    {detail::dcp_meta_113, "Metadata", pickle_role::klass},
    {detail::dcp_meta_113, "TensorStorageMetadata", pickle_role::klass},
    {detail::dcp_meta_113, "BytesStorageMetadata", pickle_role::klass},
    {detail::dcp_meta_113, "ChunkStorageMetadata", pickle_role::klass},
    {detail::dcp_meta_113, "MetadataIndex", pickle_role::klass},
    {detail::st_meta_113, "TensorProperties", pickle_role::klass},
    {detail::st_meta_113, "MEM_FORMAT_ENCODING", pickle_role::enum_class},
    {detail::dcp_fs_113, "_StorageInfo", pickle_role::klass},
    {detail::dcp_meta_2, "Metadata", pickle_role::klass},
    {detail::dcp_meta_2, "TensorStorageMetadata", pickle_role::klass},
    {detail::dcp_meta_2, "BytesStorageMetadata", pickle_role::klass},
    {detail::dcp_meta_2, "ChunkStorageMetadata", pickle_role::klass},
    {detail::dcp_meta_2, "MetadataIndex", pickle_role::klass},
    {detail::dcp_meta_2, "TensorProperties", pickle_role::klass},
    {detail::dcp_meta_2, "MEM_FORMAT_ENCODING", pickle_role::enum_class},
    {detail::dcp_meta_2, "_MEM_FORMAT_ENCODING", pickle_role::enum_class},
    {detail::dcp_meta_2, "StorageMeta", pickle_role::klass},
    {detail::dcp_fs_2, "_StorageInfo", pickle_role::klass},
    {"pathlib", "PosixPath", pickle_role::klass},
    {"torch", "Size", pickle_role::klass},
    {"torch._utils", "_rebuild_tensor_v2", pickle_role::function},
    {"torch.serialization", "_get_layout", pickle_role::function},
    {"collections", "OrderedDict", pickle_role::ordered_dict},
    {"builtins", "getattr", pickle_role::getattr},
    {"__builtin__", "getattr", pickle_role::getattr},
    {"torch", "float32", pickle_role::value},
    {"torch", "float64", pickle_role::value},
    {"torch", "float16", pickle_role::value},
    {"torch", "bfloat16", pickle_role::value},
    {"torch", "int64", pickle_role::value},
    {"torch", "int32", pickle_role::value},
    {"torch", "int16", pickle_role::value},
    {"torch", "int8", pickle_role::value},
    {"torch", "uint8", pickle_role::value},
    {"torch", "bool", pickle_role::value},
    {"torch", "FloatStorage", pickle_role::value},
    {"torch", "DoubleStorage", pickle_role::value},
    {"torch", "HalfStorage", pickle_role::value},
    {"torch", "BFloat16Storage", pickle_role::value},
    {"torch", "LongStorage", pickle_role::value},
    {"torch", "IntStorage", pickle_role::value},
    {"torch", "ShortStorage", pickle_role::value},
    {"torch", "CharStorage", pickle_role::value},
    {"torch", "ByteStorage", pickle_role::value},
    {"torch", "BoolStorage", pickle_role::value},
}};
static_assert([] {
  for (const auto& g : pickle_allow_list)
    if (g.module.empty() || g.name.empty()) return false;
  return true;
}(), "pickle_allow_list: an entry is empty (the array's size exceeds its entries)");

/// The (object, attribute) pairs `getattr` may name: the members of MEM_FORMAT_ENCODING.
inline constexpr std::array<std::string_view, 3> pickle_getattr_allow_list{
    "TORCH_CONTIGUOUS_FORMAT", "TORCH_CHANNELS_LAST", "TORCH_PRESERVE_FORMAT"};

/// The allow-list entry of `module`.`name`, or nullptr.
constexpr const pickle_global* find_pickle_global(std::string_view module, std::string_view name) noexcept {
  for (const auto& g : pickle_allow_list)
    if (g.module == module && g.name == name) return &g;
  return nullptr;
}

/// One decoded value. Nodes belong to their pickle_document; pointers stay valid as long as it.
struct pickle_node {
  pickle_kind kind = pickle_kind::none;
  bool boolean = false;
  std::int64_t integer = 0;
  double floating = 0;
  std::string text;  ///< str and bytes: the content; global: the module
  std::string name;  ///< global: the name in its module ("Size", "MEM_FORMAT_ENCODING.TORCH_CHANNELS_LAST")
  pickle_role role = pickle_role::value;                       ///< global: its role
  std::vector<const pickle_node*> items;                       ///< list, tuple; persistent_id: {the id}
  std::vector<std::pair<const pickle_node*, const pickle_node*>> entries;  ///< dict, in order
  const pickle_node* callable = nullptr;                       ///< object: the global called
  const pickle_node* args = nullptr;                           ///< object: its argument tuple (shared, not copied)
  const pickle_node* state = nullptr;                          ///< object: the BUILD state, if any

  /// "module.name" of a global; of an object, its global's.
  std::string qualified_name() const {
    const pickle_node* g = kind == pickle_kind::object ? callable : this;
    return g && g->kind == pickle_kind::global ? g->text + "." + g->name : std::string();
  }
  bool is_global(std::string_view module, std::string_view n) const {
    return kind == pickle_kind::global && text == module && name == n;
  }
  /// The arguments of an object.
  const std::vector<const pickle_node*>& arguments() const { return args->items; }
  /// The value of dict key `key` (a str), or nullptr.
  const pickle_node* find(std::string_view key) const {
    for (const auto& [k, v] : entries)
      if (k->kind == pickle_kind::string && k->text == key) return v;
    return nullptr;
  }
};

/// "a str", "an int 3", "the global torch.Size", "an object torch.Size": a value in messages.
inline std::string describe(const pickle_node& n) {
  switch (n.kind) {
    case pickle_kind::none: return "None";
    case pickle_kind::boolean: return n.boolean ? "True" : "False";
    case pickle_kind::integer: return "an int " + std::to_string(n.integer);
    case pickle_kind::string: return "a str " + io::detail::quote_name(n.text);
    case pickle_kind::global: return "the global " + n.qualified_name();
    case pickle_kind::object: return "an object " + n.qualified_name();
    case pickle_kind::floating: return "a float " + std::to_string(n.floating);
    default: {
      const auto count = n.items.size() + n.entries.size();
      return "a " + std::string(kind_name(n.kind)) + " of " + std::to_string(count) + (count == 1 ? " item" : " items");
    }
  }
}

/// Bounds of the unpickler, far above what torch writes.
struct pickle_limits {
  std::size_t max_stack = std::size_t{1} << 20;   ///< values on the stack
  std::size_t max_marks = 256;                    ///< open MARKs (the nesting of the pickle program)
  std::size_t max_memo = std::size_t{1} << 22;    ///< memo entries
  std::size_t max_nodes = std::size_t{1} << 24;   ///< values built in all
};

/// Options of unpickle().
struct pickle_options {
  bool persistent_ids = false;  ///< admit BINPERSID (torch.save's data.pkl)
  pickle_limits limits{};
};

namespace detail {
class pickle_reader;
}

/// A decoded pickle: the arena of its nodes and its value.
class pickle_document {
 public:
  pickle_document() = default;
  pickle_document(pickle_document&&) noexcept = default;
  pickle_document& operator=(pickle_document&&) noexcept = default;
  pickle_document(const pickle_document&) = delete;
  pickle_document& operator=(const pickle_document&) = delete;

  /// The pickled value (None for a default-constructed document).
  const pickle_node& root() const { return root_ ? *root_ : none_; }
  /// How many nodes were built.
  std::size_t node_count() const noexcept { return nodes_.size(); }

 private:
  friend class detail::pickle_reader;
  std::deque<pickle_node> nodes_;
  const pickle_node* root_ = nullptr;
  pickle_node none_{};
};

namespace detail {
/// The parser behind unpickle(); one per call.
class pickle_reader {
 public:
  pickle_reader(std::span<const std::byte> bytes, std::string_view file, const pickle_options& options)
      : in_(bytes), file_(file), opt_(options) {}

  pickle_document run() {
    for (;;) {
      op_at_ = at_;
      const auto op = u8();
      switch (op) {
        case 0x80: {  // PROTO
          const auto v = u8();
          if (v < 2 || v > 5) fail("protocol " + std::to_string(v) + " is not supported (2 to 5 are)");
          break;
        }
        case 0x95: {  // FRAME: the frame's bytes follow inline
          const auto n = le(8);
          if (n > in_.size() - at_) fail("frame of " + std::to_string(n) + " bytes runs past the end");
          break;
        }
        case '.': return stop();
        case '(':
          if (marks_.size() >= opt_.limits.max_marks) fail("more than " + std::to_string(opt_.limits.max_marks) + " open MARKs");
          marks_.push_back(stack_.size());
          break;
        case '0': pop(); break;
        case '1': pop_mark(); break;
        case '2': push(top()); break;
        case 'N': push(shared(none_, pickle_kind::none, 0)); break;
        case 0x88: push(shared(true_, pickle_kind::boolean, 1)); break;
        case 0x89: push(shared(false_, pickle_kind::boolean, 0)); break;
        case 'J': push_int(static_cast<std::int32_t>(static_cast<std::uint32_t>(le(4)))); break;
        case 'K': push_int(static_cast<std::int64_t>(le(1))); break;
        case 'M': push_int(static_cast<std::int64_t>(le(2))); break;
        case 0x8a: long_int(le(1)); break;
        case 0x8b: long_int(le(4)); break;
        case 'G': {
          const auto bits = be8();
          auto* n = make(pickle_kind::floating);
          n->floating = std::bit_cast<double>(bits);
          push(n);
          break;
        }
        case 'X': text(pickle_kind::string, le(4)); break;
        case 0x8c: text(pickle_kind::string, le(1)); break;
        case 0x8d: text(pickle_kind::string, le(8)); break;
        case 'B': text(pickle_kind::bytes, le(4)); break;
        case 'C': text(pickle_kind::bytes, le(1)); break;
        case 0x8e: text(pickle_kind::bytes, le(8)); break;
        case '}': push(make(pickle_kind::dict)); break;
        case ']': push(make(pickle_kind::list)); break;
        case ')': push(shared(empty_tuple_, pickle_kind::tuple, 0)); break;
        case 't': push(sequence(pickle_kind::tuple, pop_mark())); break;
        case 'l': push(sequence(pickle_kind::list, pop_mark())); break;
        case 0x85: case 0x86: case 0x87: {
          const std::size_t n = op - 0x84u;
          if (stack_.size() < floor() + n) fail("TUPLE" + std::to_string(n) + " on a stack of fewer values");
          std::vector<pickle_node*> items(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
          stack_.resize(stack_.size() - n);
          push(sequence(pickle_kind::tuple, items));
          break;
        }
        case 'd': {
          auto* d = make(pickle_kind::dict);
          set_items(d, pop_mark());
          push(d);
          break;
        }
        case 'a': {
          auto* v = pop();
          append(top(), {v});
          break;
        }
        case 'e': {
          auto items = pop_mark();
          append(top(), items);
          break;
        }
        case 's': {
          auto* v = pop();
          auto* k = pop();
          set_items(top(), {k, v});
          break;
        }
        case 'u': {
          auto items = pop_mark();
          set_items(top(), items);
          break;
        }
        case 'c': {
          const auto module = line();
          const auto name = line();
          push(global(module, name));
          break;
        }
        case 0x93: {
          auto* name = pop();
          auto* module = pop();
          if (module->kind != pickle_kind::string || name->kind != pickle_kind::string)
            fail("STACK_GLOBAL of " + describe(*module) + " and " + describe(*name) + ", not two str");
          push(global(module->text, name->text));
          break;
        }
        case 'R': {
          auto* args = pop();
          auto* callable = pop();
          push(reduce(callable, args));
          break;
        }
        case 0x81: {
          auto* args = pop();
          auto* cls = pop();
          push(newobj(cls, args));
          break;
        }
        case 0x92: {
          auto* kwargs = pop();
          auto* args = pop();
          auto* cls = pop();
          if (kwargs->kind != pickle_kind::dict || !kwargs->entries.empty())
            fail("NEWOBJ_EX with keyword arguments (" + describe(*kwargs) + ")");
          push(newobj(cls, args));
          break;
        }
        case 'b': {
          auto* state = pop();
          auto* obj = top();
          if (obj->kind != pickle_kind::object) fail("BUILD of " + describe(*obj) + ", not of an object");
          if (obj->state) fail("BUILD of " + describe(*obj) + " twice");
          obj->state = state;
          break;
        }
        case 'q': put(static_cast<std::uint32_t>(le(1))); break;
        case 'r': put(static_cast<std::uint32_t>(le(4))); break;
        case 0x94: put(static_cast<std::uint32_t>(memo_count_)); break;
        case 'h': get(static_cast<std::uint32_t>(le(1))); break;
        case 'j': get(static_cast<std::uint32_t>(le(4))); break;
        case 'Q': {
          if (!opt_.persistent_ids) fail("persistent id (BINPERSID) where none is expected");
          auto* pid = pop();
          auto* n = make(pickle_kind::persistent_id);
          n->items.push_back(pid);
          push(n);
          break;
        }
        default: fail(std::string("unsupported opcode ") + opcode_text(op));
      }
    }
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    report_error(std::string(file_) + ": pickle: " + why + " (byte " + std::to_string(op_at_) + ")");
  }
  static std::string opcode_text(std::uint8_t op) {
    static constexpr char hex[] = "0123456789abcdef";
    std::string s = "0x";
    s += hex[op >> 4];
    s += hex[op & 15];
    if (op >= 0x20 && op < 0x7f) s += std::string(" '") + static_cast<char>(op) + "'";
    return s;
  }

  std::uint8_t u8() {
    if (at_ >= in_.size()) fail("truncated: no STOP before the end of " + std::to_string(in_.size()) + " bytes");
    return static_cast<std::uint8_t>(in_[at_++]);
  }
  std::uint64_t le(int n) {
    if (static_cast<std::size_t>(n) > in_.size() - at_) fail("truncated: an argument runs past the end");
    std::uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= static_cast<std::uint64_t>(in_[at_ + static_cast<std::size_t>(i)]) << (8 * i);
    at_ += static_cast<std::size_t>(n);
    return v;
  }
  std::uint64_t be8() {
    if (8 > in_.size() - at_) fail("truncated: a float runs past the end");
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < 8; ++i) v = v << 8 | static_cast<std::uint64_t>(in_[at_ + i]);
    at_ += 8;
    return v;
  }
  std::string_view take(std::uint64_t n) {
    if (n > in_.size() - at_) fail("truncated: a string of " + std::to_string(n) + " bytes runs past the end");
    std::string_view s(reinterpret_cast<const char*>(in_.data()) + at_, static_cast<std::size_t>(n));
    at_ += static_cast<std::size_t>(n);
    return s;
  }
  std::string line() {
    std::size_t end = at_;
    while (end < in_.size() && in_[end] != std::byte{'\n'}) ++end;
    if (end == in_.size()) fail("truncated: GLOBAL without its newline");
    std::string s(reinterpret_cast<const char*>(in_.data()) + at_, end - at_);
    at_ = end + 1;
    return s;
  }

  pickle_node* make(pickle_kind k) {
    if (doc_.nodes_.size() >= opt_.limits.max_nodes) fail("more than " + std::to_string(opt_.limits.max_nodes) + " values");
    auto& n = doc_.nodes_.emplace_back();
    n.kind = k;
    return &n;
  }
  std::size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  void push(pickle_node* n) {
    if (stack_.size() >= opt_.limits.max_stack) fail("more than " + std::to_string(opt_.limits.max_stack) + " values on the stack");
    stack_.push_back(n);
  }
  pickle_node* pop() {
    if (stack_.size() <= floor()) fail(stack_.empty() ? "pop from an empty stack" : "pop across a MARK");
    auto* n = stack_.back();
    stack_.pop_back();
    return n;
  }
  pickle_node* top() {
    if (stack_.size() <= floor()) fail(stack_.empty() ? "no value on the stack" : "no value above the MARK");
    return stack_.back();
  }
  std::vector<pickle_node*> pop_mark() {
    if (marks_.empty()) fail("no MARK to pop to");
    const auto m = marks_.back();
    marks_.pop_back();
    std::vector<pickle_node*> items(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return items;
  }

  // None, True, False, () and the ints 0..255 are immutable: one node each serves every use
  pickle_node* shared(pickle_node*& slot, pickle_kind k, std::int64_t v) {
    if (!slot) {
      slot = make(k);
      slot->integer = v;
      slot->boolean = v != 0;
    }
    return slot;
  }
  void push_int(std::int64_t v) {
    if (v >= 0 && v < 256) return push(shared(small_[static_cast<std::size_t>(v)], pickle_kind::integer, v));
    auto* n = make(pickle_kind::integer);
    n->integer = v;
    push(n);
  }
  void long_int(std::uint64_t n) {
    if (n > 8) fail("integer of " + std::to_string(n) + " bytes (more than 64 bits)");
    const auto bytes = take(n);
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < bytes.size(); ++i) v |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
    if (n > 0 && n < 8 && (static_cast<unsigned char>(bytes[n - 1]) & 0x80)) v |= ~std::uint64_t{0} << (8 * n);  // sign
    push_int(static_cast<std::int64_t>(v));
  }
  static bool valid_utf8(std::string_view s) {
    for (std::size_t i = 0; i < s.size();) {
      const auto c = static_cast<unsigned char>(s[i]);
      const std::size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
      if (n == 0 || n > s.size() - i) return false;
      for (std::size_t k = 1; k < n; ++k)
        if ((static_cast<unsigned char>(s[i + k]) >> 6) != 2) return false;
      i += n;
    }
    return true;
  }
  void text(pickle_kind k, std::uint64_t n) {
    const auto s = take(n);
    if (k == pickle_kind::string && !valid_utf8(s)) fail("str that is not UTF-8");
    auto* node = make(k);
    node->text.assign(s);
    push(node);
  }
  pickle_node* sequence(pickle_kind k, const std::vector<pickle_node*>& items) {
    auto* n = make(k);
    n->items.assign(items.begin(), items.end());
    return n;
  }
  void append(pickle_node* list, const std::vector<pickle_node*>& items) {
    if (list->kind != pickle_kind::list) fail("APPEND to " + describe(*list) + ", not to a list");
    list->items.insert(list->items.end(), items.begin(), items.end());
  }
  void set_items(pickle_node* dict, const std::vector<pickle_node*>& kv) {
    if (dict->kind != pickle_kind::dict) fail("SETITEM on " + describe(*dict) + ", not on a dict");
    if (kv.size() % 2) fail("SETITEMS with an odd number of values");
    for (std::size_t i = 0; i < kv.size(); i += 2) {
      const auto* k = kv[i];
      if (k->kind == pickle_kind::list || k->kind == pickle_kind::dict) fail("dict key that is " + describe(*k) + " (unhashable)");
      dict->entries.emplace_back(k, kv[i + 1]);
    }
  }

  pickle_node* global(std::string_view module, std::string_view name) {
    const auto* g = find_pickle_global(module, name);
    if (!g) fail("global " + io::detail::printable(module) + "." + io::detail::printable(name) + " is not allowed");
    auto* n = make(pickle_kind::global);
    n->text.assign(module);
    n->name.assign(name);
    n->role = g->role;
    return n;
  }
  pickle_node* object(const pickle_node* callable, const pickle_node* args) {
    auto* n = make(pickle_kind::object);
    n->callable = callable;
    n->args = args;
    return n;
  }
  pickle_node* reduce(const pickle_node* callable, const pickle_node* args) {
    if (args->kind != pickle_kind::tuple) fail("REDUCE with " + describe(*args) + " for arguments, not a tuple");
    if (callable->kind != pickle_kind::global) fail("REDUCE calls " + describe(*callable) + ", not an allowed global");
    switch (callable->role) {
      case pickle_role::klass:
      case pickle_role::function: return object(callable, args);
      case pickle_role::enum_class:
        if (args->items.size() != 1 || args->items[0]->kind != pickle_kind::integer)
          fail("enum " + callable->qualified_name() + " built from " + describe(*args) + ", not from one int");
        return object(callable, args);
      case pickle_role::ordered_dict:
        if (!args->items.empty()) fail("collections.OrderedDict called with arguments");
        return make(pickle_kind::dict);
      case pickle_role::getattr: {
        if (args->items.size() != 2) fail("getattr with " + std::to_string(args->items.size()) + " arguments");
        const auto* obj = args->items[0];
        const auto* attr = args->items[1];
        if (obj->kind != pickle_kind::global || obj->role != pickle_role::enum_class || attr->kind != pickle_kind::string)
          fail("getattr(" + describe(*obj) + ", " + describe(*attr) + ") is not allowed");
        bool known = false;
        for (auto a : pickle_getattr_allow_list) known = known || a == attr->text;
        if (!known) fail("getattr(" + obj->qualified_name() + ", " + io::detail::quote_name(attr->text) + ") is not allowed");
        auto* n = make(pickle_kind::global);
        n->text = obj->text;
        n->name = obj->name + "." + attr->text;
        n->role = pickle_role::value;
        return n;
      }
      case pickle_role::value: break;
    }
    fail("the global " + callable->qualified_name() + " is not callable");
  }
  pickle_node* newobj(const pickle_node* cls, const pickle_node* args) {
    if (args->kind != pickle_kind::tuple) fail("NEWOBJ with " + describe(*args) + " for arguments, not a tuple");
    if (cls->kind != pickle_kind::global || cls->role != pickle_role::klass)
      fail("NEWOBJ of " + describe(*cls) + ", not of an allowed class");
    return object(cls, args);
  }
  // The memo as a vector: Python's pickler numbers its entries 0, 1, 2, ..., so an index is
  // below the number of opcodes, hence below the pickle's size; a larger one is refused.
  void put(std::uint32_t i) {
    if (i >= opt_.limits.max_memo) fail("more than " + std::to_string(opt_.limits.max_memo) + " memo entries (index " + std::to_string(i) + ")");
    if (i >= in_.size()) fail("memo index " + std::to_string(i) + " is beyond the pickle's " + std::to_string(in_.size()) + " bytes");
    if (i >= memo_.size()) memo_.resize(std::size_t{i} + 1, nullptr);
    if (!memo_[i]) ++memo_count_;
    memo_[i] = top();
  }
  void get(std::uint32_t i) {
    if (i >= memo_.size() || !memo_[i]) fail("memo entry " + std::to_string(i) + " was never stored");
    push(memo_[i]);
  }
  pickle_document stop() {
    if (!marks_.empty()) fail("STOP with a MARK open");
    if (stack_.size() != 1) fail("STOP with " + std::to_string(stack_.size()) + " values on the stack, not 1");
    if (at_ != in_.size()) fail(std::to_string(in_.size() - at_) + " bytes after STOP");
    doc_.root_ = stack_.back();
    return std::move(doc_);
  }

  std::span<const std::byte> in_;
  std::string_view file_;
  pickle_options opt_;
  std::size_t at_ = 0, op_at_ = 0;
  std::vector<pickle_node*> stack_;
  std::vector<std::size_t> marks_;
  std::vector<pickle_node*> memo_;
  std::size_t memo_count_ = 0;
  pickle_node *none_ = nullptr, *true_ = nullptr, *false_ = nullptr, *empty_tuple_ = nullptr;
  std::array<pickle_node*, 256> small_{};
  pickle_document doc_;
};
}  // namespace detail

/// Decodes the pickle `bytes`; `file` names it in errors ("<file>: pickle: <reason> (byte N)").
/// @post the result's nodes are plain values and allow-listed globals only; nothing was run.
inline pickle_document unpickle(std::span<const std::byte> bytes, std::string_view file,
                                const pickle_options& options = {}) {
  return detail::pickle_reader(bytes, file, options).run();
}

}  // namespace reshard::io
