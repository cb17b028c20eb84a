// reshard/error.hpp: the three error tiers of reshard (see docs/errors.md).
//
//  1. compile-time violations: static_assert, message starts with the operation's name;
//  2. preconditions inside the library: RESHARD_EXPECTS(cond, "op: what"), usable in constexpr;
//     during constant evaluation a violation is a compile error, at run time it calls the
//     replaceable violation handler (default: throw reshard::contract_violation);
//  3. bad input at the boundary (files, user layouts, impossible requests): reshard::error,
//     thrown from the single non-constexpr report_error(), naming the file, parameter and reason.
#pragma once

#include <atomic>
#include <stdexcept>
#include <string>

namespace reshard {

/// Bad input at the boundary: malformed files, invalid layouts, impossible conversions.
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A precondition of the library was violated by its caller (a bug in the calling code).
class contract_violation : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

/// Throws reshard::error with `message`. Every boundary error goes through here.
[[noreturn]] inline void report_error(const std::string& message) { throw error(message); }

/// Signature of the handler called on a RESHARD_EXPECTS violation at run time.
using violation_handler = void (*)(const char* condition, const char* what, const char* file,
                                   int line);

namespace detail {
[[noreturn]] inline void throw_violation(const char* condition, const char* what, const char* file,
                                         int line) {
  throw contract_violation(std::string(what) + " (" + condition + ") at " + file + ":" +
                           std::to_string(line));
}
inline std::atomic<violation_handler>& handler_slot() {
  static std::atomic<violation_handler> slot{&throw_violation};
  return slot;
}
// Not constexpr on purpose: reaching it during constant evaluation is a compile error that
// names the violated condition.
[[noreturn]] inline void violation(const char* condition, const char* what, const char* file,
                                   int line) {
  handler_slot().load()(condition, what, file, line);
  throw contract_violation(what);  // a handler that returns is not allowed to continue
}
}  // namespace detail

/// Replaces the run-time violation handler; returns the previous one. The handler must not
/// return (throw or terminate).
inline violation_handler set_violation_handler(violation_handler h) {
  return detail::handler_slot().exchange(h ? h : &detail::throw_violation);
}

}  // namespace reshard

#define RESHARD_EXPECTS(cond, what)                                              \
  ((cond) ? static_cast<void>(0)                                                 \
          : ::reshard::detail::violation(#cond, what, __FILE__, __LINE__))
