# Helpers for reshard's own targets (tests, benchmarks, examples, fuzzers). Nothing here touches
# global flags or targets of a project that consumes reshard.
include_guard(GLOBAL)

# reshard_set_warnings(<target>...): the project's warnings on our own compiled targets only;
# -Werror (/WX) when RESHARD_WERROR is ON. Also ISO C++ without compiler extensions (-std=c++20,
# not gnu++20), so that -Wpedantic checks what users of other compilers will see.
function(reshard_set_warnings)
  foreach(target IN LISTS ARGN)
    set_target_properties(${target} PROPERTIES CXX_EXTENSIONS OFF)
    target_compile_options(${target} PRIVATE
      $<$<CXX_COMPILER_ID:GNU,Clang,AppleClang>:-Wall -Wextra -Wpedantic>
      $<$<CXX_COMPILER_ID:MSVC>:/W4 /permissive->
      $<$<AND:$<BOOL:${RESHARD_WERROR}>,$<CXX_COMPILER_ID:GNU,Clang,AppleClang>>:-Werror>
      $<$<AND:$<BOOL:${RESHARD_WERROR}>,$<CXX_COMPILER_ID:MSVC>>:/WX>)
  endforeach()
endfunction()

# reshard_link_adapters(<target>): link the opt-in adapter targets that this build defines
# (reshard::io, reshard::xtensor), for programs that may use them.
function(reshard_link_adapters target)
  foreach(adapter io xtensor)
    if(TARGET reshard::${adapter})
      target_link_libraries(${target} PRIVATE reshard::${adapter})
    endif()
  endforeach()
endfunction()
