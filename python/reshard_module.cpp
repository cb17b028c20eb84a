// python/reshard_module.cpp: the extension reshard._reshard. Binds the layout algebra (layouts,
// plans, rank lists, in-memory conversion of numpy arrays) and the checkpoint workflows of
// reshard::io; python/reshard/__init__.py adds MindSpore's function names and progress bars.
//
// Threads and the GIL: every long call runs with the GIL released. The checkpoint workflows run
// on a thread of their own while the calling thread waits and checks for signals (Ctrl-C) every
// 50 ms; a signal, or an exception raised by the Python progress callback, makes the next
// progress call throw, and the engine abandons the transform (it removes its staged files).
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <reshard.hpp>
#include <reshard/ext/json.hpp>
#include <reshard/ext/svg.hpp>
#include <reshard/io/dcp_read_items.hpp>
#include <reshard/io/input_file.hpp>
#include <reshard/io/strategy.hpp>
#include <reshard/io/summary.hpp>
#include <reshard/io/transform.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include <unistd.h>

namespace py = pybind11;
using namespace pybind11::literals;

namespace {

using reshard::index_list;
using reshard::index_t;
using reshard::layout;

// ---------------------------------------------------------------------------------------------
// conversions

index_list to_index_list(const std::vector<std::int64_t>& v) { return index_list(v.begin(), v.end()); }

py::tuple to_tuple(const index_list& v) {
  py::tuple t(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) t[i] = py::int_(v.data()[i]);
  return t;
}

reshard::split_mode split_mode_of(const std::string& s) {
  if (s == "divisible") return reshard::split_mode::divisible;
  if (s == "chunk") return reshard::split_mode::chunk;
  if (s == "balanced") return reshard::split_mode::balanced;
  throw py::value_error("split must be 'divisible', 'chunk' or 'balanced', not '" + s + "'");
}

// A MindSpore tensor map: per dim an int (-1 = unsplit) or a tuple of ints.
reshard::tensor_map tensor_map_of(const py::sequence& map) {
  reshard::tensor_map out;
  for (const py::handle e : map) {
    if (py::isinstance<py::int_>(e)) {
      out.emplace_back(e.cast<index_t>());
    } else if (py::isinstance<py::sequence>(e) && !py::isinstance<py::str>(e)) {
      out.emplace_back(e.cast<std::vector<index_t>>());
    } else {
      throw py::type_error("tensor_map entries must be ints or tuples of ints, not " +
                           std::string(py::str(py::type::handle_of(e).attr("__name__"))));
    }
  }
  return out;
}

// MindSpore's tensor map of a layout (axes counted from the right): int, or tuple for several.
py::list tensor_map_list(const layout& l) {
  py::list out;
  for (const reshard::map_entry& e : reshard::mindspore_tensor_map(l)) {
    if (e.count == 1)
      out.append(e.axis[0]);
    else
      out.append(py::tuple(py::cast(e.axes())));
  }
  return out;
}

std::vector<reshard::placement> placements_of(const py::sequence& ps) {
  std::vector<reshard::placement> out;
  for (const py::handle p : ps) {
    if (py::isinstance<reshard::shard>(p)) {
      out.emplace_back(p.cast<reshard::shard>());
    } else if (py::isinstance<reshard::replicate>(p)) {
      out.emplace_back(reshard::replicate{});
    } else if (py::isinstance<py::str>(p)) {
      std::string s = p.cast<std::string>();
      if (s == "R" || s == "Replicate()" || s == "Replicate") {
        out.emplace_back(reshard::replicate{});
        continue;
      }
      std::string digits;
      for (const std::string pre : {"S(", "Shard("})
        if (s.rfind(pre, 0) == 0 && s.size() > pre.size() + 1 && s.back() == ')')
          digits = s.substr(pre.size(), s.size() - pre.size() - 1);
      if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos)
        throw py::value_error("placement '" + s + "' is not Shard(d), S(d), Replicate() or R");
      out.emplace_back(reshard::shard{std::stoll(digits)});
    } else {
      throw py::type_error("placements must be reshard.Shard(d), reshard.Replicate() or strings");
    }
  }
  return out;
}

// One list of strings per dim from a JAX partition spec entry: None, "x", or ("x", "y").
reshard::partition_spec spec_of(const py::sequence& spec) {
  reshard::partition_spec out;
  for (const py::handle e : spec) {
    std::vector<std::string> names;
    if (e.is_none()) {
    } else if (py::isinstance<py::str>(e)) {
      names.push_back(e.cast<std::string>());
    } else {
      names = e.cast<std::vector<std::string>>();
    }
    out.push_back(std::move(names));
  }
  return out;
}

reshard::named_mesh mesh_of(const py::object& mesh) {
  reshard::named_mesh m;
  const py::object items = py::isinstance<py::dict>(mesh) ? mesh.attr("items")() : mesh;
  for (const py::handle kv : items) {
    const auto pair = kv.cast<std::pair<std::string, index_t>>();
    m.axis_names.push_back(pair.first);
    m.axis_sizes.push_back(pair.second);
  }
  return m;
}

// ---------------------------------------------------------------------------------------------
// errors: reshard::error -> reshard.Error (a ValueError), or an OSError for file-system failures

py::object& error_type() {
  static py::object* t = nullptr;  // set once at import; never destroyed (like any module global)
  if (!t) t = new py::object();
  return *t;
}

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

void raise_reshard_error(const reshard::error& e) {
  const std::string_view what = e.what();
  // report_errno's messages end with ": <strerror(errno)>": an OSError with that errno (Python
  // picks the subclass: FileNotFoundError, PermissionError, ...).
  for (int err = 1; err < 134; ++err) {
    const char* text = std::strerror(err);
    if (ends_with(what, std::string(": ") + text)) {
      PyErr_SetObject(PyExc_OSError, py::make_tuple(err, std::string(what)).ptr());
      return;
    }
  }
  if (what.find(" does not exist") != std::string_view::npos ||
      what.find("missing rank directory") != std::string_view::npos) {
    PyErr_SetObject(PyExc_OSError, py::make_tuple(ENOENT, std::string(what)).ptr());
    return;
  }
  if (what.find(" exists (pass force") != std::string_view::npos ||
      what.find(" appeared while transforming (pass force") != std::string_view::npos) {  // another writer won
    PyErr_SetObject(PyExc_OSError, py::make_tuple(EEXIST, std::string(what)).ptr());
    return;
  }
  PyErr_SetString(error_type().ptr(), e.what());
}

// ---------------------------------------------------------------------------------------------
// running a workflow: on its own thread, Ctrl-C checked by the waiting caller

// Why a workflow stops early: a signal seen by the caller. Thrown from the progress callback.
struct cancelled : std::exception {
  const char* what() const noexcept override { return "reshard: cancelled"; }
};

struct run_state {
  std::atomic<bool> cancel{false};
  PyObject* callback = nullptr;  // borrowed: the caller's argument outlives the call
};

// The progress callback given to the engine: stops the run when asked, and calls the Python
// callback (with the GIL) with a Progress.
struct progress_info {
  index_t rank = 0;
  std::string parameter;
  std::uint64_t bytes_done = 0, bytes_total = 0;
  std::size_t files_done = 0, files_total = 0;
};

// Test-only: a file descriptor the next workflow's first progress report writes "held\n" to,
// before that report waits until the run is cancelled (set by _hold_at_first_progress). A test
// reads the line and sends SIGINT knowing that the engine is in the middle of its run, on its own
// thread, with no Python callback: no timer decides whether the signal comes in time.
std::atomic<int> hold_fd{-1};

void hold_until_cancelled(run_state& st) {
  const int fd = hold_fd.exchange(-1);
  if (fd < 0) return;
  constexpr char line[] = "held\n";
  if (::write(fd, line, sizeof line - 1) != static_cast<ssize_t>(sizeof line - 1)) return;
  while (!st.cancel.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

std::function<void(const reshard::io::transform_progress&)> progress_of(run_state& st) {
  return [&st](const reshard::io::transform_progress& p) {
    hold_until_cancelled(st);
    if (st.cancel.load()) throw cancelled();
    if (!st.callback) return;
    progress_info info{p.rank, std::string(p.parameter), p.bytes_done, p.bytes_total, p.files_done, p.files_total};
    const py::gil_scoped_acquire gil;
    if (st.cancel.load()) throw cancelled();
    py::handle(st.callback)(info);  // a Python exception becomes py::error_already_set
  };
}

// Runs f() (which must not touch Python objects except through progress_of(st)) on a thread,
// with the GIL released; checks for signals while waiting. Called with the GIL held.
template <class F>
auto run_workflow(run_state& st, F&& f) -> decltype(f()) {
  using R = decltype(f());
  std::packaged_task<R()> task(std::forward<F>(f));
  std::future<R> done = task.get_future();
  std::optional<py::error_already_set> signal;
  {
    const py::gil_scoped_release release;
    std::thread worker(std::move(task));
    while (done.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
      if (signal) continue;
      const py::gil_scoped_acquire gil;
      if (PyErr_CheckSignals() != 0) {
        signal.emplace();  // fetches the error (KeyboardInterrupt)
        st.cancel.store(true);
      }
    }
    worker.join();
  }
  if (signal) {
    try {
      (void)done.get();
    } catch (...) {  // the run stopped because of the signal (or failed anyway): the signal wins
    }
    throw std::move(*signal);
  }
  return done.get();
}

// ---------------------------------------------------------------------------------------------
// checkpoint workflows

// The library's JSON of a result (a summary, a verdict) as a dict, every field by name.
py::dict json_dict(const nlohmann::json& j) { return py::module_::import("json").attr("loads")(j.dump()); }

py::dict summary_dict(const reshard::io::transform_summary& s) { return json_dict(reshard::io::to_json(s)); }

// The library's options from the keyword arguments that python/reshard/__init__.py checked and
// put in `opts`: {"format": "ckpt" | "safetensors" | "hf", "max_shard_bytes": int, "include":
// [glob], "exclude": [glob], "rename": [(regex, replacement)], "rename_map": {old: new},
// "dtype_all": name or None, "dtype_named": [(glob, name)]} (every key optional).
reshard::io::dtype dtype_named(const std::string& name, const char* what) {
  if (const auto t = reshard::io::dtype_from_name(name)) return *t;
  throw py::value_error(std::string(what) + ": unknown dtype '" + name +
                        "' (MindSpore's, numpy's or safetensors' names: Float32, bfloat16, F16, ...)");
}

reshard::io::transform_options options_of(run_state& st, unsigned jobs, bool force, const py::dict& opts) {
  reshard::io::transform_options o;
  o.jobs = jobs;
  const auto get = [&](const char* key) -> py::object {
    if (opts.contains(key)) return opts[key];
    return py::none();
  };
  const auto format = get("format").is_none() ? std::string("ckpt") : get("format").cast<std::string>();
  if (format == "ckpt") {
    o.format = reshard::io::checkpoint_format::ckpt;
  } else if (format == "safetensors") {
    o.format = reshard::io::checkpoint_format::safetensors;
  } else if (format == "hf") {
    o.format = reshard::io::checkpoint_format::hf;
  } else if (format == "dcp") {
    o.format = reshard::io::checkpoint_format::dcp;
  } else {
    throw py::value_error("output_format must be 'ckpt', 'safetensors', 'hf' or 'dcp', not '" + format + "'");
  }
  if (!get("dcp_torch").is_none()) {
    const auto torch = get("dcp_torch").cast<std::string>();
    if (format != "dcp") throw py::value_error("dcp_torch applies to output_format='dcp' only");
    if (torch == "1.13") {
      o.dcp_torch = reshard::io::dcp_layout::torch_1_13;
    } else if (torch == "2") {
      o.dcp_torch = reshard::io::dcp_layout::torch_2;
    } else {
      throw py::value_error("dcp_torch must be '1.13' or '2', not '" + torch + "'");
    }
  }
  if (!get("max_shard_bytes").is_none()) o.max_shard_bytes = get("max_shard_bytes").cast<std::uint64_t>();
  if (!get("include").is_none()) o.names.include = get("include").cast<std::vector<std::string>>();
  if (!get("exclude").is_none()) o.names.exclude = get("exclude").cast<std::vector<std::string>>();
  if (!get("rename").is_none()) o.names.rename = get("rename").cast<std::vector<std::pair<std::string, std::string>>>();
  if (!get("rename_map").is_none()) o.names.rename_exact = get("rename_map").cast<std::map<std::string, std::string>>();
  if (!get("dtype_all").is_none()) o.casts.all = dtype_named(get("dtype_all").cast<std::string>(), "dtype");
  if (!get("dtype_named").is_none())
    for (const auto& [glob, name] : get("dtype_named").cast<std::vector<std::pair<std::string, std::string>>>())
      o.casts.named.emplace_back(glob, dtype_named(name, "dtype"));
  o.force = force;
  o.progress = progress_of(st);
  return o;
}

using path = std::filesystem::path;
using file_map = std::map<std::int64_t, path>;

py::dict transform_checkpoints(const path& src_dir, const path& dst_dir, const std::string& prefix,
                               const path& src_strategy, const path& dst_strategy, unsigned jobs, bool force,
                               const py::object& progress, const py::dict& opts) {
  run_state st;
  st.callback = progress.is_none() ? nullptr : progress.ptr();
  auto o = options_of(st, jobs, force, opts);
  return summary_dict(run_workflow(st, [&] {
    return reshard::io::transform_checkpoints(src_dir, dst_dir, prefix, src_strategy, dst_strategy, o);
  }));
}

// The sources of one target rank: {source rank: checkpoint file}, or a PyTorch DCP checkpoint
// directory (its chunks are its layout: no source strategy).
using rank_sources = std::variant<file_map, path>;

py::dict transform_checkpoint_by_rank(std::int64_t rank, const rank_sources& sources, const path& out,
                                      const path& src_strategy, const path& dst_strategy, bool force,
                                      const py::object& progress, const py::dict& opts) {
  run_state st;
  st.callback = progress.is_none() ? nullptr : progress.ptr();
  auto o = options_of(st, 1, force, opts);
  return summary_dict(run_workflow(st, [&] {
    if (const auto* dcp_dir = std::get_if<path>(&sources))
      return reshard::io::transform_dcp_checkpoint_by_rank(rank, *dcp_dir, out, src_strategy, dst_strategy, o);
    return reshard::io::transform_checkpoint_by_rank(rank, std::get<file_map>(sources), out, src_strategy,
                                                     dst_strategy, o);
  }));
}

py::dict merge_checkpoints(const path& src_dir, const path& out, const path& src_strategy, bool force,
                           const py::object& progress, const py::dict& opts) {
  run_state st;
  st.callback = progress.is_none() ? nullptr : progress.ptr();
  auto o = options_of(st, 1, force, opts);
  return summary_dict(
      run_workflow(st, [&] { return reshard::io::merge_checkpoints(src_dir, out, src_strategy, o); }));
}

py::dict split_checkpoint(const path& file, const path& dst_dir, const path& dst_strategy, const std::string& prefix,
                          unsigned jobs, bool force, const py::object& progress, const py::dict& opts) {
  run_state st;
  st.callback = progress.is_none() ? nullptr : progress.ptr();
  auto o = options_of(st, jobs, force, opts);
  return summary_dict(
      run_workflow(st, [&] { return reshard::io::split_checkpoint(file, dst_dir, dst_strategy, prefix, o); }));
}

py::dict convert_checkpoint(const path& in, const path& out, bool force, const py::object& progress,
                            const py::dict& opts) {
  run_state st;
  st.callback = progress.is_none() ? nullptr : progress.ptr();
  auto o = options_of(st, 1, force, opts);
  return summary_dict(run_workflow(st, [&] { return reshard::io::convert_checkpoint(in, out, o); }));
}

// A verify_report as `reshard verify --json` prints it (io::to_json).
py::dict report_dict(const reshard::io::verify_report& r) { return json_dict(reshard::io::to_json(r)); }

// The verify functions: the outputs of a workflow checked against its sources, given the run's
// options (`opts`, as for the run).
py::dict verify_checkpoints(const path& src_dir, const path& dst_dir, const std::string& prefix, const path& src_strategy,
                            const path& dst_strategy, unsigned jobs, const py::object& progress, const py::dict& opts) {
  run_state st;
  st.callback = progress.is_none() ? nullptr : progress.ptr();
  auto o = options_of(st, jobs, false, opts);
  return report_dict(run_workflow(st, [&] {
    return reshard::io::verify_checkpoints(src_dir, dst_dir, prefix, src_strategy, dst_strategy, o);
  }));
}

py::dict verify_merged_checkpoint(const path& src_dir, const path& out, const path& src_strategy,
                                  const py::object& progress, const py::dict& opts) {
  run_state st;
  st.callback = progress.is_none() ? nullptr : progress.ptr();
  auto o = options_of(st, 1, false, opts);
  return report_dict(
      run_workflow(st, [&] { return reshard::io::verify_merged_checkpoint(src_dir, out, src_strategy, o); }));
}

py::dict verify_split_checkpoint(const path& file, const path& dst_dir, const path& dst_strategy,
                                 const std::string& prefix, unsigned jobs, const py::object& progress,
                                 const py::dict& opts) {
  run_state st;
  st.callback = progress.is_none() ? nullptr : progress.ptr();
  auto o = options_of(st, jobs, false, opts);
  return report_dict(run_workflow(
      st, [&] { return reshard::io::verify_split_checkpoint(file, dst_dir, dst_strategy, prefix, o); }));
}

py::dict verify_converted_checkpoint(const path& in, const path& out, const py::object& progress,
                                     const py::dict& opts) {
  run_state st;
  st.callback = progress.is_none() ? nullptr : progress.ptr();
  auto o = options_of(st, 1, false, opts);
  return report_dict(run_workflow(st, [&] { return reshard::io::verify_converted_checkpoint(in, out, o); }));
}

// numpy's dtype for a checkpoint dtype: bfloat16 as ml_dtypes.bfloat16 when importable, else
// uint16 (the same bits).
py::dtype numpy_dtype(reshard::io::dtype t, std::uint64_t bytes) {
  using reshard::io::dtype;
  if (t == dtype::bfloat16) {
    try {
      return py::dtype::from_args(py::module_::import("ml_dtypes").attr("bfloat16"));
    } catch (py::error_already_set&) {
      return py::dtype("uint16");
    }
  }
  if (t == dtype::str) return py::dtype("<U" + std::to_string(std::max<std::uint64_t>(bytes / 4, 1)));
  return py::dtype(std::string(reshard::io::numpy_name(t)));
}

py::tuple load_checkpoint_by_rank(std::int64_t rank, const rank_sources& sources, const path& src_strategy,
                                  const path& dst_strategy, const py::object& progress, const py::dict& opts) {
  run_state st;
  st.callback = progress.is_none() ? nullptr : progress.ptr();
  auto o = options_of(st, 1, false, opts);
  py::dict out;
  PyObject* params = out.ptr();
  const reshard::io::tensor_allocator allocate = [params](index_t, std::string_view name, reshard::io::dtype type,
                                                         std::span<const std::int64_t> dims,
                                                         std::uint64_t bytes) -> std::span<std::byte> {
    const py::gil_scoped_acquire gil;
    py::dtype dt = numpy_dtype(type, bytes);
    std::vector<py::ssize_t> shape(dims.begin(), dims.end());
    if (type == reshard::io::dtype::str) shape.clear();
    std::uint64_t want = static_cast<std::uint64_t>(dt.itemsize());
    for (auto d : shape) want *= static_cast<std::uint64_t>(d);
    if (want != bytes) {  // not a plain array of its dims: the raw bytes
      dt = py::dtype("uint8");
      shape = {static_cast<py::ssize_t>(bytes)};
    }
    py::array a(dt, shape);
    PyDict_SetItem(params, py::str(std::string(name)).ptr(), a.ptr());
    return {static_cast<std::byte*>(a.mutable_data()), static_cast<std::size_t>(bytes)};
  };
  const auto s = run_workflow(st, [&] {
    if (const auto* dcp_dir = std::get_if<path>(&sources))
      return reshard::io::load_dcp_checkpoint_by_rank(rank, *dcp_dir, src_strategy, dst_strategy, allocate, o);
    return reshard::io::load_checkpoint_by_rank(rank, std::get<file_map>(sources), src_strategy, dst_strategy,
                                                allocate, o);
  });
  return py::make_tuple(out, summary_dict(s));
}

// ---------------------------------------------------------------------------------------------
// the algebra on numpy arrays

// A C-contiguous array over any object with the buffer protocol, never a copy.
py::array as_array(const py::handle& h, const std::string& what) {
  if (!py::isinstance<py::array>(h) && !PyObject_CheckBuffer(h.ptr()))
    throw py::type_error(what + " is not an array (nor an object with the buffer protocol)");
  py::array a = py::array::ensure(h);
  if (!a) throw py::error_already_set();
  if (a.dtype().kind() == 'O') throw py::type_error(what + " holds Python objects (dtype object), not data");
  if (!(a.flags() & py::array::c_style))
    throw py::value_error(what + " is not C-contiguous (numpy.ascontiguousarray makes a copy that is)");
  return a;
}

std::string shape_text(const py::array& a) {
  std::string s = "(";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + (a.ndim() == 1 ? ",)" : ")");
}

void check_elements(const py::array& a, index_t want, const std::string& what, const std::string& box) {
  if (static_cast<index_t>(a.size()) != want)
    throw py::value_error(what + " has shape " + shape_text(a) + " (" + std::to_string(a.size()) +
                          " elements), but its box " + box + " has " + std::to_string(want));
}

py::array new_array(const py::dtype& dt, const index_list& shape) {
  std::vector<py::ssize_t> s(shape.begin(), shape.end());
  return py::array(dt, s);
}

// The shards of the ranks of `g`, the partition of `l` (None: a rank not given), checked: one per rank, each with the
// elements of its box, all of one dtype. `op` and `whose` name them in messages ("convert", "the
// shard of source rank"). The arrays are kept alive in `keep`; `src` points into them (no copy).
struct gathered_shards {
  std::vector<py::array> keep;
  std::vector<const std::byte*> src;
  py::dtype dt;
};
gathered_shards gather_shards(const layout& l, const reshard::partition& g, const py::sequence& shards, const std::string& op,
                              const std::string& whose, const std::string& of) {
  if (static_cast<index_t>(py::len(shards)) != g.ranks)
    throw py::value_error(op + ": " + std::to_string(py::len(shards)) + " " + of + " given for " + to_string(l) +
                          ", which has " + std::to_string(g.ranks) + " ranks");
  gathered_shards out;
  out.src.assign(static_cast<std::size_t>(g.ranks), nullptr);
  std::optional<py::dtype> dt;
  for (index_t i = 0; i < g.ranks; ++i) {
    const py::object h = shards[static_cast<std::size_t>(i)];
    if (h.is_none()) continue;
    const index_t rank = g.first_rank + i;
    const std::string what = op + ": " + whose + " " + std::to_string(rank);
    py::array a = as_array(h, what);
    const reshard::box b = g.box_of_rank(rank);
    check_elements(a, reshard::volume(b), what, reshard::to_string(b));
    if (!dt) {
      dt = a.dtype();
    } else if (!a.dtype().equal(*dt)) {
      throw py::value_error(what + " has dtype " + std::string(py::str(a.dtype())) + ", the first shard " +
                            std::string(py::str(*dt)));
    }
    out.src[static_cast<std::size_t>(i)] = static_cast<const std::byte*>(a.data());
    out.keep.push_back(std::move(a));
  }
  if (!dt) throw py::value_error(op + ": every " + (of == "source shards" ? "source shard" : "shard") + " is None");
  out.dt = *dt;
  return out;
}

py::list convert(const reshard::transfer_plan& p, const py::sequence& shards, unsigned threads) {
  const reshard::partition gs(p.src), gd(p.dst);
  const gathered_shards in = gather_shards(p.src, gs, shards, "convert", "the shard of source rank", "source shards");
  const auto& src = in.src;
  const std::optional<py::dtype> dt = in.dt;
  py::list out;
  std::vector<std::byte*> dst;
  for (index_t j = 0; j < gd.ranks; ++j) {
    py::array a = new_array(*dt, gd.box_of_rank(gd.first_rank + j).extent);
    dst.push_back(static_cast<std::byte*>(a.mutable_data()));
    out.append(a);
  }
  const auto elem = static_cast<std::size_t>(dt->itemsize());
  {
    const py::gil_scoped_release release;
    reshard::convert(p, std::span<const std::byte* const>(src), std::span<std::byte* const>(dst), elem,
                     {.threads = threads});
  }
  return out;
}

py::list split(const py::handle& full, const layout& l, unsigned threads) {
  reshard::validate(l, "split: layout");
  py::array a = as_array(full, "split: the full tensor");
  check_elements(a, reshard::volume(reshard::box{index_list(l.shape.size(), 0), l.shape}), "split: the full tensor",
                 reshard::to_string(l.shape));
  const reshard::partition g(l);
  py::list out;
  std::vector<std::byte*> dst;
  for (index_t r = 0; r < g.ranks; ++r) {
    py::array s = new_array(a.dtype(), g.box_of_rank(g.first_rank + r).extent);
    dst.push_back(static_cast<std::byte*>(s.mutable_data()));
    out.append(s);
  }
  const auto elem = static_cast<std::size_t>(a.itemsize());
  const auto* src = static_cast<const std::byte*>(a.data());
  {
    const py::gil_scoped_release release;
    reshard::split(l, src, std::span<std::byte* const>(dst), elem, {.threads = threads});
  }
  return out;
}

py::array merge(const py::sequence& shards, const layout& l, unsigned threads) {
  reshard::validate(l, "merge: layout");
  const reshard::partition g(l);
  const gathered_shards in = gather_shards(l, g, shards, "merge", "the shard of rank", "shards");
  const auto& src = in.src;
  const std::optional<py::dtype> dt = in.dt;
  py::array full = new_array(*dt, l.shape);
  auto* dst = static_cast<std::byte*>(full.mutable_data());
  const auto elem = static_cast<std::size_t>(dt->itemsize());
  {
    const py::gil_scoped_release release;
    reshard::merge(l, std::span<const std::byte* const>(src), dst, elem, {.threads = threads});
  }
  return full;
}

// The transfers of a plan as a numpy structured array: src, dst, offset[ndim], extent[ndim].
py::array transfers_array(const reshard::transfer_plan& p) {
  const auto nd = static_cast<py::ssize_t>(p.src.shape.size());
  py::module_ np = py::module_::import("numpy");
  py::list fields;
  fields.append(py::make_tuple("src", "<i8"));
  fields.append(py::make_tuple("dst", "<i8"));
  fields.append(py::make_tuple("offset", "<i8", py::make_tuple(nd)));
  fields.append(py::make_tuple("extent", "<i8", py::make_tuple(nd)));
  py::dtype dt = py::dtype::from_args(fields);
  const auto rec = static_cast<std::size_t>(16 + 16 * nd);
  if (static_cast<std::size_t>(dt.itemsize()) != rec) throw std::logic_error("reshard: unexpected record size");
  py::array a(dt, std::vector<py::ssize_t>{static_cast<py::ssize_t>(p.transfers.size())});
  auto* out = static_cast<std::int64_t*>(a.mutable_data());
  for (const auto& x : p.transfers) {
    *out++ = x.src;
    *out++ = x.dst;
    for (py::ssize_t i = 0; i < nd; ++i) *out++ = x.where.offset.data()[i];
    for (py::ssize_t i = 0; i < nd; ++i) *out++ = x.where.extent.data()[i];
  }
  return a;
}

// A plan's transfers from Python: Plan.transfers' structured array (src, dst, offset, extent), or
// a list of dicts {"src", "dst", "offset", "shape"} read as a plan's JSON is (transfers_from_json).
std::vector<reshard::transfer> transfers_of(const py::object& xs) {
  py::object names = py::none();
  if (py::hasattr(xs, "dtype")) names = xs.attr("dtype").attr("names");
  if (names.is_none())
    return reshard::transfers_from_json(
        reshard::json_of_text(py::module_::import("json").attr("dumps")(xs).cast<std::string>(), "transfers"),
        "transfers");
  using ints = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>;
  const auto field = [&](const char* name) {
    for (const auto& n : names)
      if (n.cast<std::string>() == name) return ints(xs[py::str(name)]);
    throw py::value_error(std::string("transfers: a structured array needs the fields src, dst, offset, extent "
                                      "(as Plan.transfers), it lacks '") + name + "'");
  };
  const ints src = field("src"), dst = field("dst"), off = field("offset"), ext = field("extent");
  const auto n = static_cast<std::size_t>(src.size());
  const std::size_t nd = off.ndim() == 2 ? static_cast<std::size_t>(off.shape(1)) : 0;
  if (src.ndim() != 1 || off.size() != ext.size() || static_cast<std::size_t>(off.size()) != n * nd)
    throw py::value_error("transfers: a structured array of shape (n,) with offset and extent of shape (n, ndim)");
  std::vector<reshard::transfer> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    out[i].src = src.data()[i];
    out[i].dst = dst.data()[i];
    out[i].where.offset = index_list(off.data() + i * nd, off.data() + (i + 1) * nd);
    out[i].where.extent = index_list(ext.data() + i * nd, ext.data() + (i + 1) * nd);
  }
  return out;
}

reshard::replica_policy policy_of(const std::string& s) {
  if (s == "least_loaded") return reshard::replica_policy::least_loaded;
  if (s == "round_robin") return reshard::replica_policy::round_robin;
  if (s == "nearest") return reshard::replica_policy::nearest;
  throw py::value_error("policy must be 'least_loaded', 'round_robin' or 'nearest', not '" + s + "'");
}

// Seconds per call of reshard::plan(src, dst) in C++ (the best of `repeats` rounds of `calls`
// calls) and the transfers of one plan: for bench/python_plan.py, which compares it with a call
// from Python.
std::pair<double, std::size_t> time_plan(const layout& src, const layout& dst, int calls, int repeats) {
  const py::gil_scoped_release release;
  double best = 1e300;
  std::size_t sink = 0;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int c = 0; c < calls; ++c) sink += reshard::plan(src, dst).transfers.size();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, s / calls);
  }
  return {best, calls > 0 && repeats > 0 ? sink / static_cast<std::size_t>(calls * repeats) : 0};
}

}  // namespace

PYBIND11_MODULE(_reshard, m) {
  m.doc() = "reshard's C++ core: layouts, plans, in-memory conversion and checkpoint workflows";
  m.attr("__version__") = RESHARD_VERSION_STRING;

  error_type() = py::exception<reshard::error>(m, "Error", PyExc_ValueError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const reshard::error& e) {
      raise_reshard_error(e);
    } catch (const reshard::contract_violation& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    } catch (const std::filesystem::filesystem_error& e) {
      PyErr_SetObject(PyExc_OSError, py::make_tuple(e.code().value(), std::string(e.what())).ptr());
    } catch (const cancelled& e) {
      PyErr_SetString(PyExc_KeyboardInterrupt, e.what());
    }
  });

  // -- placements
  py::class_<reshard::shard>(m, "Shard", "DTensor placement: the mesh axis splits tensor dim `dim`")
      .def(py::init([](index_t d) { return reshard::shard{d}; }), "dim"_a)
      .def_readonly("dim", &reshard::shard::dim)
      .def("__eq__", [](const reshard::shard& a, const reshard::shard& b) { return a == b; })
      .def("__repr__", [](const reshard::shard& s) { return "Shard(" + std::to_string(s.dim) + ")"; });
  py::class_<reshard::replicate>(m, "Replicate", "DTensor placement: the mesh axis replicates the tensor")
      .def(py::init<>())
      .def("__eq__", [](const reshard::replicate&, const reshard::replicate&) { return true; })
      .def("__repr__", [](const reshard::replicate&) { return std::string("Replicate()"); });

  // -- layouts
  const auto mindspore = [](const std::vector<index_t>& dev, const py::sequence& map, const std::vector<index_t>& shape,
                            index_t opt_shard_step, index_t opt_shard_size, index_t stage, const std::string& split,
                            const std::optional<std::vector<index_t>>& param_split_shape) {
    reshard::mindspore_options o;
    o.opt = {opt_shard_step, opt_shard_size};
    o.stage = stage;
    o.mode = split_mode_of(split);
    if (param_split_shape) o.param_split_shape = to_index_list(*param_split_shape);
    return reshard::mindspore_layout(to_index_list(dev), tensor_map_of(map), to_index_list(shape), o);
  };
  py::class_<layout>(m, "Layout", R"(A tensor's layout over a grid of devices.

Layout(dev_matrix, tensor_map, shape, ...) is MindSpore's convention (tensor_map entries count
device axes from the right, -1 = unsplit, a tuple = several axes, leftmost outermost); see also
Layout.dtensor, Layout.jax and Layout.full.)")
      .def(py::init(mindspore), "dev_matrix"_a, "tensor_map"_a, "shape"_a, py::kw_only(), "opt_shard_step"_a = 0,
           "opt_shard_size"_a = 0, "stage"_a = 0, "split"_a = "divisible", "param_split_shape"_a = py::none())
      .def_static("mindspore", mindspore, "dev_matrix"_a, "tensor_map"_a, "shape"_a, py::kw_only(),
                  "opt_shard_step"_a = 0, "opt_shard_size"_a = 0, "stage"_a = 0, "split"_a = "divisible",
                  "param_split_shape"_a = py::none(), "The same as Layout(...): MindSpore's convention.")
      .def_static(
          "dtensor",
          [](const std::vector<index_t>& mesh, const py::sequence& placements, const std::vector<index_t>& shape,
             const std::optional<std::vector<std::vector<int>>>& shard_order, const std::string& split,
             index_t first_rank) {
            reshard::dtensor_options o;
            if (shard_order) o.shard_order = *shard_order;
            o.mode = split_mode_of(split);
            o.first_rank = first_rank;
            return reshard::dtensor_layout(to_index_list(mesh), placements_of(placements), to_index_list(shape), o);
          },
          "mesh"_a, "placements"_a, "shape"_a, py::kw_only(), "shard_order"_a = py::none(), "split"_a = "chunk",
          "first_rank"_a = 0,
          "A layout from DTensor placements (Shard(d), Replicate(), or the strings 'S(d)', 'R'), one per mesh axis.")
      .def_static(
          "jax",
          [](const py::object& mesh, const py::sequence& spec, const std::vector<index_t>& shape,
             const std::string& split, index_t first_rank) {
            return reshard::jax_layout(mesh_of(mesh), spec_of(spec), to_index_list(shape), split_mode_of(split),
                                       first_rank);
          },
          "mesh"_a, "spec"_a, "shape"_a, py::kw_only(), "split"_a = "divisible", "first_rank"_a = 0,
          "A layout from a JAX mesh ({name: size}, in axis order) and partition spec (per dim None, a name or a "
          "tuple of names).")
      .def_static(
          "full", [](const std::vector<index_t>& shape, index_t rank) { return reshard::full_layout(to_index_list(shape), rank); },
          "shape"_a, "rank"_a = 0, "The whole tensor on one device, global rank `rank`.")
      .def_property_readonly("dev_matrix", [](const layout& l) { return to_tuple(l.dev_matrix); })
      .def_property_readonly("tensor_map", &tensor_map_list, "MindSpore's tensor map (axes counted from the right)")
      .def_property_readonly("dim_axes", [](const layout& l) { return l.dim_axes; },
                             "per dim, the splitting device axes counted from the left, outermost first")
      .def_property_readonly("shape", [](const layout& l) { return to_tuple(l.shape); })
      .def_property_readonly("split", [](const layout& l) { return std::string(reshard::to_string(l.mode)); })
      .def_property_readonly("opt_shard", [](const layout& l) { return py::make_tuple(l.opt.step, l.opt.size); })
      .def_property_readonly("first_rank", [](const layout& l) { return l.first_rank; })
      .def_property_readonly("ranks", [](const layout& l) { return reshard::num_ranks(l); }, "number of devices")
      .def(
          "box",
          [](const layout& l, index_t rank) {
            const auto b = reshard::box_of(l, rank);
            return py::make_tuple(to_tuple(b.offset), to_tuple(b.extent));
          },
          "rank"_a, "(offset, extent) of the piece global rank `rank` holds")
      .def(
          "slices",
          [](const layout& l, index_t rank) {
            const auto b = reshard::box_of(l, rank);
            py::tuple t(b.offset.size());
            for (std::size_t i = 0; i < b.offset.size(); ++i)
              t[i] = py::slice(b.offset.data()[i], b.offset.data()[i] + b.extent.data()[i], 1);
            return t;
          },
          "rank"_a, "the piece of global rank `rank` as a tuple of slices: full[layout.slices(rank)]")
      .def("__eq__", [](const layout& a, const layout& b) { return a == b; })
      .def("__str__", [](const layout& l) { return reshard::to_string(l); })
      .def("_repr_svg_", [](const layout& l) { return reshard::layout_svg(l); }, "a picture of the layout (SVG)")
      .def("__repr__", [](const layout& l) { return "Layout(" + reshard::to_string(l) + ")"; });

  // -- plans
  py::class_<reshard::transfer_plan>(m, "Plan", "A minimal redistribution plan: transfers (src, dst, box)")
      .def_readonly("src", &reshard::transfer_plan::src)
      .def_readonly("dst", &reshard::transfer_plan::dst)
      .def_property_readonly("transfers", &transfers_array,
                             "numpy structured array: src, dst (global ranks), offset[ndim], extent[ndim]")
      .def(
          "transfer_list",
          [](const reshard::transfer_plan& p) {
            py::list out;
            for (const auto& x : p.transfers)
              out.append(py::make_tuple(x.src, x.dst, to_tuple(x.where.offset), to_tuple(x.where.extent)));
            return out;
          },
          "the transfers as a list of (src, dst, offset, extent)")
      .def(
          "cost",
          [](const reshard::transfer_plan& p, index_t element_bytes) {
            const auto c = p.cost(element_bytes);
            return py::dict("cross_bytes"_a = c.cross_bytes, "local_bytes"_a = c.local_bytes,
                            "lower_bound_bytes"_a = c.lower_bound_bytes, "messages"_a = c.messages,
                            "max_sent_bytes"_a = c.max_sent_bytes, "mean_sent_bytes"_a = c.mean_sent_bytes);
          },
          "element_bytes"_a = 1, "bytes crossing ranks, copied locally, the lower bound, messages, senders' load")
      .def("__len__", [](const reshard::transfer_plan& p) { return p.transfers.size(); })
      .def("_repr_svg_", [](const reshard::transfer_plan& p) { return reshard::plan_svg(p); }, "a picture of the plan (SVG)")
      .def("__repr__", [](const reshard::transfer_plan& p) {
        return "Plan(" + reshard::to_string(p.src) + " -> " + reshard::to_string(p.dst) + ", " +
               std::to_string(p.transfers.size()) + " transfers)";
      });

  m.def(
      "plan",
      [](const layout& src, const layout& dst, const std::string& policy) {
        const auto pol = policy_of(policy);
        const py::gil_scoped_release release;
        return reshard::plan(src, dst, pol);
      },
      "src"_a, "dst"_a, "policy"_a = "least_loaded",
      "The minimal plan moving a tensor from layout src to layout dst (any numbers of ranks).");
  m.def(
      "rank_list",
      [](const layout& src, const layout& dst, index_t rank) { return reshard::rank_list(src, dst, rank); },
      "src"_a, "dst"_a, "rank"_a, "The minimal source ranks target rank `rank` needs, ascending.");
  m.def(
      "check_plan",
      [](const layout& src, const layout& dst, const py::object& transfers, index_t element_bytes,
         std::size_t max_problems) {
        const auto xs = transfers_of(transfers);
        reshard::plan_check r;
        {
          const py::gil_scoped_release release;
          r = reshard::check_plan(src, dst, xs, {max_problems, element_bytes});
        }
        return json_dict(reshard::to_json(r));
      },
      "src"_a, "dst"_a, "transfers"_a, py::kw_only(), "element_bytes"_a = 1, "max_problems"_a = 100,
      "The verdict on a plan from src to dst made by any system (transfers: Plan.transfers, or a list of dicts "
      "{'src', 'dst', 'offset', 'shape'}), as `reshard check-plan --json` prints it: ok, complete, sound, "
      "problems, cost beside the minimal plan's.");
  m.def(
      "check_rank_list",
      [](const layout& src, const layout& dst, index_t rank, const std::vector<index_t>& ranks) {
        return json_dict(reshard::to_json(reshard::check_rank_list(src, dst, rank, ranks)));
      },
      "src"_a, "dst"_a, "rank"_a, "ranks"_a,
      "Is `ranks` (source ranks) enough for target rank `rank`: sufficient, minimal_list, uncovered boxes, "
      "superfluous ranks, kept ranks, and rank_list's minimal one.");
  m.def("convert", &convert, "plan"_a, "shards"_a, py::kw_only(), "threads"_a = 1,
        "Executes `plan` on numpy arrays: shards[i] is source rank first_rank+i's piece (any dtype, C-contiguous, "
        "not copied; None where the plan does not read it). Returns the target ranks' pieces. The GIL is released "
        "while copying.");
  m.def("split", &split, "full"_a, "layout"_a, py::kw_only(), "threads"_a = 1,
        "Cuts the full tensor into the pieces of `layout`, one array per rank.");
  m.def("merge", &merge, "shards"_a, "layout"_a, py::kw_only(), "threads"_a = 1,
        "Puts the pieces of `layout` back together (one replica of each piece is read; the others may be None).");
  m.def("_time_plan", &time_plan, "src"_a, "dst"_a, "calls"_a = 1, "repeats"_a = 3);

  // -- checkpoints
  py::class_<progress_info>(m, "Progress", "Where a checkpoint workflow stands (passed to progress callbacks)")
      .def_readonly("rank", &progress_info::rank, "the target rank being written")
      .def_readonly("parameter", &progress_info::parameter, "the parameter just written")
      .def_readonly("bytes_done", &progress_info::bytes_done)
      .def_readonly("bytes_total", &progress_info::bytes_total)
      .def_readonly("files_done", &progress_info::files_done)
      .def_readonly("files_total", &progress_info::files_total)
      .def("__repr__", [](const progress_info& p) {
        return "Progress(rank=" + std::to_string(p.rank) + ", parameter='" + p.parameter + "', bytes " +
               std::to_string(p.bytes_done) + "/" + std::to_string(p.bytes_total) + ", files " +
               std::to_string(p.files_done) + "/" + std::to_string(p.files_total) + ")";
      });
  m.def("_transform_checkpoints", &transform_checkpoints, "src_dir"_a, "dst_dir"_a, "prefix"_a, "src_strategy"_a,
        "dst_strategy"_a, "jobs"_a, "force"_a, "progress"_a, "opts"_a);
  m.def("_transform_checkpoint_by_rank", &transform_checkpoint_by_rank, "rank"_a, "sources"_a, "out"_a,
        "src_strategy"_a, "dst_strategy"_a, "force"_a, "progress"_a, "opts"_a);
  m.def("_load_checkpoint_by_rank", &load_checkpoint_by_rank, "rank"_a, "sources"_a, "src_strategy"_a,
        "dst_strategy"_a, "progress"_a, "opts"_a);
  m.def("_merge_checkpoints", &merge_checkpoints, "src_dir"_a, "out"_a, "src_strategy"_a, "force"_a, "progress"_a,
        "opts"_a);
  m.def("_split_checkpoint", &split_checkpoint, "file"_a, "dst_dir"_a, "dst_strategy"_a, "prefix"_a, "jobs"_a,
        "force"_a, "progress"_a, "opts"_a);
  m.def("_convert_checkpoint", &convert_checkpoint, "in_file"_a, "out_file"_a, "force"_a, "progress"_a, "opts"_a);
  m.def("_verify_checkpoints", &verify_checkpoints, "src_dir"_a, "dst_dir"_a, "prefix"_a, "src_strategy"_a,
        "dst_strategy"_a, "jobs"_a, "progress"_a, "opts"_a);
  m.def("_verify_merged_checkpoint", &verify_merged_checkpoint, "src_dir"_a, "out"_a, "src_strategy"_a, "progress"_a,
        "opts"_a);
  m.def("_verify_split_checkpoint", &verify_split_checkpoint, "file"_a, "dst_dir"_a, "dst_strategy"_a, "prefix"_a,
        "jobs"_a, "progress"_a, "opts"_a);
  m.def("_verify_converted_checkpoint", &verify_converted_checkpoint, "in_file"_a, "out_file"_a, "progress"_a, "opts"_a);
  m.def(
      "_hold_at_first_progress", [](int fd) { hold_fd.store(fd); }, "fd"_a,
      "Test-only: the next checkpoint workflow writes 'held\\n' to fd at its first progress report and waits "
      "there until it is cancelled (Ctrl-C).");
  m.def(
      "_rank_list_for_transform",
      [](std::int64_t rank, const path& src, const path& dst) {
        const py::gil_scoped_release release;
        return reshard::io::rank_list_for_transform(rank, src, dst);
      },
      "rank"_a, "src_strategy"_a, "dst_strategy"_a);
  m.def(
      "_check_dcp_read_items",
      [](const std::string& text_or_file, bool is_file, std::size_t max_problems) {
        reshard::io::dcp_check r;
        {
          const py::gil_scoped_release release;
          const std::string origin = is_file ? text_or_file : std::string("check_dcp_read_items: items");
          const std::string text =
              is_file ? reshard::io::read_input_file(text_or_file, "check_dcp_read_items") : text_or_file;
          r = reshard::io::check_dcp_read_items(reshard::io::dcp_read_items_from_text(text, origin), max_problems);
        }
        return json_dict(reshard::io::to_json(r));
      },
      "text_or_file"_a, "is_file"_a, "max_problems"_a);
  m.def(
      "_check_rank_list_for_transform",
      [](std::int64_t rank, const std::vector<std::int64_t>& ranks, const path& src, const path& dst) {
        reshard::io::transform_rank_list_check r;
        {
          const py::gil_scoped_release release;
          r = reshard::io::check_rank_list_for_transform(rank, ranks, reshard::io::strategy_layouts(src),
                                                         reshard::io::strategy_layouts(dst));
        }
        return json_dict(reshard::io::to_json(r));
      },
      "rank"_a, "ranks"_a, "src_strategy"_a, "dst_strategy"_a);
  m.def(
      "_merge_pipeline_strategies",
      [](const path& src_dir, const path& dst_file, bool force) {
        const py::gil_scoped_release release;
        reshard::io::merge_pipeline_strategies(src_dir, dst_file, force);
      },
      "src_dir"_a, "dst_file"_a, "force"_a);
}
