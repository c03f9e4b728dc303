# FindDNNL.cmake — locate oneDNN (libdnnl) by its header and library.
#
# Debian's libdnnl-dev ships a CMake package config (dnnl-config.cmake) that
# calls find_package(OpenCL REQUIRED), because the library was built with an
# OpenCL GPU runtime. distflow uses only oneDNN's CPU engine, so it needs no
# OpenCL headers; finding the header and library directly keeps a fresh Debian
# machine configuring with just libdnnl-dev installed.
#
# Defines DNNL_FOUND, DNNL_INCLUDE_DIR, DNNL_LIBRARY, DNNL_VERSION and the
# imported target DNNL::dnnl.
find_path(DNNL_INCLUDE_DIR NAMES oneapi/dnnl/dnnl.h)
find_library(DNNL_LIBRARY NAMES dnnl)

if(DNNL_INCLUDE_DIR AND EXISTS "${DNNL_INCLUDE_DIR}/oneapi/dnnl/dnnl_version.h")
  file(STRINGS "${DNNL_INCLUDE_DIR}/oneapi/dnnl/dnnl_version.h" _dnnl_ver
       REGEX "#define DNNL_VERSION_(MAJOR|MINOR|PATCH) ")
  foreach(_part MAJOR MINOR PATCH)
    string(REGEX REPLACE ".*#define DNNL_VERSION_${_part} ([0-9]+).*" "\\1" _v_${_part} "${_dnnl_ver}")
  endforeach()
  set(DNNL_VERSION "${_v_MAJOR}.${_v_MINOR}.${_v_PATCH}")
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(DNNL
  REQUIRED_VARS DNNL_LIBRARY DNNL_INCLUDE_DIR
  VERSION_VAR DNNL_VERSION)

if(DNNL_FOUND AND NOT TARGET DNNL::dnnl)
  add_library(DNNL::dnnl UNKNOWN IMPORTED)
  set_target_properties(DNNL::dnnl PROPERTIES
    IMPORTED_LOCATION "${DNNL_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${DNNL_INCLUDE_DIR}")
endif()
mark_as_advanced(DNNL_INCLUDE_DIR DNNL_LIBRARY)
