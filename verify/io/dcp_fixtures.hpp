// verify/io/dcp_fixtures.hpp: the DCP checkpoints torch 1.13 wrote (verify/data/dcp/) and the
// values torch loaded from each (<name>.expected.json), for the DCP tests.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace reshard_test {

/// verify/data/dcp of the source tree (RESHARD_SOURCE_DIR, which ctest sets).
inline std::filesystem::path dcp_fixtures() {
  const char* src = std::getenv("RESHARD_SOURCE_DIR");
  EXPECT_TRUE(src && *src) << "RESHARD_SOURCE_DIR is not set";
  return (src ? std::filesystem::path(src) : std::filesystem::path(".")) / "verify/data/dcp";
}

/// What torch loaded from fixture `name`.
inline nlohmann::json dcp_expected(const std::string& name) {
  std::ifstream in(dcp_fixtures() / (name + ".expected.json"));
  EXPECT_TRUE(in) << name;
  return nlohmann::json::parse(in);
}

}  // namespace reshard_test
