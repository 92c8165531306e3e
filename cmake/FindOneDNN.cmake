# Finds oneDNN (Debian: libdnnl-dev) from its header and library alone and defines DNNL::dnnl.
#
# Why not find_package(dnnl CONFIG): Debian's dnnl-config.cmake is generated for its GPU build
# (DNNL_GPU_RUNTIME=OCL) and runs find_package(OpenCL REQUIRED), which needs the OpenCL headers of
# ocl-icd-opencl-dev, a package libdnnl-dev only *recommends*. attnlab uses oneDNN's CPU sgemm
# (dnnl_sgemm, C API) and nothing of its GPU side, so it needs exactly what libdnnl-dev itself
# ships: oneapi/dnnl/dnnl.h and libdnnl.so. libdnnl.so's own runtime needs (libOpenCL.so.1,
# libgomp) are hard dependencies of libdnnl2, so the link resolves on any system apt can make.
# scripts/check_packages.sh checks that every file the build touches comes from a package that
# scripts/setup.sh installs (or one of their hard dependencies).
#
# Defines: OneDNN_FOUND, OneDNN_INCLUDE_DIR, OneDNN_LIBRARY, OneDNN_VERSION, target DNNL::dnnl.
find_path(OneDNN_INCLUDE_DIR NAMES oneapi/dnnl/dnnl.h)
find_library(OneDNN_LIBRARY NAMES dnnl)
if(OneDNN_INCLUDE_DIR AND EXISTS "${OneDNN_INCLUDE_DIR}/oneapi/dnnl/dnnl_version.h")
  file(STRINGS "${OneDNN_INCLUDE_DIR}/oneapi/dnnl/dnnl_version.h" _dnnl_ver
       REGEX "#define DNNL_VERSION_(MAJOR|MINOR|PATCH) ")
  set(OneDNN_VERSION "")
  foreach(part MAJOR MINOR PATCH)
    string(REGEX MATCH "DNNL_VERSION_${part} ([0-9]+)" _m "${_dnnl_ver}")
    list(APPEND OneDNN_VERSION "${CMAKE_MATCH_1}")
  endforeach()
  string(REPLACE ";" "." OneDNN_VERSION "${OneDNN_VERSION}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(OneDNN
  REQUIRED_VARS OneDNN_LIBRARY OneDNN_INCLUDE_DIR
  VERSION_VAR OneDNN_VERSION
  REASON_FAILURE_MESSAGE "install Debian's libdnnl-dev (scripts/setup.sh does)")
if(OneDNN_FOUND AND NOT TARGET DNNL::dnnl)
  add_library(DNNL::dnnl UNKNOWN IMPORTED)
  set_target_properties(DNNL::dnnl PROPERTIES
    IMPORTED_LOCATION "${OneDNN_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${OneDNN_INCLUDE_DIR}")
endif()
mark_as_advanced(OneDNN_INCLUDE_DIR OneDNN_LIBRARY)
