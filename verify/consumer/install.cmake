# cmake -DBUILD_DIR=<build> -DPREFIX=<prefix> [-DCONFIG=<config>] -P install.cmake
# Installs reshard's component "reshard" (headers and CMake package) into a fresh PREFIX.
foreach(var BUILD_DIR PREFIX)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "install.cmake: ${var} is not set")
  endif()
endforeach()
file(REMOVE_RECURSE "${PREFIX}")
set(config_args)
if(CONFIG)
  set(config_args --config "${CONFIG}")
endif()
execute_process(
  COMMAND "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${PREFIX}" --component reshard
          ${config_args}
  RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "install.cmake: cmake --install failed (${result})")
endif()
if(NOT EXISTS "${PREFIX}/share/cmake/reshard/reshardConfig.cmake")
  message(FATAL_ERROR "install.cmake: ${PREFIX}/share/cmake/reshard/reshardConfig.cmake is missing")
endif()
