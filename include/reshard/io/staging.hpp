// reshard/io/staging.hpp: the staged outputs of a checkpoint run, under RAII. Every file a run
// writes is first written as `<file>.reshard-<pid>.<n>.part` (a name unique per call), and
// renamed into place only when every file is complete; until then an object of this class owns
// the staged files and the directories it created, and removes them if it is destroyed before
// commit(). It is the one place that creates output directories, removes the temporaries of
// killed runs, fsyncs the staged files and the directories, renames, and replaces a Hugging
// Face checkpoint.
//
//   staged_outputs out("transform", force, sync);
//   auto parts = out.add(files);      // the staged path of each file
//   out.prepare();                    // directories made, stale temporaries removed, files checked
//   ... write every part ...
//   out.sync();                       // all parts fsynced together (sync)
//   auto finals = out.commit();       // renamed in order, directories fsynced (sync)
//
// Replacing a Hugging Face checkpoint (force, onto a directory D that holds an index or
// model.safetensors) is atomic as a loader sees it: a kill at any moment leaves D holding the
// old checkpoint or the new one, complete, never a mix and never neither. The new checkpoint is
// assembled in a directory S = `D.reshard-<pid>.<n>.swap` beside D: every entry of D that is not
// part of the old checkpoint (its index, model.safetensors, files named like shards,
// `model-NNNNN-of-NNNNN.safetensors`), not a reshard temporary and not a name this run writes
// there is hard-linked into S (subdirectories made anew, their files linked: the same files
// under both names, config.json, the tokenizer, ...); the new files are renamed into S; then one
// renameat2(RENAME_EXCHANGE) swaps S and D, and S, now holding the old checkpoint, is removed.
// Where that cannot be done (no RENAME_EXCHANGE or hard links on the filesystem, D a mount
// point, D's parent not writable) D is replaced in place, not atomically, and commit() says so
// in notes(): its index and model.safetensors are removed first (so no mixed checkpoint looks
// complete), the new files renamed in, the index last, then the old shards removed. Why this
// design: docs/formats.md, section 7.
#pragma once

#include <reshard/error.hpp>
#include <reshard/io/hf.hpp>
#include <reshard/io/atomic_file.hpp>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace reshard::io {

class staged_outputs {
 public:
  /// `op` names the workflow in messages; `force`: existing files are replaced; `sync`: the
  /// files and the renames are made durable.
  staged_outputs(std::string op, bool force, bool sync) : op_(std::move(op)), force_(force), sync_(sync) {}
  staged_outputs(const staged_outputs&) = delete;
  staged_outputs& operator=(const staged_outputs&) = delete;
  ~staged_outputs() { discard(); }

  /// Stages `finals` (renamed in this order at commit()); returns their staged paths. prepare()
  /// checks that they may be written.
  std::vector<std::filesystem::path> add(std::span<const std::filesystem::path> finals) {
    std::vector<std::filesystem::path> parts;
    for (const auto& f : finals) {
      files_.push_back({detail::unique_temp_path(f, ".part"), f});  // unique per call: see unique_temp_path
      parts.push_back(files_.back().part);
    }
    return parts;
  }

  /// `dir` is a Hugging Face checkpoint being written: with force, an old one there is replaced
  /// (atomically where it can be: see the top of this file).
  void replaces_hf(std::filesystem::path dir) { hf_dirs_.push_back(std::move(dir)); }

  /// Creates the missing parent directories of the files staged since the last call (removed
  /// again by discard() while they hold no output), and removes the temporaries that killed runs
  /// left for them. Without force, a file that exists is an error naming it.
  /// A stat per directory (none in a directory this run made) and a mkdir per new one; one scan
  /// per directory that existed before (a directory this run made holds no temporaries), and
  /// without force a stat per file in it (none of a file in a directory this run made).
  void prepare() {
    const std::size_t from = prepared_;
    prepared_ = files_.size();
    std::map<std::filesystem::path, bool> dirs;  // each directory: whether it existed before
    std::map<std::filesystem::path, std::vector<std::string>> names;  // old directory: its outputs
    for (std::size_t i = from; i < files_.size(); ++i) {
      const auto dir = files_[i].final.parent_path();
      if (!dir.empty() && !make_directory(dir, dirs)) continue;
      struct ::stat info {};
      if (!force_ && ::lstat(files_[i].final.c_str(), &info) == 0)
        report_error(op_ + ": " + files_[i].final.string() + " exists (pass force / --force to replace it)");
      names[dir].push_back(files_[i].final.filename().string());
    }
    for (const auto& [dir, files] : names) detail::remove_stale_temporaries(dir, files);
    for (const auto& d : hf_dirs_) {  // the swap directories killed runs left beside them
      std::error_code ec;
      if (const auto dir = std::filesystem::canonical(d, ec); !ec)
        detail::remove_stale_temporaries(dir);
    }
  }

  /// Makes every staged file durable, in parallel (sync; otherwise nothing). A file on a
  /// filesystem in memory (tmpfs, ramfs: in_memory()), where fsync does nothing, is not opened
  /// to be fsynced.
  void sync() {
    if (!sync_) return;
    std::vector<std::filesystem::path> parts;
    parts.reserve(files_.size());
    for (const auto& f : files_)
      if (!in_memory(f.final.parent_path())) parts.push_back(f.part);
    sync_files(parts, fsync_threads, op_);
  }

  /// Every file staged and prepared so far is on a filesystem in memory (tmpfs, ramfs:
  /// in_memory()), where fsync and write-back do nothing: their writers need not start
  /// write-back (durability::none; sync() and commit() skip them anyway). False before prepare()
  /// made their directories, and with no file.
  bool in_memory_only() {
    for (std::size_t i = 0; i < prepared_; ++i)
      if (!in_memory(files_[i].final.parent_path())) return false;
    return prepared_ > 0;
  }

  /// Renames every staged file into place, in order; returns the final paths. On a failure, the
  /// files renamed so far are removed (new files only) and the staged ones stay for discard().
  /// With force, a Hugging Face checkpoint there is replaced (see the top of this file): the
  /// files of its directory are renamed into the swap directory, and the swap made after the last
  /// of them.
  std::vector<std::filesystem::path> commit() {
    RESHARD_EXPECTS(!committed_, "staged_outputs: commit() twice");
    if (force_) {
      begin_swaps();
      for (const auto& d : hf_dirs_)
        if (!swapped(d)) remove_index(d);
    }
    std::vector<std::filesystem::path> done;
    for (std::size_t i = 0; i < files_.size(); ++i) {
      int err = 0;
      detail::crash_point();  // test-only (RESHARD_TEST_CRASH_AFTER)
      const hf_swap* swap = swap_of(i);
      if (swap) {
        if (::rename(files_[i].part.c_str(),
                     (swap->staging / files_[i].final.filename()).c_str()) != 0)
          err = errno;
      } else if (force_) {
        if (::rename(files_[i].part.c_str(), files_[i].final.c_str()) != 0) err = errno;
      } else {
        err = detail::rename_no_replace(files_[i].part, files_[i].final);
      }
      if (err != 0) {
        if (!force_)
          for (std::size_t k = 0; k < i; ++k) ::unlink(files_[k].final.c_str());  // new files only: as before
        report_error(op_ + ": " + files_[i].final.string() + ": " +
                     (err == EEXIST ? std::string("appeared while transforming (pass force to replace it)")
                                    : "cannot rename " + files_[i].part.string() + ": " + std::strerror(err)));
      }
      files_[i].renamed = true;
      done.push_back(files_[i].final);
      if (swap && i == swap->files.back()) finish_swap(*swap);
    }
    committed_ = true;
    remove_swaps();  // the old checkpoints
    if (force_) remove_old_shards(done);
    std::set<std::filesystem::path> dirs;  // make the renames and the new directories durable
    for (const auto& f : files_) dirs.insert(f.final.parent_path());
    for (const auto& d : created_dirs_) dirs.insert(d.parent_path());
    created_dirs_.clear();  // they hold outputs now
    files_.clear();
    prepared_ = 0;
    if (sync_)
      for (const auto& d : dirs)
        if (!in_memory(d)) detail::fsync_directory(d);
    made_.clear();
    return done;
  }

  /// What commit() did that the caller may not expect: a Hugging Face checkpoint replaced in
  /// place, not atomically, and why.
  const std::vector<std::string>& notes() const noexcept { return notes_; }

  /// Removes the staged files not renamed and the directories created (only if empty).
  void discard() noexcept {
    remove_swaps();
    for (const auto& f : files_)
      if (!f.renamed) ::unlink(f.part.c_str());
    files_.clear();
    prepared_ = 0;
    for (auto it = created_dirs_.rbegin(); it != created_dirs_.rend(); ++it) {
      std::error_code ec;
      std::filesystem::remove(*it, ec);  // only if empty
    }
    created_dirs_.clear();
    made_.clear();
  }

 private:
  // A Hugging Face checkpoint directory replaced by a swap (the top of this file).
  struct hf_swap {
    std::filesystem::path dir;      // D, resolved
    std::filesystem::path staging;  // S beside it: the new checkpoint, then (swapped) the old one
    dev_t dev = 0;                  // D's identity
    ino_t ino = 0;
    std::vector<std::size_t> files;  // the files_ renamed into S, in order
  };

  // The directory D of `d` and its identity, or false.
  static bool identify(const std::filesystem::path& d, hf_swap& s) {
    std::error_code ec;
    s.dir = std::filesystem::canonical(d, ec);
    struct ::stat st {};
    if (ec || ::stat(s.dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return false;
    s.dev = st.st_dev;
    s.ino = st.st_ino;
    return true;
  }
  static bool same_dir(const std::filesystem::path& p, const hf_swap& s) {
    struct ::stat st {};
    return ::stat(p.c_str(), &st) == 0 && st.st_dev == s.dev && st.st_ino == s.ino;
  }
  bool swapped(const std::filesystem::path& d) const {
    for (const auto& s : swaps_)
      if (same_dir(d, s)) return true;
    return false;
  }
  const hf_swap* swap_of(std::size_t i) const {
    for (const auto& s : swaps_)
      if (std::find(s.files.begin(), s.files.end(), i) != s.files.end()) return &s;
    return nullptr;
  }

  // force: for each Hugging Face directory holding a checkpoint, makes its swap directory and
  // carries the other entries into it; a directory that cannot be swapped is noted (in place).
  void begin_swaps() {
    for (const auto& d : hf_dirs_) {
      struct ::stat st {};
      if (::lstat((d / hf_index_name).c_str(), &st) != 0 &&
          ::lstat((d / hf_single_name).c_str(), &st) != 0)
        continue;
      hf_swap s;
      if (!identify(d, s) || swapped(s.dir)) continue;
      for (std::size_t i = 0; i < files_.size(); ++i)
        if (same_dir(files_[i].final.parent_path(), s)) s.files.push_back(i);
      if (s.files.empty()) continue;
      if (const std::string why = start_swap(s); !why.empty())
        note_in_place(d, why);
      else
        swaps_.push_back(std::move(s));
    }
  }

  // Makes S and carries D's other entries into it; an empty string, or why it cannot be swapped
  // (S then removed).
  std::string start_swap(hf_swap& s) {
    const auto parent = s.dir.parent_path();
    struct ::stat d {};
    struct ::stat p {};
    if (parent == s.dir || ::stat(s.dir.c_str(), &d) != 0 || ::stat(parent.c_str(), &p) != 0 ||
        p.st_dev != d.st_dev)
      return "it is a mount point";
    s.staging = detail::unique_temp_path(s.dir, ".swap");
    if (::mkdir(s.staging.c_str(), 0700) != 0) return failed("cannot create " + s.staging.string());
    std::set<std::string, std::less<>> mine;  // the names this run writes in D
    for (const std::size_t i : s.files) mine.insert(files_[i].final.filename().string());
    const auto keep = [&mine](std::string_view name) {
      return name != hf_index_name && name != hf_single_name && !is_hf_shard_name(name) &&
             !detail::is_temporary_name(name) && !mine.count(name);
    };
    std::string why = carry(s.dir, s.staging, keep);
    if (why.empty() && ::chmod(s.staging.c_str(), d.st_mode & 07777) != 0)
      why = failed("cannot set the mode of " + s.staging.string());
    if (!why.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(s.staging, ec);
      return why;
    }
    give_owner(s.staging, d);
    return {};
  }

  // Hard-links every entry of directory `from` that `keep` accepts (no `keep`: all of them) into
  // the new directory `to`; a subdirectory is made anew with its mode and owner, and all of it
  // carried in turn. An empty string, or what failed.
  std::string carry(const std::filesystem::path& from, const std::filesystem::path& to,
                    const std::function<bool(std::string_view)>& keep) const {
    std::vector<std::string> names;
    if (DIR* d = ::opendir(from.c_str())) {
      while (const ::dirent* e = ::readdir(d)) {
        const std::string_view name(e->d_name);
        if (name != "." && name != ".." && (!keep || keep(name))) names.emplace_back(name);
      }
      ::closedir(d);
    } else {
      return failed("cannot read the directory " + from.string());
    }
    for (const auto& name : names) {
      const auto src = from / name, dst = to / name;
      struct ::stat st {};
      if (::lstat(src.c_str(), &st) != 0) continue;  // gone meanwhile
      if (!S_ISDIR(st.st_mode)) {
        if (::link(src.c_str(), dst.c_str()) != 0)
          return failed("cannot link " + src.string() + " to " + dst.string());
        continue;
      }
      if (::mkdir(dst.c_str(), 0700) != 0) return failed("cannot create " + dst.string());
      if (std::string why = carry(src, dst, {}); !why.empty()) return why;
      if (::chmod(dst.c_str(), st.st_mode & 07777) != 0)
        return failed("cannot set the mode of " + dst.string());
      give_owner(dst, st);
      if (sync_) detail::fsync_directory(dst);
    }
    return {};
  }

  // Makes directory `d` and its missing parents, remembered (in created_dirs_, parents first)
  // for discard(); `known` holds the directories seen so far: whether each existed before. A
  // path that exists is used as it is (not a directory: the file's creation fails on it); one
  // in a directory made by this run is made without a stat first. Returns whether `d` existed.
  bool make_directory(const std::filesystem::path& d, std::map<std::filesystem::path, bool>& known) {
    if (const auto hit = known.find(d); hit != known.end()) return hit->second;
    const auto parent = d.parent_path();
    const bool has_parent = !parent.empty() && parent != d;
    const auto p = has_parent ? known.find(parent) : known.end();
    const bool in_new = p != known.end() && !p->second;  // d cannot exist yet
    struct ::stat st {};
    if (!in_new && ::stat(d.c_str(), &st) == 0) return known[d] = true;
    if (!in_new && has_parent) make_directory(parent, known);
    if (::mkdir(d.c_str(), 0777) != 0) {
      const int err = errno;
      if (err == EEXIST && ::stat(d.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return known[d] = true;
      report_error(op_ + ": cannot create directory " + d.string() + ": " + std::strerror(err));
    }
    created_dirs_.push_back(d);
    made_.insert(d);
    return known[d] = false;
  }

  // Whether directory `d` is on a filesystem in memory (tmpfs, ramfs), whose fsync does nothing:
  // one statfs per directory that existed before the run (a directory the run made is on its
  // parent's filesystem: no mount point yet), remembered.
  bool in_memory(const std::filesystem::path& d) {
    if (const auto hit = memory_dirs_.find(d); hit != memory_dirs_.end()) return hit->second;
    const auto parent = d.parent_path();
    bool mem = false;
    if (made_.count(d) && !parent.empty() && parent != d) {
      mem = in_memory(parent);
    } else {
      const std::string fs = filesystem_name(d.empty() ? std::filesystem::path(".") : d);
      mem = fs == "tmpfs" || fs == "ramfs";
    }
    return memory_dirs_[d] = mem;
  }

  // "<what>: <errno's text>", for the call that just failed.
  static std::string failed(const std::string& what) {
    const int err = errno;
    return what + ": " + std::strerror(err);
  }

  // Gives directory `p` the owner and group of `like`: best effort, as only root may give a
  // directory to another owner.
  static void give_owner(const std::filesystem::path& p, const struct ::stat& like) noexcept {
    if (::lchown(p.c_str(), like.st_uid, like.st_gid) != 0) return;
  }

  // Every new file of `s` is in S: swaps S and D (one renameat2); where that fails, renames them
  // into D in place instead.
  void finish_swap(const hf_swap& s) {
    if (sync_) detail::fsync_directory(s.staging);
    detail::crash_point();  // test-only: the swap is a rename too
    const int err = detail::exchange_paths(s.staging, s.dir);
    if (err == 0) {
      if (sync_) detail::fsync_directory(s.dir.parent_path());
      return;
    }
    note_in_place(s.dir, "cannot exchange " + s.dir.string() + " and " + s.staging.string() + ": " +
                             std::strerror(err));
    remove_index(s.dir);
    for (const std::size_t i : s.files) {
      const auto from = s.staging / files_[i].final.filename();
      if (::rename(from.c_str(), files_[i].final.c_str()) != 0)
        report_error(op_ + ": " + files_[i].final.string() + ": " +
                     failed("cannot rename " + from.string()));
    }
  }

  // A Hugging Face directory replaced in place, not atomically, and why: a note for the caller.
  void note_in_place(const std::filesystem::path& dir, const std::string& why) {
    notes_.push_back("hf: " + dir.string() +
                     ": the old checkpoint replaced in place, not atomically (" + why + ")");
  }
  // Replacing in place: the index and model.safetensors go first, so that no mix of the old and
  // the new checkpoint looks complete (the new index, or file, is renamed in last).
  static void remove_index(const std::filesystem::path& dir) noexcept {
    for (const std::string_view name : {hf_index_name, hf_single_name})
      ::unlink((dir / name).c_str());
  }

  // Removes the swap directories: the old checkpoints, or (before their swap) the new ones.
  void remove_swaps() noexcept {
    for (const auto& s : swaps_) {
      std::error_code ec;
      std::filesystem::remove_all(s.staging, ec);  // best effort: a later run removes what is left
    }
    swaps_.clear();
  }

  // force onto a Hugging Face checkpoint replaced in place: removes the shards of the old one
  // (files named model-<k>-of-<n>.safetensors) that the new one does not have.
  void remove_old_shards(const std::vector<std::filesystem::path>& mine_list) {
    if (hf_dirs_.empty()) return;
    const std::set<std::filesystem::path> mine(mine_list.begin(), mine_list.end());
    for (const auto& d : hf_dirs_) {
      std::error_code ec;
      for (const auto& e : std::filesystem::directory_iterator(d, ec)) {
        const auto name = e.path().filename().string();
        if (!mine.count(e.path()) && is_hf_shard_name(name)) ::unlink(e.path().c_str());
      }
    }
  }

  // fsyncs in flight at once: waits on the disk, not work for the cores.
  static constexpr unsigned fsync_threads = 8;

  struct file {
    std::filesystem::path part, final;
    bool renamed = false;
  };
  std::string op_;
  bool force_, sync_;
  bool committed_ = false;
  std::vector<file> files_;
  std::size_t prepared_ = 0;  // files_[0, prepared_) were prepared
  std::vector<std::filesystem::path> hf_dirs_;
  std::vector<hf_swap> swaps_;  // commit(): the Hugging Face directories being swapped
  std::vector<std::string> notes_;
  std::vector<std::filesystem::path> created_dirs_;
  std::set<std::filesystem::path> made_;                 // the directories this run made (until commit)
  std::map<std::filesystem::path, bool> memory_dirs_;  // in_memory(), asked
};

}  // namespace reshard::io
