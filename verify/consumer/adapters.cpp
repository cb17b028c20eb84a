// Linked to the opt-in components a consumer asked for (reshard::static, reshard::io,
// reshard::xtensor): checks that their imported targets bring usable include directories and
// libraries. Kept trivial so that it compiles in a moment; main.cpp exercises the core and
// static_layout.cpp the component static.
#include <reshard/error.hpp>

int main() {
  try {
    reshard::report_error("consumer: adapters link");
  } catch (const reshard::error&) {
    return 0;
  }
  return 1;
}
