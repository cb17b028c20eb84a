// reshard/version.hpp: the library's version (kept equal to project(VERSION) in CMakeLists.txt).
#pragma once

#define RESHARD_VERSION_MAJOR 0
#define RESHARD_VERSION_MINOR 1
#define RESHARD_VERSION_PATCH 0
#define RESHARD_VERSION_STRING "0.1.0"

namespace reshard {
inline constexpr const char* version = RESHARD_VERSION_STRING;
}  // namespace reshard
