# Finds libtorch's C++ API for adapters/libtorch and defines the imported target
# zs::torch (headers, torch_cpu, c10) and ZS_HAVE_TORCH.
#
#   ZS_TORCH      AUTO (default: build the adapter where Torch is found), ON (fail
#                 without it), OFF
#   ZS_TORCH_DIR  a libtorch folder (the zip from pytorch.org: include/, lib/) or
#                 the torch package folder of a Python installation; default: the
#                 `torch` package of python3, located without importing it
#
# Installed beside zeroshard's CMake package too: find_package(zeroshard
# COMPONENTS torch) includes it (zeroshardTorch.cmake) with two more inputs,
#   ZS_TORCH_DEFAULT_DIR     the folder the adapter was built against (taken
#                            when ZS_TORCH_DIR is not set, before python3's)
#   ZS_TORCH_EXPECT_VERSION  that libtorch's version: another major.minor is
#                            refused, as the adapter's C++ ABI follows libtorch's
# and sets ZS_TORCH_VERSION, and zs_torch_why where it finds none.
#
# Why not find_package(Torch): PyPI's torch wheel is a CUDA build, and its
# TorchConfig.cmake enables CUDA, looks for cuDNN and links libtorch.so, which
# pulls in libtorch_cuda.so and about 3 GB of nvidia-* wheels at run time. The
# adapter needs only the CPU half (the nn/autograd/optim C++ API lives in
# libtorch_cpu.so and libc10.so), which loads with libcudart and libcupti alone
# (a CUDA toolkit, or the two small nvidia-cuda-runtime/-cupti wheels that
# scripts/test installs next to the torch wheel where no toolkit is present).
set(ZS_TORCH AUTO CACHE STRING "Build the libtorch adapter (AUTO|ON|OFF)")
set(ZS_TORCH_DIR "" CACHE PATH "libtorch folder or Python torch package folder (default: python3's torch)")

set(ZS_HAVE_TORCH OFF)
if(ZS_TORCH STREQUAL "OFF")
  return()
endif()

set(zs_torch_root "${ZS_TORCH_DIR}")
if(NOT zs_torch_root)
  set(zs_torch_root "${ZS_TORCH_DEFAULT_DIR}")
endif()
if(NOT zs_torch_root)
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_Interpreter_FOUND)
    # find_spec locates the package without running its __init__ (which needs the
    # wheel's CUDA dependencies when it is a CUDA build installed with --no-deps)
    execute_process(COMMAND ${Python3_EXECUTABLE} -c
                            "import importlib.util as u; s = u.find_spec('torch'); print(list(s.submodule_search_locations)[0] if s else '')"
                    OUTPUT_VARIABLE zs_torch_root OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  endif()
endif()

set(zs_torch_why "")
if(NOT zs_torch_root)
  set(zs_torch_why "no torch package for python3 (pip install torch) and ZS_TORCH_DIR is not set")
elseif(NOT EXISTS "${zs_torch_root}/include/torch/csrc/api/include/torch/torch.h")
  set(zs_torch_why "${zs_torch_root} has no include/torch/csrc/api/include/torch/torch.h (not a libtorch folder)")
else()
  # looked for again each time (a cached answer would outlive a new ZS_TORCH_DIR)
  unset(ZS_TORCH_CPU_LIB CACHE)
  unset(ZS_TORCH_C10_LIB CACHE)
  find_library(ZS_TORCH_CPU_LIB torch_cpu PATHS "${zs_torch_root}/lib" NO_DEFAULT_PATH)
  find_library(ZS_TORCH_C10_LIB c10 PATHS "${zs_torch_root}/lib" NO_DEFAULT_PATH)
  if(NOT ZS_TORCH_CPU_LIB OR NOT ZS_TORCH_C10_LIB)
    set(zs_torch_why "${zs_torch_root}/lib lacks libtorch_cpu or libc10")
  endif()
  # the version: torch/headeronly/version.h (2.9 and later), else the C++ API's
  set(ZS_TORCH_VERSION "")
  foreach(h headeronly/version.h csrc/api/include/torch/version.h)
    if(NOT ZS_TORCH_VERSION AND EXISTS "${zs_torch_root}/include/torch/${h}")
      file(STRINGS "${zs_torch_root}/include/torch/${h}" zs_torch_vl REGEX "#define TORCH_VERSION_(MAJOR|MINOR|PATCH) ")
      string(REGEX REPLACE ".*MAJOR ([0-9]+).*MINOR ([0-9]+).*PATCH ([0-9]+).*" "\\1.\\2.\\3" ZS_TORCH_VERSION "${zs_torch_vl}")
    endif()
  endforeach()
  string(REGEX MATCH "^[0-9]+\\.[0-9]+" zs_torch_mm "${ZS_TORCH_VERSION}")
  string(REGEX MATCH "^[0-9]+\\.[0-9]+" zs_torch_want "${ZS_TORCH_EXPECT_VERSION}")
  if(NOT zs_torch_why AND zs_torch_want AND NOT zs_torch_mm STREQUAL zs_torch_want)
    set(zs_torch_why "${zs_torch_root} is libtorch ${ZS_TORCH_VERSION}, but zeroshard's adapter was built against ${ZS_TORCH_EXPECT_VERSION} (${ZS_TORCH_DEFAULT_DIR}): set ZS_TORCH_DIR to a libtorch ${zs_torch_want}, or build zeroshard against this one")
  endif()
  # a project that found Torch itself (find_package(Torch)) links that one too:
  # the adapter's must be of the same major.minor
  string(REGEX MATCH "^[0-9]+\\.[0-9]+" zs_torch_theirs "${Torch_VERSION}")
  if(NOT zs_torch_why AND zs_torch_want AND zs_torch_theirs AND NOT zs_torch_theirs STREQUAL zs_torch_want)
    set(zs_torch_why "this project's find_package(Torch) found libtorch ${Torch_VERSION}, but zeroshard's adapter was built against ${ZS_TORCH_EXPECT_VERSION}: use that libtorch, or build zeroshard against this one")
  endif()
  # one libtorch per CMake run (the imported target is global)
  get_property(zs_torch_first GLOBAL PROPERTY ZS_TORCH_ROOT_USED)
  if(NOT zs_torch_why AND zs_torch_first AND NOT zs_torch_first STREQUAL zs_torch_root)
    set(zs_torch_why "this project already uses libtorch from ${zs_torch_first} for zeroshard; ${zs_torch_root} is another (one per project)")
  endif()
endif()
if(zs_torch_why)
  if(ZS_TORCH STREQUAL "ON")
    message(FATAL_ERROR "ZS_TORCH=ON but ${zs_torch_why}")
  endif()
  message(STATUS "libtorch adapter: skipped (${zs_torch_why})")
  return()
endif()

# The C++ standard the headers demand: libtorch 2.x before 2.10 asks for C++17,
# later ones for C++20 (their TorchConfig.cmake says which); the adapter's own
# code is C++17.
set(zs_torch_std cxx_std_17)
if(EXISTS "${zs_torch_root}/share/cmake/Torch/TorchConfig.cmake")
  file(READ "${zs_torch_root}/share/cmake/Torch/TorchConfig.cmake" zs_torch_cfg)
  if(zs_torch_cfg MATCHES "cxx_std_20")
    set(zs_torch_std cxx_std_20)
  endif()
endif()
# Pre-cxx11-ABI builds (old libtorch zips) say so in their TorchConfig's flags
set(zs_torch_defs "")
if(zs_torch_cfg MATCHES "_GLIBCXX_USE_CXX11_ABI=0")
  set(zs_torch_defs _GLIBCXX_USE_CXX11_ABI=0)
endif()

# once per CMake run (a project may find zeroshard's torch component from
# several directories; the target is global)
if(TARGET zs_torch_imported)
  set(ZS_TORCH_ROOT "${zs_torch_root}")
  set(ZS_TORCH_LIBDIR "${zs_torch_root}/lib")
  set(ZS_HAVE_TORCH ON)
  return()
endif()
add_library(zs_torch_imported INTERFACE IMPORTED GLOBAL)
set_property(GLOBAL PROPERTY ZS_TORCH_ROOT_USED "${zs_torch_root}")
target_include_directories(zs_torch_imported SYSTEM INTERFACE "${zs_torch_root}/include"
                                                               "${zs_torch_root}/include/torch/csrc/api/include")
# by name with the folder on the link and run paths: given as full paths, CMake
# would warn that the folder's own libgomp.so.1 may hide the compiler's (both are
# GNU OpenMP; the loader takes whichever comes first, which works either way)
target_link_options(zs_torch_imported INTERFACE "-L${zs_torch_root}/lib" "-Wl,-rpath,${zs_torch_root}/lib")
target_link_libraries(zs_torch_imported INTERFACE torch_cpu c10)
target_compile_features(zs_torch_imported INTERFACE ${zs_torch_std})
if(zs_torch_defs)
  target_compile_definitions(zs_torch_imported INTERFACE ${zs_torch_defs})
endif()
add_library(zs::torch ALIAS zs_torch_imported)
set(ZS_TORCH_ROOT "${zs_torch_root}")
set(ZS_TORCH_LIBDIR "${zs_torch_root}/lib")
set(ZS_HAVE_TORCH ON)
message(STATUS "libtorch adapter: torch_cpu + c10 ${ZS_TORCH_VERSION} from ${zs_torch_root} (${zs_torch_std})")
