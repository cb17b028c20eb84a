// reshard/io/tensor_sink.hpp: where the plan executor (plan_executor.hpp) puts the tensors of one
// target of a checkpoint plan. One interface, five sinks:
//
//   target_file_sink   the target's files: a ckpt or safetensors file, a Hugging Face
//                      checkpoint (shards, then the index), or a target rank's data file of a
//                      PyTorch DCP checkpoint (each item one torch.save archive: dcp_writer.hpp),
//                      written to staged paths (staging.hpp)
//   memory_sink        memory that a tensor_allocator gives (load_checkpoint_by_rank)
//   compare_sink       compares the bytes with an existing file's, in chunks (verify)
//
// The executor calls, per target: open_file(k) before the first item of each file k of the
// target (plan_item::file), then per item begin(), append() (or direct() then append() of the
// bytes it assembled there), end(), or copy_serialized() for a byte-exact ckpt copy; and
// finish() once all items are in.
#pragma once

#include <reshard/error.hpp>
#include <reshard/layout.hpp>
#include <reshard/io/checkpoint.hpp>
#include <reshard/io/checkpoint_plan.hpp>
#include <reshard/io/ckpt.hpp>
#include <reshard/io/crc32.hpp>
#include <reshard/io/dcp_writer.hpp>
#include <reshard/io/hf.hpp>
#include <reshard/io/input_file.hpp>
#include <reshard/io/atomic_file.hpp>
#include <reshard/io/safetensors.hpp>
#include <reshard/io/sha256.hpp>
#include <reshard/io/summary.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace reshard::io {

/// Where load_checkpoint_by_rank (transform_job::load) puts each parameter: called once per
/// parameter, in the target's order, with the target rank, the parameter's name, dtype, dims
/// (empty for a scalar) and size in bytes; returns writable memory of exactly `bytes` bytes,
/// which the engine fills. Calls are serialized. An exception thrown here abandons the load.
using tensor_allocator = std::function<std::span<std::byte>(index_t rank, std::string_view name, dtype type,
                                                            std::span<const std::int64_t> dims, std::uint64_t bytes)>;

/// The receiving end of one target's tensors (see the header comment for the call order).
class tensor_sink {
 public:
  virtual ~tensor_sink() = default;
  /// The next items go to file k of the target (0, 1, ... in order; called before the first).
  virtual void open_file(std::size_t /*k*/) {}
  virtual void begin(std::string_view name, dtype type, std::span<const std::int64_t> dims, std::uint64_t bytes) = 0;
  /// Where the next n bytes of the current tensor may be assembled in place (then append()ed
  /// from there), or nullptr: the executor assembles them in its buffer.
  virtual std::byte* direct(std::size_t /*n*/) { return nullptr; }
  virtual void append(std::span<const std::byte> bytes) = 0;
  virtual void end() {}
  /// Copies a ckpt entry's serialized Values byte-exact under `name` (a raw copy from a ckpt
  /// source); false when this sink takes tensors by content only.
  virtual bool copy_serialized(const ckpt_entry& /*entry*/, std::string_view /*name*/) { return false; }
  /// All items are in: commits the file(s).
  virtual void finish() {}
};

// ---------------------------------------------------------------------------------------------
// files

/// How a target's files are written.
struct file_sink_options {
  bool crc = false;                                  ///< ckpt: the crc_num trailer
  std::uint64_t chunk_bytes = ckpt_chunk_bytes;      ///< ckpt: piece size
  io::durability durability = io::durability::deferred;
  io::write_mode writes = io::write_mode::buffered;  ///< resolved (resolve_write_mode): buffered or direct
  bool digests = false;                              ///< SHA-256 of every file (written_file::sha256)
};

/// Writes one plan target to `staged` (the staged path of each of its files, plan_target::files'
/// order): a ckpt or safetensors file, or a Hugging Face checkpoint's shards and index. After
/// finish(), records() describes the files (by their final paths).
class target_file_sink final : public tensor_sink {
 public:
  target_file_sink(const plan_target& t, std::vector<std::filesystem::path> staged, file_sink_options o)
      : t_(t), staged_(std::move(staged)), o_(o) {
    RESHARD_EXPECTS(staged_.size() == t_.files.size(), "target_file_sink: one staged path per file");
  }

  void open_file(std::size_t k) override {
    if (st_) st_->commit(), close_record(st_->size(), st_->file());
    RESHARD_EXPECTS(k == records_.size(), "target_file_sink: files opened out of order");
    written_file& rec = records_.emplace_back();
    rec.path = t_.files[k];
    digest_.emplace();
    std::function<void(std::span<const std::byte>)> on_write;
    if (o_.digests) on_write = [d = &*digest_](std::span<const std::byte> b) { d->update(b); };
    std::vector<safetensors_tensor_info> infos;
    for (const plan_item& it : t_.items) {
      if (it.file != k) continue;
      rec.tensors.push_back({it.name, it.to, it.dims});
      infos.push_back({it.name, it.to, it.scalar ? std::vector<std::int64_t>{} : it.dims});
    }
    if (t_.format == checkpoint_format::dcp) {
      dcp_.emplace(staged_[k], true, "dcp", o_.durability, o_.writes);
      if (on_write) dcp_->observe(std::move(on_write));
      opened_buffered_ = o_.writes == write_mode::direct && !dcp_->direct();
      return;
    }
    if (t_.format == checkpoint_format::ckpt) {
      ckpt_.emplace(staged_[k], ckpt_write_options{.crc = o_.crc,
                                                   .chunk_bytes = o_.chunk_bytes,
                                                   .overwrite = true,
                                                   .durability = o_.durability,
                                                   .writes = o_.writes,
                                                   .on_write = std::move(on_write)});
      opened_buffered_ = o_.writes == write_mode::direct && !ckpt_->file().direct();
      return;
    }
    safetensors_write_options so{.metadata = {{"format", t_.safetensors_format}},
                                 .order = t_.format == checkpoint_format::hf ? safetensors_order::dtype
                                                                             : safetensors_order::name,
                                 .overwrite = true,
                                 .durability = o_.durability,
                                 .writes = o_.writes,
                                 .on_write = std::move(on_write)};
    st_.emplace(staged_[k], std::move(infos), std::move(so));
    opened_buffered_ = o_.writes == write_mode::direct && !st_->file().direct();
  }
  void begin(std::string_view name, dtype type, std::span<const std::int64_t> dims, std::uint64_t bytes) override {
    if (ckpt_) ckpt_->begin(name, type, dims, bytes);
    if (!dcp_) return;
    // a torch.save archive: its head, the bytes as they come (their CRC-32 kept), its tail
    head_ = torch_archive_head_of(type, dims);
    dcp_->write(head_.bytes);
    tensor_bytes_ = bytes;
    crc_ = 0;
  }
  void append(std::span<const std::byte> b) override {
    if (ckpt_)
      ckpt_->append(b);
    else if (dcp_)
      dcp_->write(b), crc_ = crc32(b, crc_);
    else
      st_->append(b);
  }
  void end() override {
    if (ckpt_) ckpt_->end();
    if (dcp_) dcp_->write(torch_archive_tail(head_, tensor_bytes_, crc_));
  }
  bool copy_serialized(const ckpt_entry& e, std::string_view name) override {
    if (!ckpt_) return false;
    if (name == e.name)
      ckpt_->write_raw(e);
    else
      ckpt_->write_raw(e, name);
    return true;
  }
  void finish() override {
    if (ckpt_) ckpt_->commit(), close_record(ckpt_->size(), ckpt_->file());
    if (st_) st_->commit(), close_record(st_->size(), st_->file());
    if (dcp_) copy_byte_items(), dcp_->commit(), close_record(dcp_->size(), *dcp_);
    ckpt_.reset();
    st_.reset();
    dcp_.reset();
    if (t_.format != checkpoint_format::hf || t_.files.size() <= records_.size()) return;
    // the index of a sharded Hugging Face checkpoint, last
    std::map<std::string, std::string> weight_map;
    std::uint64_t total = 0;
    const std::size_t shards = records_.size();
    for (const plan_item& it : t_.items) {
      weight_map.emplace(it.name, hf_shard_name(it.file, shards));
      total += it.bytes;
    }
    const std::string text = hf_index_json(total, weight_map);
    const std::size_t k = records_.size();
    atomic_file_writer w(staged_[k], true, "hf", o_.durability, o_.writes);
    sha256 d;
    if (o_.digests) w.observe([&d](std::span<const std::byte> b) { d.update(b); });
    opened_buffered_ = o_.writes == write_mode::direct && !w.direct();
    w.write(text);
    w.commit();
    records_.push_back({t_.files[k], text.size(), o_.digests ? d.hex() : std::string(), {}});
    note_fallback(w);
  }

  /// The files written, in order (after finish()).
  std::vector<written_file>& records() noexcept { return records_; }
  /// Of those, the files written buffered though direct writes were asked (write_mode::direct):
  /// the filesystem refused O_DIRECT when the file was opened or at a write
  /// (atomic_file_writer::direct_refused()).
  std::size_t direct_refused_files() const noexcept { return direct_refused_files_; }

 private:
  // A DCP target's byte items (plan_target::byte_items) after its tensors, copied as stored, in
  // pieces of 64 KiB.
  void copy_byte_items() {
    std::vector<std::byte> buf;
    for (const plan_byte_item& b : t_.byte_items) {
      const input_file in(b.file, "dcp");  // opened and read as every source is (input_file.hpp)
      if (b.offset > in.size() || b.bytes > in.size() - b.offset)
        report_error("dcp: " + b.file.string() + ": byte item " + detail::quote_name(b.name) + ": cannot read " +
                     std::to_string(b.bytes) + " bytes at " + std::to_string(b.offset) + " (the file changed since the plan?)");
      for (std::uint64_t done = 0; done < b.bytes;) {
        buf.resize(static_cast<std::size_t>(std::min<std::uint64_t>(b.bytes - done, 64 << 10)));
        in.pread_exact(buf, b.offset + done);
        dcp_->write(buf);
        done += buf.size();
      }
    }
  }
  // `bytes`: what the writer `w` wrote, the file's size
  void close_record(std::uint64_t bytes, const atomic_file_writer& w) {
    written_file& rec = records_.back();
    rec.bytes = bytes;
    if (o_.digests) rec.sha256 = digest_->hex();
    note_fallback(w);
  }
  void note_fallback(const atomic_file_writer& w) noexcept {
    if (opened_buffered_ || w.direct_refused()) ++direct_refused_files_;
    opened_buffered_ = false;
  }

  const plan_target& t_;
  std::vector<std::filesystem::path> staged_;
  file_sink_options o_;
  std::optional<ckpt_writer> ckpt_;
  std::optional<safetensors_writer> st_;
  std::optional<atomic_file_writer> dcp_;  // a DCP data file: torch.save archives one after another
  torch_archive_head head_;                // of the current item
  std::uint64_t tensor_bytes_ = 0;
  std::uint32_t crc_ = 0;
  std::optional<sha256> digest_;
  std::vector<written_file> records_;
  bool opened_buffered_ = false;           // direct asked, the current file's writer buffered from its start
  std::size_t direct_refused_files_ = 0;   // direct_refused_files()
};

// ---------------------------------------------------------------------------------------------
// memory

/// Puts each tensor of target `rank` into the memory `allocate` gives, assembled in place. With
/// `serial`, the calls of `allocate` (from the sinks of several jobs) hold it. Memory of another
/// size than the tensor's is an error after `op`.
class memory_sink final : public tensor_sink {
 public:
  memory_sink(const tensor_allocator& allocate, index_t rank, std::mutex* serial = nullptr, std::string op = "load")
      : allocate_(allocate), rank_(rank), serial_(serial), op_(std::move(op)) {}
  void begin(std::string_view name, dtype type, std::span<const std::int64_t> dims, std::uint64_t bytes) override {
    {
      std::unique_lock<std::mutex> lock;
      if (serial_) lock = std::unique_lock<std::mutex>(*serial_);
      tensor_ = allocate_(rank_, name, type, dims, bytes);
    }
    if (tensor_.size() != bytes)
      report_error(op_ + ": parameter " + detail::quote_name(name) + ": the allocator returned " +
                   std::to_string(tensor_.size()) + " bytes for a tensor of " + std::to_string(bytes));
    filled_ = 0;
  }
  std::byte* direct(std::size_t n) override {
    RESHARD_EXPECTS(n <= tensor_.size() - filled_, "memory_sink: a tensor overflows its memory");
    return tensor_.data() + filled_;
  }
  void append(std::span<const std::byte> b) override {
    RESHARD_EXPECTS(b.size() <= tensor_.size() - filled_, "memory_sink: a tensor overflows its memory");
    if (b.data() != tensor_.data() + filled_ && !b.empty()) std::memcpy(tensor_.data() + filled_, b.data(), b.size());
    filled_ += b.size();
  }
  void end() override { RESHARD_EXPECTS(filled_ == tensor_.size(), "memory_sink: a tensor's memory is not filled"); }

 private:
  const tensor_allocator& allocate_;
  index_t rank_;
  std::mutex* serial_;
  std::string op_;
  std::span<std::byte> tensor_;
  std::size_t filled_ = 0;
};

// ---------------------------------------------------------------------------------------------
// comparison

/// Compares each tensor with the one of the same name in `file` (verify), in the chunks the
/// executor makes; the pages of the file compared are released after each chunk. Records each
/// difference in `found` (the first differing element of a tensor, a missing, differently typed
/// or shaped one), and after finish() the file's tensors that no item made.
class compare_sink final : public tensor_sink {
 public:
  compare_sink(const checkpoint_reader& file, std::vector<verify_mismatch>& found) : rd_(file), found_(found) {}

  void begin(std::string_view name, dtype type, std::span<const std::int64_t> dims, std::uint64_t bytes) override {
    name_ = std::string(name);
    seen_.insert(name_);
    at_ = 0;
    elem_ = element_size(type);
    e_ = rd_.find(name);
    if (!e_) return differ("missing");
    if (e_->type != type)
      return differ("dtype " + std::string(ms_name(e_->type)) + ", expected " + std::string(ms_name(type)));
    if (!std::equal(e_->dims.begin(), e_->dims.end(), dims.begin(), dims.end()))
      return differ("dims " + detail::format_dims(e_->dims) + ", expected " +
                    detail::format_dims(std::vector<std::int64_t>(dims.begin(), dims.end())));
    if (e_->content_size() != bytes)
      return differ(std::to_string(e_->content_size()) + " bytes, expected " + std::to_string(bytes));
    starts_.clear();
    std::uint64_t at = 0;
    for (auto q : e_->pieces) starts_.push_back(at), at += q.size();
  }
  void append(std::span<const std::byte> b) override {
    const std::uint64_t at = at_;
    at_ += b.size();
    if (!e_ || b.empty()) return;
    scratch_.resize(b.size());
    std::byte* out = scratch_.data();
    for_each_stored(at, b.size(), [&](std::span<const std::byte> r) {
      std::memcpy(out, r.data(), r.size());
      out += r.size();
      detail::release_pages(r);
    });
    bytes_ += b.size();
    if (std::memcmp(scratch_.data(), b.data(), b.size()) == 0) return;
    std::size_t i = 0;
    while (scratch_[i] == b[i]) ++i;
    differ("differs from element " + std::to_string((at + i) / elem_) + " (byte " + std::to_string(at + i) + ")");
  }
  void finish() override {
    for (const auto& e : rd_.entries())
      if (!seen_.count(e.name)) found_.push_back({rd_.path(), e.name, "not expected (no source makes it)"});
  }

  std::uint64_t bytes_compared() const noexcept { return bytes_; }

  /// The file `path` opened and its crc_num trailer checked, to be compared; or null, with why
  /// not in `found` (a missing or unreadable file).
  static std::unique_ptr<checkpoint_reader> open(const std::filesystem::path& path, std::vector<verify_mismatch>& found) {
    try {
      std::error_code ec;
      if (!std::filesystem::exists(path, ec)) {
        found.push_back({path, {}, "missing file"});
        return nullptr;
      }
      auto rd = std::make_unique<checkpoint_reader>(path);
      rd->verify_crc();
      return rd;
    } catch (const reshard::error& e) {
      found.push_back({path, {}, std::string("cannot be read: ") + e.what()});
      return nullptr;
    }
  }

 private:
  void differ(std::string what) {
    found_.push_back({rd_.path(), name_, std::move(what)});
    e_ = nullptr;
  }
  // f(span) for the stored bytes of [offset, offset + len) of the current tensor
  template <class F>
  void for_each_stored(std::uint64_t offset, std::uint64_t len, F&& f) {
    std::size_t k = static_cast<std::size_t>(std::upper_bound(starts_.begin(), starts_.end(), offset) - starts_.begin()) - 1;
    while (len > 0) {
      const std::uint64_t in = offset - starts_[k];
      const std::uint64_t n = std::min<std::uint64_t>(len, e_->pieces[k].size() - in);
      f(e_->pieces[k].subspan(static_cast<std::size_t>(in), static_cast<std::size_t>(n)));
      offset += n;
      len -= n;
      ++k;
    }
  }

  const checkpoint_reader& rd_;
  std::vector<verify_mismatch>& found_;
  std::set<std::string, std::less<>> seen_;
  const tensor_ref* e_ = nullptr;  // the current tensor in the file (null: skip)
  std::vector<std::uint64_t> starts_;
  std::uint64_t at_ = 0, bytes_ = 0;
  std::size_t elem_ = 1;
  std::string name_;
  std::vector<std::byte> scratch_;
};

}  // namespace reshard::io
