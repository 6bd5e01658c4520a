# Decides whether the CUDA+NCCL worker backend is built, from the cache
# string ZEROSTATE_CUDA:
#   AUTO (default)  built when a working nvcc and NCCL are found, so that CI
#                   (CUDA and NCCL installed, no GPU) compiles it and catches
#                   compile breaks; skipped, with the reason, when not.
#   ON              built; configuration fails naming what is missing.
#   OFF             never built (sanitizer and fuzzer builds: nvcc does not
#                   take -fsanitize).
# Sets ZEROSTATE_CUDA_ENABLED (what the build files test) and, when it is
# true, enables the CUDA language, finds CUDAToolkit and defines the
# imported target zerostate_nccl. Prints which it chose and why.
#
# A plain string and not option(): option() turns any value other than ON
# into OFF, which is how an earlier AUTO default never detected anything.

set(ZEROSTATE_CUDA AUTO CACHE STRING
    "Build the CUDA+NCCL worker backend: AUTO (when nvcc and NCCL are found), ON (fail if they are not), OFF")
set_property(CACHE ZEROSTATE_CUDA PROPERTY STRINGS AUTO ON OFF)

# Build dirs configured before this was a string hold a BOOL ON/OFF; take
# CMake's other spellings of true and false too.
string(TOUPPER "${ZEROSTATE_CUDA}" _zs_cuda_mode)
if(_zs_cuda_mode MATCHES "^(ON|YES|TRUE|Y|1)$")
  set(_zs_cuda_mode ON)
elseif(_zs_cuda_mode MATCHES "^(OFF|NO|FALSE|N|0)$")
  set(_zs_cuda_mode OFF)
elseif(NOT _zs_cuda_mode STREQUAL "AUTO")
  message(FATAL_ERROR "ZEROSTATE_CUDA=${ZEROSTATE_CUDA}: expected AUTO, ON or OFF")
endif()

# Sets <out_reason> to why the backend cannot be built here, or to "" when
# it can; on success also sets ZEROSTATE_NCCL_INCLUDE_DIR/_LIBRARY and
# _zs_nccl_version. Looks only; enables nothing.
function(zerostate_cuda_missing out_reason)
  if(ZEROSTATE_SANITIZE)
    set(${out_reason} "ZEROSTATE_SANITIZE is ON and nvcc does not take -fsanitize" PARENT_SCOPE)
    return()
  endif()

  # nvcc: an explicit CMAKE_CUDA_COMPILER or CUDACXX, else nvcc on PATH
  # (check_language tries to enable CUDA in a scratch project, so a broken
  # nvcc counts as missing), else the toolkit's usual place. check_language
  # caches its answer: a NOTFOUND stays until the cache entry is removed.
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    find_program(_zs_nvcc_on_path nvcc NO_CACHE)
    if(NOT _zs_nvcc_on_path)
      set(ENV{CUDACXX} /usr/local/cuda/bin/nvcc)
    endif()
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(NOT CMAKE_CUDA_COMPILER)
    set(${out_reason} "no working CUDA compiler (none in CMAKE_CUDA_COMPILER or CUDACXX, no nvcc on PATH or at /usr/local/cuda/bin/nvcc, or it failed to compile: see CMakeFiles/CMakeError.log)" PARENT_SCOPE)
    return()
  elseif(NOT EXISTS "${CMAKE_CUDA_COMPILER}")
    set(${out_reason} "CMAKE_CUDA_COMPILER=${CMAKE_CUDA_COMPILER} does not exist" PARENT_SCOPE)
    return()
  endif()

  # NCCL: next to the toolkit of that nvcc, under NCCL_ROOT (CMake or the
  # environment) or NCCL_HOME, or in the system's directories (Debian's
  # libnccl-dev).
  get_filename_component(_zs_cuda_root "${CMAKE_CUDA_COMPILER}" DIRECTORY)
  get_filename_component(_zs_cuda_root "${_zs_cuda_root}" DIRECTORY)
  set(_zs_nccl_hints "${_zs_cuda_root}" ${NCCL_ROOT} $ENV{NCCL_ROOT} $ENV{NCCL_HOME})
  find_path(ZEROSTATE_NCCL_INCLUDE_DIR nccl.h HINTS ${_zs_nccl_hints} PATH_SUFFIXES include
            DOC "Directory of nccl.h (the CUDA worker backend)")
  find_library(ZEROSTATE_NCCL_LIBRARY nccl HINTS ${_zs_nccl_hints} PATH_SUFFIXES lib64 lib
               DOC "libnccl (the CUDA worker backend)")
  # (Values given with -D are taken as they are, so check them.)
  if(NOT EXISTS "${ZEROSTATE_NCCL_INCLUDE_DIR}/nccl.h" OR NOT EXISTS "${ZEROSTATE_NCCL_LIBRARY}")
    set(${out_reason} "nvcc ${CMAKE_CUDA_COMPILER} found, but no NCCL (nccl.h: ${ZEROSTATE_NCCL_INCLUDE_DIR}, libnccl: ${ZEROSTATE_NCCL_LIBRARY}; looked in ${_zs_cuda_root}, NCCL_ROOT, NCCL_HOME and the system directories; -DNCCL_ROOT or the environment's NCCL_ROOT names another)" PARENT_SCOPE)
    return()
  endif()
  file(STRINGS "${ZEROSTATE_NCCL_INCLUDE_DIR}/nccl.h" _zs_nccl_defs REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
  string(REGEX REPLACE "[^;]*NCCL_[A-Z]+ +([0-9]+)[^;]*" "\\1" _zs_nccl_version "${_zs_nccl_defs}")
  string(REPLACE ";" "." _zs_nccl_version "${_zs_nccl_version}")
  set(_zs_nccl_version "${_zs_nccl_version}" PARENT_SCOPE)
  set(${out_reason} "" PARENT_SCOPE)
endfunction()

# The backend is not built here: fails for ON, says why for AUTO. The
# caller returns right after.
macro(_zs_cuda_unavailable reason)
  if(_zs_cuda_mode STREQUAL "ON")
    message(FATAL_ERROR "ZEROSTATE_CUDA=ON, but the CUDA worker backend cannot be built: ${reason}. "
                        "Configure with -DZEROSTATE_CUDA=AUTO or OFF to build without it.")
  endif()
  message(STATUS "zerostate: CUDA backend OFF (ZEROSTATE_CUDA=AUTO: ${reason})")
endmacro()

set(ZEROSTATE_CUDA_ENABLED OFF)
if(_zs_cuda_mode STREQUAL "OFF")
  message(STATUS "zerostate: CUDA backend OFF (ZEROSTATE_CUDA=OFF)")
  return()
endif()

zerostate_cuda_missing(_zs_cuda_missing)
if(_zs_cuda_missing)
  _zs_cuda_unavailable("${_zs_cuda_missing}")
  return()
endif()

# Hopper (the H200 machines) and its PTX; -DCMAKE_CUDA_ARCHITECTURES=... overrides.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 90-real 90-virtual)
endif()
enable_language(CUDA)
find_package(CUDAToolkit)
if(NOT TARGET CUDA::cublas OR NOT TARGET CUDA::cudart_static)
  _zs_cuda_unavailable("the CUDA toolkit of ${CMAKE_CUDA_COMPILER} (${CUDAToolkit_LIBRARY_DIR}) has no cuBLAS or static cudart")
  return()
endif()
add_library(zerostate_nccl INTERFACE IMPORTED)
target_include_directories(zerostate_nccl INTERFACE "${ZEROSTATE_NCCL_INCLUDE_DIR}")
target_link_libraries(zerostate_nccl INTERFACE "${ZEROSTATE_NCCL_LIBRARY}")
set(ZEROSTATE_CUDA_ENABLED ON)
string(REPLACE ";" " " _zs_cuda_archs "${CMAKE_CUDA_ARCHITECTURES}")
message(STATUS "zerostate: CUDA backend ON (ZEROSTATE_CUDA=${_zs_cuda_mode}: nvcc ${CMAKE_CUDA_COMPILER} "
               "${CMAKE_CUDA_COMPILER_VERSION}, NCCL ${_zs_nccl_version} at ${ZEROSTATE_NCCL_LIBRARY}, "
               "architectures ${_zs_cuda_archs})")
