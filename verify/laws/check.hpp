// verify/laws/check.hpp: how the law checkers report.
//
// A law checker is a function returning std::string: empty when the law holds, otherwise what
// broke, naming the layouts in reshard's notation. The same checker serves RapidCheck
// properties (RC_LAW) and GoogleTest examples (EXPECT_LAW).
#pragma once

#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <string>

#include "../testing.hpp"
#include "reshard/error.hpp"

#define RC_LAW(...)                                           \
  do {                                                        \
    const std::string reshard_law_why_ = (__VA_ARGS__);       \
    if (!reshard_law_why_.empty()) RC_FAIL(reshard_law_why_); \
  } while (0)

#define EXPECT_LAW(...)                                        \
  do {                                                         \
    const std::string reshard_law_why_ = (__VA_ARGS__);        \
    EXPECT_TRUE(reshard_law_why_.empty()) << reshard_law_why_; \
  } while (0)

using reshard_test::error_of;  // verify/testing.hpp
