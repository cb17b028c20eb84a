// reshard/io/manifest.hpp: manifests of written checkpoints (docs/cli.md, "Manifests"): per
// file its size, SHA-256 and parameters (name, dtype, dims), as JSON, and the check of files
// against one.
//
//   transform_options o; o.digests = true;
//   auto s = transform_checkpoints(src, dst, "checkpoint_", a, b, o);
//   write_manifest(dst / "manifest.json", s.written);
//   auto problems = check_manifest(dst / "manifest.json");   // empty: every file as listed
//
// The JSON: {"manifest": "reshard", "version": 1, "files": [{"path", "bytes", "sha256",
// "parameters": [{"name", "dtype", "dims"}]}]}. Paths are relative to the manifest's directory
// when the file lies under it, absolute otherwise; dtypes are MindSpore's names ("Float32").
#pragma once

#include <reshard/error.hpp>
#include <reshard/io/checkpoint.hpp>
#include <reshard/io/detail/text.hpp>
#include <reshard/io/dtype.hpp>
#include <reshard/io/input_file.hpp>
#include <reshard/io/atomic_file.hpp>
#include <reshard/io/sha256.hpp>
#include <reshard/io/summary.hpp>
#include <reshard/parallel.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

namespace reshard::io {

/// Writes the manifest of `files` to `path`, atomically (a temporary, fsynced, then renamed).
/// Every file must have its digest (transform_options::digests).
inline void write_manifest(const std::filesystem::path& path, const std::vector<written_file>& files,
                           bool overwrite = false) {
  namespace fs = std::filesystem;
  const fs::path base = fs::absolute(path).parent_path().lexically_normal();
  // one line per file's fields and one per parameter: readable, and a line-oriented diff shows
  // which file or parameter changed
  std::string text = "{\n \"manifest\": \"reshard\",\n \"version\": 1,\n \"files\": [";
  for (std::size_t i = 0; i < files.size(); ++i) {
    const auto& f = files[i];
    if (f.sha256.empty())
      report_error("manifest: " + path.string() + ": " + f.path.string() + " has no digest (transform_options::digests)");
    const fs::path abs = fs::absolute(f.path).lexically_normal();
    const fs::path rel = abs.lexically_relative(base);
    const bool under = !rel.empty() && *rel.begin() != "..";
    text += i ? ",\n  {" : "\n  {";
    text += "\"path\": " + nlohmann::json((under ? rel : abs).generic_string()).dump() +
            ", \"bytes\": " + std::to_string(f.bytes) + ", \"sha256\": \"" + f.sha256 + "\", \"parameters\": [";
    for (std::size_t k = 0; k < f.tensors.size(); ++k) {
      const auto& t = f.tensors[k];
      text += k ? ",\n    " : "\n    ";
      text += nlohmann::json({{"name", t.name}, {"dtype", std::string(ms_name(t.type))}, {"dims", t.dims}}).dump();
    }
    text += f.tensors.empty() ? "]}" : "\n  ]}";
  }
  text += files.empty() ? "]\n}\n" : "\n ]\n}\n";
  atomic_file_writer out(path, overwrite, "manifest");
  out.write(text);
  out.commit();
}

/// The SHA-256 of the open file `f`, its size() bytes read with pread in 4 MiB pieces (bounded
/// memory; a file that shrinks meanwhile is an error naming it).
inline std::string file_sha256(const input_file& f) {
  std::vector<std::byte> buf(
      static_cast<std::size_t>(std::min<std::uint64_t>(f.size(), std::uint64_t{4} << 20)));
  sha256 h;
  for (std::uint64_t at = 0; at < f.size(); at += buf.size()) {
    const auto piece = std::span<std::byte>(buf).first(
        static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), f.size() - at)));
    f.pread_exact(piece, at);
    h.update(piece);
  }
  return h.hex();
}

/// Checks the files a manifest lists: each must exist with its size, SHA-256 and parameters
/// (names, dtypes, dims, in order). Returns every difference (up to `threads` files at a time;
/// 0: one per core). A manifest that cannot be read or is not one is an error naming it.
inline std::vector<verify_mismatch> check_manifest(const std::filesystem::path& path, unsigned threads = 0) {
  namespace fs = std::filesystem;
  const std::string who = "manifest: " + path.string() + ": ";
  const std::string text = read_input_file(path, "manifest");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    std::string why = e.what();
    if (const auto k = why.find("] "); k != std::string::npos) why.erase(0, k + 2);
    report_error(who + "not JSON: " + why);
  }
  if (!j.is_object() || j.value("manifest", "") != "reshard" || !j.contains("files") || !j["files"].is_array())
    report_error(who + "not a reshard manifest (no \"manifest\": \"reshard\" and \"files\" array)");
  if (j.value("version", 0) != 1) report_error(who + "version " + j["version"].dump() + " (this reshard reads 1)");
  struct entry {
    fs::path file;
    std::uint64_t bytes = 0;
    std::string sha;
    std::vector<written_file::tensor> params;
  };
  std::vector<entry> entries;
  const fs::path base = path.parent_path();
  try {
    for (const auto& f : j["files"]) {
      entry e;
      const fs::path p = f.at("path").get<std::string>();
      e.file = p.is_absolute() ? p : base / p;
      e.bytes = f.at("bytes").get<std::uint64_t>();
      e.sha = f.at("sha256").get<std::string>();
      for (const auto& t : f.at("parameters")) {
        const auto type = dtype_from_ms_name(t.at("dtype").get<std::string>());
        if (!type) report_error(who + e.file.string() + ": unknown dtype " + t.at("dtype").dump());
        e.params.push_back({t.at("name").get<std::string>(), *type, t.at("dims").get<std::vector<std::int64_t>>()});
      }
      entries.push_back(std::move(e));
    }
  } catch (const nlohmann::json::exception& e) {
    std::string why = e.what();
    if (const auto k = why.find("] "); k != std::string::npos) why.erase(0, k + 2);
    report_error(who + "a file entry lacks a field or has the wrong type: " + why);
  }
  std::vector<std::vector<verify_mismatch>> per(entries.size());
  reshard::parallel_for(entries.size(), threads, [&](std::size_t i) {
    const entry& e = entries[i];
    auto& found = per[i];
    std::error_code ec;
    if (!fs::exists(e.file, ec)) {
      found.push_back({e.file, {}, "missing file"});
      return;
    }
    try {
      const input_file in(e.file,
                          "manifest");  // a FIFO, a directory, ...: "cannot be read: ... is a FIFO"
      if (in.size() != e.bytes) {
        found.push_back(
            {e.file,
             {},
             std::to_string(in.size()) + " bytes, the manifest says " + std::to_string(e.bytes)});
        return;
      }
      if (file_sha256(in) != e.sha) {
        found.push_back({e.file, {}, "SHA-256 differs from the manifest's"});
        return;
      }
      checkpoint_reader rd(e.file);
      const auto list = rd.entries();
      if (list.size() != e.params.size())
        found.push_back({e.file, {}, std::to_string(list.size()) + " parameters, the manifest lists " +
                                         std::to_string(e.params.size())});
      for (std::size_t k = 0; k < std::min(list.size(), e.params.size()); ++k) {
        const auto& want = e.params[k];
        const auto& got = list[k];
        if (got.name != want.name || got.type != want.type || got.dims != want.dims)
          found.push_back({e.file, want.name,
                           "the file has " + detail::quote_name(got.name) + " " + std::string(ms_name(got.type)) + " " +
                               detail::format_dims(got.dims) + " where the manifest lists " +
                               std::string(ms_name(want.type)) + " " + detail::format_dims(want.dims)});
      }
    } catch (const reshard::error& x) {
      found.push_back({e.file, {}, std::string("cannot be read: ") + x.what()});
    }
  });
  std::vector<verify_mismatch> out;
  for (auto& v : per)
    for (auto& m : v) out.push_back(std::move(m));
  return out;
}

}  // namespace reshard::io
