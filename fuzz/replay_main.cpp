// fuzz/replay_main.cpp: a main for the fuzz targets without libFuzzer (any compiler). Runs
// LLVMFuzzerTestOneInput once on every file given, and on every file under every directory
// given (recursively, in name order), so that ctest replays each target's corpus:
//
//   fuzz_ckpt fuzz/corpus/ckpt [more dirs or files...]
//
// Prints the number of inputs run; exits 1 when given no input at all. A finding aborts the
// process (see check.hpp); a signal handler first prints the input being run.
#include <algorithm>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <unistd.h>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

char current[4096];  // the input being run, for the signal handler

extern "C" void report_signal(int sig) {
  const char head[] = "replay: fatal signal while running ";
  (void)!::write(2, head, sizeof head - 1);
  (void)!::write(2, current, std::strlen(current));
  (void)!::write(2, "\n", 1);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) std::signal(sig, report_signal);
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    const fs::path arg = argv[i];
    if (fs::is_directory(arg)) {
      for (const auto& e : fs::recursive_directory_iterator(arg))
        if (e.is_regular_file()) files.push_back(e.path());
    } else if (fs::is_regular_file(arg)) {
      files.push_back(arg);
    } else {
      std::fprintf(stderr, "replay: %s: no such file or directory\n", argv[i]);
      return 1;
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    std::fprintf(stderr, "usage: %s DIR_OR_FILE... (no input found)\n", argv[0]);
    return 1;
  }
  for (const auto& f : files) {
    std::snprintf(current, sizeof current, "%s", f.c_str());
    std::ifstream in(f, std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // a copy of exactly the file's size, so that AddressSanitizer sees reads past the end
    std::vector<std::uint8_t> data(bytes.begin(), bytes.end());
    LLVMFuzzerTestOneInput(data.data(), data.size());
  }
  std::printf("replay: %zu inputs ran without a finding\n", files.size());
  return 0;
}
