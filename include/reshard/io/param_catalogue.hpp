// reshard/io/param_catalogue.hpp: the parameter catalogue of a checkpoint transform: which
// parameters each target rank gets, from which source files and under which names, with their
// shapes, dtypes and layouts, checked against the files that hold them. It owns the strategies
// (as layouts), the source files and their readers; the planner (engine.hpp, transform_job)
// walks it once per target to make the checkpoint plan.
//
// Which parameters a target rank t gets, and from where (M source ranks):
//   * listed in the source strategy: sliced by the target strategy's layout for t's stage (a
//     parameter that the target strategy lists only for other stages is not written to t); the
//     data come from the source strategy's lowest stage that lists it, by the transfers to t of
//     the plan of transform_replica_policy (rank_planner, plan.hpp: the core's planner; each
//     target reads a replicated slice from the source rank nearest to it). A
//     parameter the target strategy does not list at all (or no target strategy) is written
//     whole: its target layout is the whole tensor on each target rank;
//   * not listed in the source strategy (learning_rate, global_step, ...): taken from source
//     rank t % M, byte-exact; if the target strategy lists it, t gets the slice of it that its
//     layout says.
//
// A PyTorch DCP checkpoint as the source (dcp_source) has no strategy: its `.metadata` gives each
// tensor's chunks, and the chunks are its layout. Its data files are the source ranks (in
// dcp_data_files order); a tensor's chunks, each a box of the full tensor in the file that stores
// it (a file may store several), must tile the tensor (no gap, no overlap). A target's pieces of
// such a tensor are its box intersected with each chunk: boxes, not a device matrix, so chunks
// that are no grid (FSDP's flat ones) are read as exactly. Every tensor is sliced (none is a raw
// copy); a tensor the target strategy does not list is written whole. What is the DCP source's
// own is its type's (dcp_source::resolve_chunks, check_chunks); a target's pieces of any
// parameter are one free function (catalogue_pieces), which the catalogue calls.
//
// Cost: a source file is opened (its index read) only when a target reads it or a shape is
// taken from it; planning is O(M + N) per parameter and stage, then O(pieces) per target.
#pragma once

#include <reshard/box.hpp>
#include <reshard/error.hpp>
#include <reshard/layout.hpp>
#include <reshard/partition.hpp>
#include <reshard/plan.hpp>
#include <reshard/io/checkpoint.hpp>
#include <reshard/io/checkpoint_plan.hpp>
#include <reshard/io/dcp.hpp>
#include <reshard/io/detail/text.hpp>
#include <reshard/io/name_rules.hpp>
#include <reshard/io/strategy_layouts.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace reshard::io {
namespace detail {

// Where one target stage of a parameter lives: its layout, its partition, and the plan from the
// source layout (none when the source strategy does not list the parameter).
struct target_plan {
  std::uint32_t stage = 0;
  layout dst;
  partition part;                      // of dst, arithmetic: boxes of ranks
  std::optional<rank_planner> planner;  // source layout -> dst
};

// A parameter to be sliced: its layouts and what the sources hold.
struct param_info {
  std::string name;
  const std::vector<staged_layout>* src_entries = nullptr;  // null: not listed in the source strategy
  const std::vector<staged_layout>* dst_entries = nullptr;  // null: not listed in the target strategy
  bool resolved = false;
  index_list shape;
  bool scalar = false;
  std::vector<std::int64_t> scalar_dims;  // how the source writes the scalar's dims
  bool type_known = false;
  dtype type = dtype::uint8;
  std::string type_file;
  std::optional<layout> src;  // listed in the source strategy: its layout (lowest stage)
  std::vector<target_plan> dst;        // per target stage
  std::optional<partition> src_part;   // of src, arithmetic: each source rank's box, no O(M) tables
  std::optional<rank_planner> whole;   // listed in the source strategy only: src -> whole_on_targets
  std::vector<bool> checked;  // by source rank: its entry was checked (sized on first use)
  const dcp_tensor* chunked = nullptr;  // a DCP source's tensor: its chunks are its layout
  rank_boxes boxes;  // chunked: every (source rank, chunk box), as sort_by_rank orders them
  std::uint64_t walk = 0;  // for_each_item: the last walk that met it in a base file
};

// One parameter of one target file.
struct out_item {
  param_info* p = nullptr;          // sliced; null for a raw copy
  const tensor_ref* raw = nullptr;  // raw copy (or the unlisted source of a sliced parameter)
  const target_plan* dst = nullptr;  // null: the whole tensor
  index_t base = 0;                 // source rank t % M
  std::string_view out;             // the output name (name_rules), when it differs
  std::string_view source_name() const { return p ? std::string_view(p->name) : std::string_view(raw->name); }
  std::string_view name() const { return out.empty() ? source_name() : out; }
};

/// A piece of a target's box of a sliced parameter: the source rank it is read from, the
/// piece's box, and the box that rank's file holds (what for_each_item's items are cut into).
struct catalogue_piece {
  index_t rank;
  box where;
  box held;
};

/// The lowest owner of source region k of `ps` whose file was given (in `files`); -1 if none.
inline index_t available_owner(const partition& ps, index_t k, const std::map<index_t, std::filesystem::path>& files) {
  std::vector<index_t> buf;
  for (index_t o : ps.owners_of(k, buf))
    if (files.count(o) != 0) return o;
  return -1;
}

/// The pieces of target t's box `tb` of sliced item `it`: (source rank, piece box, source rank's
/// box). A DCP tensor's: the box cut by the chunks that meet it. Otherwise the transfers to t of
/// the parameter's plan (the one planner, rank_planner, with the one replica policy,
/// transform_replica_policy), as pieces. A
/// planned sender whose file was not given (in `files`: by-rank transforms given other files
/// than rank_list_for_transform names) is replaced by the lowest owner of the same region whose
/// file was given: the same bytes. `op` starts the message when none was given. The pieces
/// replace `out`'s; `xs` is scratch (both kept by the caller, so that the items of thousands of
/// targets reuse one allocation).
inline void catalogue_pieces(const out_item& it, index_t t, const box& tb,
                             const std::map<index_t, std::filesystem::path>& files, const std::string& op,
                             std::vector<catalogue_piece>& out, std::vector<transfer>& xs) {
  out.clear();
  const param_info& p = *it.p;
  if (p.chunked) {  // the box cut by the chunks that meet it
    for (const auto& [r, b] : p.boxes) {
      const box in = intersect(b, tb);
      if (volume(in) > 0) out.push_back({r, in, b});
    }
    return;
  }
  if (!p.src) {  // not listed in the source strategy: whole in the base file t % M
    out.push_back({it.base, tb, box{index_list(p.shape.size(), 0), p.shape}});
    return;
  }
  const rank_planner& rp = it.dst ? *it.dst->planner : *p.whole;
  xs.clear();
  rp.receives(t, xs);
  out.reserve(xs.size());
  // a file for every rank 0 .. the source layout's last (distinct keys from 0 to it): none replaced
  const index_t end = rp.source().first_rank + rp.source().ranks;
  const bool every_file = !files.empty() && files.begin()->first == 0 && files.rbegin()->first == end - 1 &&
                          files.size() == static_cast<std::size_t>(end);
  for (transfer& x : xs) {
    index_t r = x.src;
    if (!every_file && files.count(r) == 0) r = available_owner(rp.source(), rp.source().region_of(r), files);
    if (r < 0) {
      std::vector<index_t> buf;
      std::string ranks;
      for (index_t o : rp.source().owners_of(rp.source().region_of(x.src), buf)) {
        if (!ranks.empty()) ranks += ',';
        ranks += std::to_string(o);  // appended, not "," + ...: GCC 12 -O3 -Wrestrict
      }
      report_error(op + ": target rank " + std::to_string(t) + " needs the box " + to_string(x.where) +
                   " of parameter " + detail::quote_name(p.name) + " from one of the source ranks " + ranks +
                   ", but no file was given for any of them (rank_list_for_transform lists the files a rank needs)");
    }
    out.push_back({r, std::move(x.where), rp.source().box_of_rank(r)});
  }
}

/// A PyTorch DCP checkpoint as the source of a transform (instead of a strategy and rank files).
struct dcp_source {
  std::filesystem::path dir;
  std::shared_ptr<const dcp_metadata> metadata;
  std::vector<std::string> files;  ///< its data files (dcp_data_files): index = source rank

  /// Reads `dir/.metadata`.
  explicit dcp_source(std::filesystem::path d)
      : dir(std::move(d)), metadata(std::make_shared<const dcp_metadata>(read_dcp_metadata(dir))),
        files(dcp_data_files(*metadata)) {
    for (std::size_t r = 0; r < files.size(); ++r) ranks_.emplace(files[r], static_cast<index_t>(r));
  }
  /// The source rank of the data file `relative` (one the metadata names).
  index_t rank_of(const std::string& relative) const {
    const auto it = ranks_.find(relative);
    RESHARD_EXPECTS(it != ranks_.end(), "dcp_source: a file the metadata does not name");
    return it->second;
  }
  /// The data files by source rank.
  std::map<index_t, std::filesystem::path> rank_files() const {
    std::map<index_t, std::filesystem::path> out;
    for (std::size_t r = 0; r < files.size(); ++r) out.emplace(static_cast<index_t>(r), dir / files[r]);
    return out;
  }
  /// The byte items, which no format but DCP holds: one warning naming them, or none.
  std::vector<std::string> byte_item_warnings(std::string_view written) const {
    if (metadata->byte_items.empty()) return {};
    std::string names;
    for (const auto& b : metadata->byte_items) names += (names.empty() ? "" : ", ") + quote_name(b.fqn);
    return {dir.string() + ": the DCP byte item" + (metadata->byte_items.size() == 1 ? " " : "s ") + names +
            " (pickled Python objects, not tensors) cannot be written to " + std::string(written) + ": left out"};
  }

  /// A tensor of the metadata as the catalogue's parameter p (p.chunked): its shape and dtype
  /// from the metadata, its chunks as boxes of the files that store them (p.boxes, by rank),
  /// which must tile it (no overlap, no gap); `op` starts the messages.
  void resolve_chunks(param_info& p, const std::string& op) const {
    const dcp_tensor& t = *p.chunked;
    const std::string who = op + ": " + dcp_metadata_path(dir).string() + ": tensor " + detail::quote_name(t.fqn);
    p.type = t.type;
    p.type_known = true;
    p.type_file = dcp_metadata_path(dir).string();
    p.scalar = t.size.empty();
    p.shape = index_list(t.size.begin(), t.size.end());
    std::vector<plan_transfer> chunks;  // as boxes, for the overlap check plans get
    std::uint64_t covered = 0;
    for (const auto& c : t.chunks) {
      const box b{index_list(c.offsets.begin(), c.offsets.end()), index_list(c.sizes.begin(), c.sizes.end())};
      const index_t r = rank_of(c.storage.relative_path);
      p.boxes.emplace_back(r, b);
      chunks.push_back({r, b, 0});
      covered += static_cast<std::uint64_t>(volume(b));
    }
    if (const auto twice = detail::first_overlap(chunks))
      report_error(who + ": the chunks " + to_string(chunks[twice->first].where) + " and " + to_string(chunks[twice->second].where) +
                   " overlap (in " + files[static_cast<std::size_t>(chunks[twice->first].rank)] + " and " +
                   files[static_cast<std::size_t>(chunks[twice->second].rank)] + ")");
    if (covered != static_cast<std::uint64_t>(volume(p.shape)))
      report_error(who + ": its chunks hold " + std::to_string(covered) + " of its " + std::to_string(volume(p.shape)) +
                   " elements " + format_dims(t.size) + " (a gap: the checkpoint is incomplete)");
    sort_by_rank(p.boxes);
  }
  /// The file of source rank r (`rd`, whose reader took its chunks from the metadata, each
  /// checked against its archive) stores every chunk of p that p.boxes place there.
  void check_chunks(const param_info& p, index_t r, const checkpoint_reader& rd, const std::string& op) const {
    for (const auto& [rank, b] : held_boxes(p.boxes, r))
      if (!rd.find(p.name, b))
        report_error(op + ": " + rd.path().string() + ": tensor " + detail::quote_name(p.name) + ": no chunk stored at " +
                     to_string(b));
  }

 private:
  std::map<std::string, index_t, std::less<>> ranks_;  // file -> source rank
};

/// One target file of a transform_job: the target rank and the file to write.
struct transform_target {
  index_t rank = 0;
  std::filesystem::path path;
};

/// The parameters of a transform's targets (see the header comment). Not thread-safe: the
/// planner uses it before any job starts; the readers it opened are then only read.
class parameter_catalogue {
 public:
  /// `files`: source rank -> its file; `targets`: the target files; `op` names the workflow in
  /// messages.
  parameter_catalogue(strategy_layouts src, strategy_layouts dst, std::map<index_t, std::filesystem::path> files,
                      std::vector<transform_target> targets, std::string op)
      : src_(std::move(src)), dst_(std::move(dst)), files_(std::move(files)), targets_(std::move(targets)),
        op_(std::move(op)), M_(src_.ranks()), N_(dst_.ranks()) {}

  /// From a DCP checkpoint (its data files the source ranks) to `dst`.
  parameter_catalogue(dcp_source src, strategy_layouts dst, std::vector<transform_target> targets, std::string op)
      : dst_(std::move(dst)), files_(src.rank_files()), targets_(std::move(targets)), op_(std::move(op)),
        M_(static_cast<index_t>(src.files.size())), N_(dst_.ranks()), dcp_(std::move(src)) {
    if (M_ == 0) report_error(op_ + ": " + dcp_->dir.string() + ": the DCP checkpoint stores no item in any data file");
  }

  /// The DCP checkpoint read, if the source is one.
  const dcp_source* dcp() const noexcept { return dcp_ ? &*dcp_ : nullptr; }
  index_t source_ranks() const noexcept { return M_; }
  index_t target_ranks() const noexcept { return N_; }
  const std::map<index_t, std::filesystem::path>& files() const noexcept { return files_; }
  /// The source files opened so far, by rank.
  const std::map<index_t, std::unique_ptr<checkpoint_reader>>& readers() const noexcept { return readers_; }
  /// Source ranks to take parameter shapes from first (the files these targets read anyway);
  /// without a hint a shape comes from the lowest rank of its stage that has a file.
  void set_shape_hint(std::set<index_t> ranks) { shape_hint_ = std::move(ranks); }

  using piece = catalogue_piece;

  std::string source_desc() const {
    if (dcp_) return "the DCP checkpoint " + dcp_->dir.string() + " (" + std::to_string(M_) + " data file" + (M_ == 1 ? ")" : "s)");
    return src_.present() ? "the source strategy " + src_.source() : "the source (no strategy: one unsplit rank)";
  }
  std::string target_desc() const {
    return dst_.present() ? "the target strategy " + dst_.source() : "the target (no strategy: one unsplit rank)";
  }

  bool available(index_t r) const { return files_.count(r) != 0; }

  const checkpoint_reader& open(index_t r) {
    auto it = readers_.find(r);
    if (it != readers_.end()) return *it->second;
    auto f = files_.find(r);
    RESHARD_EXPECTS(f != files_.end(), "transform: open: no file for the rank");
    auto rd = std::make_unique<checkpoint_reader>(f->second, dcp_ ? dcp_->metadata : nullptr);
    return *readers_.emplace(r, std::move(rd)).first->second;
  }

  // The parameters to slice (params_), from the strategies and the targets' base files; the
  // selection and output names by `rules`; a target strategy's parameter that no source has is a
  // warning.
  void collect(const name_rules& rules, std::vector<std::string>& warnings) {
    if (collected_) return;
    collected_ = true;
    for (const auto& t : targets_) {
      const index_t base = t.rank % M_;
      if (!available(base))
        report_error(op_ + ": target rank " + std::to_string(t.rank) + " needs source rank " + std::to_string(base) +
                     " (rank " + std::to_string(t.rank) + " % " + std::to_string(M_) +
                     ": the parameters no strategy lists, such as learning_rate and global_step, come from "
                     "there), but no file was given for it");
      open(base);
    }
    apply_name_rules(rules);
    // A DCP checkpoint's tensors: each sliced by its chunks.
    if (dcp_)
      for (const auto& t : dcp_->metadata->tensors) {
        if (!selected(t.fqn)) continue;
        auto& p = params_[t.fqn];
        p.name = t.fqn;
        p.chunked = &t;
        p.dst_entries = dst_.present() ? dst_.find(output_name(t.fqn)) : nullptr;
      }
    // Sliced parameters listed in the source strategy.
    for (const auto& name : src_.names()) {
      if (!selected(name)) continue;
      auto& p = params_[name];
      p.name = name;
      p.src_entries = src_.find(name);
      p.dst_entries = dst_.present() ? dst_.find(output_name(name)) : nullptr;
    }
    // Parameters of the base files that only the target strategy lists.
    for (const auto& t : targets_) {
      if (dcp_) break;  // every tensor of a DCP checkpoint is above
      const auto& rd = open(t.rank % M_);
      for (const auto& e : rd.entries()) {
        if (!selected(e.name) || src_.find(e.name) || !dst_.present() || !dst_.find(output_name(e.name))) continue;
        auto& p = params_[e.name];
        p.name = e.name;
        p.dst_entries = dst_.find(output_name(e.name));
      }
    }
    if (dst_.present()) {
      std::set<std::string_view> outputs;
      for (const auto& [name, p] : params_) outputs.insert(output_name(name));
      for (const auto& name : dst_.names()) {
        if (outputs.count(name) || (names_ && names_->excluded.count(name))) continue;
        warnings.push_back("parameter " + quote_name(name) + " of the target strategy " + dst_.source() +
                            " is in no source (not in the source strategy, nor in the source file of rank " +
                            std::to_string(targets_.empty() ? 0 : targets_.front().rank % M_) + "): not written");
      }
    }
  }

  // Every source file opened holds every listed parameter of its stage with the dtype and the
  // dims the strategy says, whether or not this run reads that slice: a file that disagrees
  // with its strategy or with the other ranks is an error even when a replica could serve.
  void check_opened() {
    std::vector<index_t> ranks;
    for (const auto& [r, rd] : readers_) ranks.push_back(r);
    for (auto& [name, p] : params_) {
      if (!p.resolved || !p.src) continue;
      const index_t first = p.src->first_rank, last = first + num_ranks(*p.src);
      for (index_t r : ranks)
        if (r >= first && r < last) check_source(p, r);
    }
  }

  static std::string quote_name(std::string_view n) { return detail::quote_name(n); }

  // Every parameter of the sources that rules may name: the source strategy's and the targets'
  // base files' (name_rules and dtype_rules are checked against these).
  std::set<std::string, std::less<>> source_names() {
    std::set<std::string, std::less<>> all(src_.names().begin(), src_.names().end());
    if (dcp_) {
      for (const auto& t : dcp_->metadata->tensors) all.insert(t.fqn);
      return all;
    }
    std::set<index_t> bases;
    for (const auto& t : targets_) bases.insert(t.rank % M_);
    for (index_t b : bases)
      for (const auto& e : open(b).entries()) all.insert(e.name);
    return all;
  }

  // -- name_rules (name_rules.hpp)
  // Decides the selected parameters and their output names (names_), from every parameter of
  // the sources (the source strategy's and the targets' base files'), and checks the rules.
  void apply_name_rules(const name_rules& rules) {
    if (rules.empty()) return;
    names_ = select_names(rules, source_names(), op_);
    if (dst_.present())
      for (const auto& [from, to] : names_->renamed)
        if (from != to && !dst_.find(to))
          report_error(op_ + ": parameter " + quote_name(from) + " is renamed " + quote_name(to) +
                       ", which the target strategy " + dst_.source() + " does not list");
  }
  bool selected(std::string_view name) const { return !names_ || names_->selected(name); }
  std::string_view output_name(std::string_view name) const {
    return names_ ? names_->output_name(name) : name;
  }
  // it.out: the output name when it differs from the source's
  void name_item(out_item& it) const {
    const auto o = output_name(it.source_name());
    it.out = o == it.source_name() ? std::string_view() : o;
  }

  // Calls f(item) for each parameter target `t` gets, in output order: the base file's order,
  // then the other listed parameters in strategy order.
  template <class F>
  void for_each_item(index_t t, F&& f) {
    const index_t base = t % M_;
    const auto& rd = open(base);
    auto visit_listed = [&](param_info& p) {
      out_item it;
      it.p = &p;
      it.base = base;
      if (!slice_applies(p, t, it)) return;
      if (!p.src_entries && !p.chunked) it.raw = rd.find(p.name);
      name_item(it);
      f(it);
    };
    if (dcp_) {  // the metadata's order
      for (const auto& c : dcp_->metadata->tensors)
        if (selected(c.fqn)) visit_listed(params_.at(c.fqn));
      return;
    }
    const auto entries = rd.entries();
    if (entry_params_.size() < entries.size()) entry_params_.resize(entries.size(), nullptr);
    ++walks_;
    std::size_t listed = 0;  // the source strategy's parameters met among the entries
    for (std::size_t k = 0; k < entries.size(); ++k) {
      const auto& e = entries[k];
      if (!selected(e.name)) continue;
      // rank files list the same names in the same order: the parameter the previous base
      // file's entry k was is checked with one comparison before params_ is searched
      param_info*& known = entry_params_[k];
      if (!known || std::string_view(known->name) != std::string_view(e.name)) {
        const auto pit = params_.find(e.name);
        known = pit == params_.end() ? nullptr : &pit->second;
      }
      if (known) {
        if (known->src_entries && known->walk != walks_) known->walk = walks_, ++listed;
        visit_listed(*known);
      } else {
        out_item it;
        it.raw = &e;
        it.base = base;
        name_item(it);
        f(it);
      }
    }
    if (listed_ == npos)
      listed_ = static_cast<std::size_t>(std::count_if(params_.begin(), params_.end(), [](const auto& e) { return e.second.src_entries != nullptr; }));
    if (listed == listed_) return;  // every one is in the base file
    for (const auto& name : src_.names())
      if (selected(name) && !rd.find(name)) visit_listed(params_.at(name));
  }

  // Does sliced parameter p go to target t, and with which layout (it.dst)?
  bool slice_applies(param_info& p, index_t t, out_item& it) {
    if (!p.dst_entries) {
      it.dst = nullptr;  // whole tensor
      return true;
    }
    const std::uint32_t stage = dst_.stage_of(t);
    for (const auto& e : *p.dst_entries)
      if (e.stage == stage) {
        resolve(p);
        for (const auto& d : p.dst)
          if (d.stage == stage) it.dst = &d;
        return true;
      }
    return false;
  }

  std::string who_src(const std::string& name) const {
    return "strategy: " + src_.source() + ": parameter " + quote_name(name);
  }
  std::string who_dst(const std::string& name) const {
    return "strategy: " + dst_.source() + ": parameter " + quote_name(name);
  }

  // Derives p's full shape, dtype and layouts (once).
  void resolve(param_info& p) {
    if (p.resolved) return;
    const tensor_ref* shape_from = nullptr;
    std::string shape_file;
    if (p.chunked) {
      dcp_->resolve_chunks(p, op_);
      shape_file = dcp_metadata_path(dcp_->dir).string();
    } else if (p.src_entries) {
      const staged_layout& s = p.src_entries->front();
      detail::check_supported(s.stored, who_src(p.name) + ": ");
      const index_t n = src_.stage_ranks(), first = index_t{s.stage} * n;
      // the shape comes from the first file of the stage: of the shape hint's ranks, if any
      const auto take = [&](index_t r) {
        if (shape_from || !available(r)) return;
        const auto& rd = open(r);
        shape_from = rd.find(p.name);
        if (!shape_from)
          report_error(op_ + ": " + rd.path().string() + ": parameter " + quote_name(p.name) +
                       " is listed in the source strategy " + src_.source() + " (stage " + std::to_string(s.stage) +
                       ", ranks " + std::to_string(first) + ".." + std::to_string(first + n - 1) +
                       ") but missing from this checkpoint");
        shape_file = rd.path().string();
      };
      for (index_t r : shape_hint_)
        if (r >= first && r < first + n) take(r);
      for (index_t r = first; r < first + n && !shape_from; ++r) take(r);
      if (!shape_from)
        report_error(op_ + ": parameter " + quote_name(p.name) + " (stage " + std::to_string(s.stage) + " of " +
                     src_.source() + ") is held by source ranks " + std::to_string(first) + ".." +
                     std::to_string(first + n - 1) + ", but no file was given for any of them");
      check_tensor(*shape_from, shape_file, p);
      if (shape_from->is_scalar()) {
        p.scalar = true;
        p.scalar_dims = shape_from->dims;
        p.shape = {};
      } else if (!s.stored.tensor_shape.empty()) {
        p.shape = index_list(s.stored.tensor_shape.begin(), s.stored.tensor_shape.end());
      } else {
        p.shape = full_shape_from_slice(s.stored, shape_from->dims,
                                        who_src(p.name) + " (slice dims " + format_dims(shape_from->dims) + " in " +
                                            shape_file + ")");
      }
      p.src = to_layout(s.stored, p.shape, s.stage, who_src(p.name));
      p.src_part.emplace(*p.src, partition::mode::arithmetic);
    } else {
      // not listed in the source strategy: every source rank holds it whole; take the shape
      // from the first base file that has it
      for (const auto& t : targets_) {
        const auto& rd = open(t.rank % M_);
        if ((shape_from = rd.find(p.name))) {
          shape_file = rd.path().string();
          break;
        }
      }
      RESHARD_EXPECTS(shape_from != nullptr, "transform: resolve: an unlisted parameter without a source");
      check_tensor(*shape_from, shape_file, p);
      p.scalar = shape_from->is_scalar();
      if (p.scalar) p.scalar_dims = shape_from->dims;
      if (!p.scalar) p.shape = index_list(shape_from->dims.begin(), shape_from->dims.end());
    }
    if (p.dst_entries) {
      for (const auto& e : *p.dst_entries) {
        check_tensor_shape(
            e.stored, p.shape, op_ + ": " + who_dst(p.name),
            (p.src_entries ? "the source strategy and " : std::string()) + shape_file);
        target_plan& d = p.dst.emplace_back();
        d.stage = e.stage;
        d.dst = to_layout(e.stored, p.shape, e.stage, who_dst(p.name));
        d.part = partition(d.dst, partition::mode::arithmetic);
        if (p.src) d.planner.emplace(*p.src, d.dst, partition::mode::tabulated, transform_replica_policy);
      }
    } else if (p.src) {
      p.whole.emplace(*p.src, whole_on_targets(p.shape, N_), partition::mode::tabulated, transform_replica_policy);
    }
    p.resolved = true;
  }

  // A tensor the transform reads for p: a plain tensor of one dtype (the same in every file).
  void check_tensor(const tensor_ref& e, const std::string& file, param_info& p) {
    const auto who = [&] { return op_ + ": " + file + ": parameter " + quote_name(p.name) + ": "; };
    if (e.map_tensor)
      report_error(who() + "is a map tensor; a strategy cannot slice it (only unlisted map tensors are copied)");
    if (e.type == dtype::str)
      report_error(who() + "is a str tensor; a strategy cannot slice it (only unlisted str tensors are copied)");
    if (!p.type_known) {
      p.type = e.type;
      p.type_known = true;
      p.type_file = file;
    } else if (e.type != p.type) {
      report_error(who() + "dtype " + std::string(ms_name(e.type)) + " differs from " + std::string(ms_name(p.type)) +
                   " in " + p.type_file + " (mixed dtypes across ranks)");
    }
  }

  // Checks the source entry of p on source rank r (once per rank). `held`: the box of the full
  // tensor rank r holds, when the caller has it (a piece's: the source partition's box of r).
  void check_source(param_info& p, index_t r, const box* held = nullptr) {
    RESHARD_EXPECTS(r >= 0 && r < M_, "transform: check_source: a rank outside the source strategy");
    if (p.checked.empty()) p.checked.resize(static_cast<std::size_t>(M_));
    if (p.checked[static_cast<std::size_t>(r)]) return;
    p.checked[static_cast<std::size_t>(r)] = true;
    const auto& rd = open(r);
    const std::string& file = rd.path().native();
    if (p.chunked) return dcp_->check_chunks(p, r, rd, op_);
    const tensor_ref* e = rd.find(p.name);
    if (!e) {
      if (p.src_entries)
        report_error(op_ + ": " + file + ": parameter " + quote_name(p.name) + " is listed in the source strategy " +
                     src_.source() + " but missing from this checkpoint");
      report_error(op_ + ": " + file + ": parameter " + quote_name(p.name) + " is missing");
    }
    check_tensor(*e, file, p);
    if (p.scalar) {
      if (!e->is_scalar())
        report_error(op_ + ": " + file + ": parameter " + quote_name(p.name) + ": dims " + format_dims(e->dims) +
                     ", but it is a scalar in " + p.type_file);
      return;
    }
    index_list computed;
    const index_list& want = !p.src ? p.shape : held ? held->extent : (computed = p.src_part->box_of_rank(r).extent);
    if (e->is_scalar() || !std::equal(e->dims.begin(), e->dims.end(), want.begin(), want.end()))
      report_error(op_ + ": " + file + ": parameter " + quote_name(p.name) + ": dims " + format_dims(e->dims) +
                   " disagree with " +
                   (p.src ? "the source strategy " + src_.source() + ": layout " + to_string(*p.src) + " gives rank " +
                                std::to_string(r) + " the slice " + to_string(want)
                          : "the full shape " + to_string(want) + " found in " + p.type_file));
  }

  // The bytes item `it` of target t reads, in its source dtype.
  std::uint64_t item_source_bytes(index_t t, const out_item& it) const {
    if (!it.p) return it.raw->content_size();
    if (it.p->scalar) return element_size(it.p->type);
    return static_cast<std::uint64_t>(volume(target_box(it, t))) * element_size(it.p->type);
  }

  box target_box(const out_item& it, index_t t) const {
    const index_list& shape = it.p->shape;
    if (!it.dst) return box{index_list(shape.size(), 0), shape};
    return it.dst->part.box_of_rank(t);
  }

  // The pieces of target t's box `tb` of a sliced item (catalogue_pieces), in place of `out`'s.
  void pieces_of(const out_item& it, index_t t, const box& tb, std::vector<piece>& out) {
    catalogue_pieces(it, t, tb, files_, op_, out, transfers_);
  }

 private:
  strategy_layouts src_, dst_;
  std::map<index_t, std::filesystem::path> files_;
  std::vector<transform_target> targets_;
  std::string op_;
  index_t M_ = 1, N_ = 1;
  std::map<index_t, std::unique_ptr<checkpoint_reader>> readers_;
  std::map<std::string, param_info, std::less<>> params_;
  std::set<index_t> shape_hint_;
  bool collected_ = false;
  std::optional<name_selection> names_;  // with name_rules: the selection
  std::optional<dcp_source> dcp_;        // a DCP checkpoint as the source (no src_)
  std::vector<transfer> transfers_;      // pieces_of's scratch
  std::vector<param_info*> entry_params_;  // for_each_item: the parameter of each base file entry, or null
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
  std::size_t listed_ = npos;  // for_each_item: the parameters listed in the source strategy (once known)
  std::uint64_t walks_ = 0;    // for_each_item's calls (param_info::walk)
};

}  // namespace detail
}  // namespace reshard::io
