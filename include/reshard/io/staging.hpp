// reshard/io/staging.hpp: the staged outputs of a checkpoint run, under RAII. Every file a run
// writes is first written as `<file>.reshard-<pid>.<n>.part` (a name unique per call), and
// renamed into place only when every file is complete; until then an object of this class owns
// the staged files and the directories it created, and removes them if it is destroyed before
// commit(). It is the one place that creates output directories, removes the temporaries of
// killed runs, fsyncs the staged files and the directories, renames, and (replacing a Hugging
// Face checkpoint) removes the shards of the old one.
//
//   staged_outputs out("transform", force, sync);
//   auto parts = out.add(files);      // the staged path of each file; checks they may be written
//   out.prepare();                    // directories made, stale temporaries removed
//   ... write every part ...
//   out.sync();                       // all parts fsynced together (sync)
//   auto finals = out.commit();       // renamed in order, directories fsynced (sync)
#pragma once

#include <reshard/error.hpp>
#include <reshard/io/hf.hpp>
#include <reshard/io/mapped_file.hpp>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <regex>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

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

  /// Stages `finals` (renamed in this order at commit()); returns their staged paths. Without
  /// force, a file that exists is an error naming it.
  std::vector<std::filesystem::path> add(std::span<const std::filesystem::path> finals) {
    std::vector<std::filesystem::path> parts;
    for (const auto& f : finals) {
      struct ::stat info {};
      if (!force_ && ::lstat(f.c_str(), &info) == 0)
        report_error(op_ + ": " + f.string() + " exists (pass force / --force to replace it)");
      files_.push_back({detail::unique_temp_path(f, ".part"), f});  // unique per call: see unique_temp_path
      parts.push_back(files_.back().part);
    }
    return parts;
  }

  /// `dir` is a Hugging Face checkpoint being written: with force, its index and single file are
  /// unlinked before the renames (no old or mixed checkpoint looks complete from then on), and
  /// the old shards that the new one does not have are removed after them.
  void replaces_hf(std::filesystem::path dir) { hf_dirs_.push_back(std::move(dir)); }

  /// Creates the missing parent directories of the files staged since the last call (removed
  /// again by discard() while they hold no output), and removes the temporaries that killed runs
  /// left for them.
  void prepare() {
    const std::size_t from = prepared_;
    prepared_ = files_.size();
    for (std::size_t i = from; i < files_.size(); ++i) {
      const file& f = files_[i];
      std::vector<std::filesystem::path> missing;
      for (auto d = f.final.parent_path(); !d.empty(); d = d.parent_path()) {
        std::error_code ec;
        if (std::filesystem::exists(d, ec)) break;
        missing.push_back(d);
        if (d == d.parent_path()) break;
      }
      for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
        std::error_code ec;
        if (!std::filesystem::create_directory(*it, ec) && ec)
          report_error(op_ + ": cannot create directory " + it->string() + ": " + ec.message());
        created_dirs_.push_back(*it);
      }
    }
    for (std::size_t i = from; i < files_.size(); ++i) detail::remove_stale_temporaries(files_[i].final);
  }

  /// Makes every staged file durable, in parallel (sync; otherwise nothing).
  void sync() const {
    if (!sync_) return;
    std::vector<std::filesystem::path> parts;
    parts.reserve(files_.size());
    for (const auto& f : files_) parts.push_back(f.part);
    sync_files(parts, fsync_threads, op_);
  }

  /// Renames every staged file into place, in order; returns the final paths. On a failure, the
  /// files renamed so far are removed (new files only) and the staged ones stay for discard().
  std::vector<std::filesystem::path> commit() {
    RESHARD_EXPECTS(!committed_, "staged_outputs: commit() twice");
    if (force_)
      for (const auto& d : hf_dirs_)
        for (const std::string_view name : {hf_index_name, hf_single_name}) ::unlink((d / name).c_str());
    std::vector<std::filesystem::path> done;
    for (std::size_t i = 0; i < files_.size(); ++i) {
      int err = 0;
      detail::crash_point();  // test-only (RESHARD_TEST_CRASH_AFTER)
      if (force_) {
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
    }
    committed_ = true;
    if (force_) remove_old_shards(done);
    std::set<std::filesystem::path> dirs;  // make the renames and the new directories durable
    for (const auto& f : files_) dirs.insert(f.final.parent_path());
    for (const auto& d : created_dirs_) dirs.insert(d.parent_path());
    created_dirs_.clear();  // they hold outputs now
    files_.clear();
    prepared_ = 0;
    if (sync_)
      for (const auto& d : dirs) detail::fsync_directory(d);
    return done;
  }

  /// Removes the staged files not renamed and the directories created (only if empty).
  void discard() noexcept {
    for (const auto& f : files_)
      if (!f.renamed) ::unlink(f.part.c_str());
    files_.clear();
    prepared_ = 0;
    for (auto it = created_dirs_.rbegin(); it != created_dirs_.rend(); ++it) {
      std::error_code ec;
      std::filesystem::remove(*it, ec);  // only if empty
    }
    created_dirs_.clear();
  }

 private:
  // force onto a Hugging Face checkpoint: removes the shards of the one replaced (files named
  // model-<k>-of-<n>.safetensors) that the new one does not have.
  void remove_old_shards(const std::vector<std::filesystem::path>& mine_list) {
    if (hf_dirs_.empty()) return;
    const std::set<std::filesystem::path> mine(mine_list.begin(), mine_list.end());
    const std::regex shard(R"(model-[0-9]{5}-of-[0-9]{5}\.safetensors)");
    for (const auto& d : hf_dirs_) {
      std::error_code ec;
      for (const auto& e : std::filesystem::directory_iterator(d, ec)) {
        const auto name = e.path().filename().string();
        if (!mine.count(e.path()) && std::regex_match(name, shard)) ::unlink(e.path().c_str());
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
  std::vector<std::filesystem::path> created_dirs_;
};

}  // namespace reshard::io
