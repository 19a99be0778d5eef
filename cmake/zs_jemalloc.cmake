# jemalloc, the host allocator (src/memory): defines the INTERFACE target
# zs_jemalloc (headers, and the link for targets built from the layers) and the
# OBJECT target zs_jemalloc_obj (jemalloc inside libzeroshard, .so and .a).
#
# zeroshard builds jemalloc itself, from Debian's source package, with Debian's
# amd64 options plus:
#   --disable-initial-exec-tls   general-dynamic TLS: any process can dlopen it
#   --with-jemalloc-prefix=zs_je_, --with-private-namespace=zs_je_private_,
#   --without-export             its own names, hidden: the host program's malloc
#                                (glibc's or its own jemalloc) is untouched
# and links its objects into libzeroshard as one more layer object, so nothing
# extra is installed or loaded. Tuning it at run time: ZS_JE_MALLOC_CONF
# (jemalloc's MALLOC_CONF under our prefix). Builds jemalloc once per build
# folder (about a minute on two cores).
#
# Why not Debian's libjemalloc.so.2 (libjemalloc-dev): it is built with
# initial-exec TLS, whose block (2.6 KiB) must come from the static TLS surplus
# glibc keeps for libraries loaded after start-up, which is smaller; so
# dlopen("libzeroshard.so") from Python, a plugin host or a framework failed
# ("cannot allocate memory in static TLS block"). And it defines malloc: a
# program that links libzeroshard.a, or the library's dependencies as well (the
# tests and the libtorch adapter did), had its own and its other libraries'
# malloc replaced (libtorch's memory then stayed with jemalloc: test_libtorch_mem's
# resident-set check failed). Its libjemalloc_pic.a is no way
# out: the same initial-exec relocations, and it defines malloc/free. So there is
# no SYSTEM mode (there was one, the fallback when the source was missing; every
# build it made failed test_dlopen).
#
# The source, first found of:
#   -DZS_JEMALLOC_SOURCE=path    a jemalloc release tarball (jemalloc-5.x.tar.bz2
#                                from github.com/jemalloc/jemalloc/releases, or
#                                Debian's jemalloc_*.orig.tar.*) or an unpacked tree
#   .debs/jemalloc_*.orig.tar.*  in the source folder (scripts/gpu-deps carries it)
#   fetched now, at configure time, into .debs/ (the build folder's _deps/.debs
#   when the source folder is read-only) by scripts/lib.sh zs_fetch_jemalloc_source:
#   `apt-get source --download-only jemalloc`, checked against the archive's
#   signed index; a few seconds, once per clone.
# Without any (no network, no apt-get) the configure stops and says how to get one:
# a library without jemalloc would lack the pinned arena (src/memory/pinned.c is a
# jemalloc arena with our extent hooks) and the big-buffer arena (host.c).
include(ExternalProject)

if(ZS_JEMALLOC STREQUAL "SYSTEM")
  message(FATAL_ERROR "ZS_JEMALLOC=SYSTEM is gone: a libzeroshard linked to the system's libjemalloc cannot be "
                      "dlopened (initial-exec TLS) and takes over the malloc of a program that links it statically. "
                      "zeroshard builds its own private jemalloc; drop -DZS_JEMALLOC (a build folder that has it: "
                      "-UZS_JEMALLOC; cmake/zs_jemalloc.cmake says where the source comes from)")
endif()
unset(ZS_JEMALLOC CACHE) # AUTO or BUNDLED from an older build folder: what is now the only way
set(ZS_JEMALLOC_SOURCE "" CACHE PATH
    "jemalloc source: a release tarball or unpacked tree; default: .debs/jemalloc_*.orig.tar.*, fetched with apt-get source when missing")
set(ZS_JEMALLOC_FROM_BUILD "" CACHE PATH
    "a build folder of this source whose compiled jemalloc to link instead of compiling one (same compiler; CI's sanitizer build takes the main build's)")

# jemalloc's own configure options. Debian's page options (debian/rules): 4 KiB
# pages on x86, 64 KiB elsewhere, so the library runs on any kernel page size up
# to that. Nothing here depends on the build type or ZS_SANITIZE (jemalloc is
# compiled with its own flags), so build folders that differ only in those can
# share one compiled jemalloc: ZS_JEMALLOC_FROM_BUILD.
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64|i.86)$")
  set(zs_je_lg_page 12)
else()
  set(zs_je_lg_page 16)
endif()
set(zs_je_options --with-jemalloc-prefix=zs_je_ --with-private-namespace=zs_je_private_ --without-export
                  --disable-initial-exec-tls --disable-shared --disable-cxx --disable-doc
                  --with-lg-page=${zs_je_lg_page} --with-lg-hugepage=21)
list(JOIN zs_je_options " " zs_je_key)
set(zs_je_key "CC=${CMAKE_C_COMPILER} ${CMAKE_C_COMPILER_VERSION} AR=${CMAKE_AR} ${zs_je_key}")

# The targets, on zs_je_bin (jemalloc's build folder: include/, zs_jemalloc.o).
macro(zs_jemalloc_targets)
  set(zs_je_obj ${zs_je_bin}/zs_jemalloc.o)
  # The header exists only after the build step: make the folder now so the
  # target can name it.
  file(MAKE_DIRECTORY ${zs_je_bin}/include)
  add_library(zs_jemalloc INTERFACE)
  target_include_directories(zs_jemalloc INTERFACE ${zs_je_bin}/include)
  # JEMALLOC_MANGLE: mallocx etc. in our code name the zs_je_ symbols
  target_compile_definitions(zs_jemalloc INTERFACE JEMALLOC_MANGLE)
  target_link_libraries(zs_jemalloc INTERFACE ${zs_je_obj} ${CMAKE_DL_LIBS})
  # The object as a layer of libzeroshard (src/memory/CMakeLists.txt adds it).
  add_library(zs_jemalloc_obj OBJECT IMPORTED GLOBAL)
  set_target_properties(zs_jemalloc_obj PROPERTIES IMPORTED_OBJECTS ${zs_je_obj})
  set(ZS_JEMALLOC_LIBS ${CMAKE_DL_LIBS})
endmacro()

if(ZS_JEMALLOC_FROM_BUILD)
  set(zs_je_bin ${ZS_JEMALLOC_FROM_BUILD}/_deps/jemalloc/build)
  set(zs_je_made "")
  if(EXISTS ${zs_je_bin}/../key.txt)
    file(STRINGS ${zs_je_bin}/../key.txt zs_je_made)
  endif()
  list(LENGTH zs_je_made zs_je_n)
  if(NOT zs_je_n EQUAL 3 OR NOT EXISTS ${zs_je_bin}/zs_jemalloc.o OR NOT EXISTS ${zs_je_bin}/include/jemalloc/jemalloc.h)
    message(FATAL_ERROR "ZS_JEMALLOC_FROM_BUILD=${ZS_JEMALLOC_FROM_BUILD}: no compiled jemalloc there "
                        "(${zs_je_bin}/zs_jemalloc.o): build that folder first, or drop the option")
  endif()
  list(GET zs_je_made 0 zs_je_their_key)
  if(NOT zs_je_their_key STREQUAL zs_je_key)
    message(FATAL_ERROR "ZS_JEMALLOC_FROM_BUILD=${ZS_JEMALLOC_FROM_BUILD} compiled jemalloc with\n  ${zs_je_their_key}\n"
                        "and this folder would with\n  ${zs_je_key}\ndrop the option to compile it here")
  endif()
  zs_jemalloc_targets()
  list(GET zs_je_made 1 zs_je_version)
  list(GET zs_je_made 2 zs_je_src)
  message(STATUS "jemalloc ${zs_je_version}: bundled from ${zs_je_src}, as compiled in ${ZS_JEMALLOC_FROM_BUILD}")
  return()
endif()

# the .debs folders looked in, and the one a fetch writes to
execute_process(COMMAND test -w ${PROJECT_SOURCE_DIR} RESULT_VARIABLE zs_je_ro)
if(zs_je_ro EQUAL 0)
  set(zs_je_fetch_dir ${PROJECT_SOURCE_DIR})
else()
  set(zs_je_fetch_dir ${PROJECT_BINARY_DIR}/_deps)
endif()
function(zs_jemalloc_find_debs out)
  file(GLOB found ${PROJECT_SOURCE_DIR}/.debs/jemalloc_*.orig.tar.* ${PROJECT_BINARY_DIR}/_deps/.debs/jemalloc_*.orig.tar.*)
  if(found)
    list(SORT found COMPARE NATURAL)
    list(GET found -1 found)
  endif()
  set(${out} "${found}" PARENT_SCOPE)
endfunction()

set(zs_je_src "${ZS_JEMALLOC_SOURCE}")
if(NOT zs_je_src)
  zs_jemalloc_find_debs(zs_je_src)
endif()
if(NOT zs_je_src)
  set(zs_je_why "zeroshard compiles jemalloc into the library (private names, general-dynamic TLS) so that \
libzeroshard.so can be dlopened and leaves the host program's malloc alone; it does not build without it. \
Any one of these fixes it:\n\
  - with network (and apt-get), configure again: the fetch is retried\n\
  - -DZS_JEMALLOC_SOURCE=<a jemalloc release tarball or unpacked tree>, e.g. jemalloc-5.3.0.tar.bz2 \
from https://github.com/jemalloc/jemalloc/releases\n\
  - copy .debs/ into ${zs_je_fetch_dir} from a clone that has it \
(`. scripts/lib.sh; zs_fetch_jemalloc_source` there)")
  find_program(ZS_APT_GET apt-get)
  find_program(ZS_BASH bash)
  if(NOT ZS_APT_GET OR NOT ZS_BASH)
    message(FATAL_ERROR "jemalloc: no source (.debs/jemalloc_*.orig.tar.*, -DZS_JEMALLOC_SOURCE) and no apt-get "
                        "to fetch Debian's source package with.\n${zs_je_why}")
  endif()
  message(STATUS "jemalloc: fetching Debian's source package into ${zs_je_fetch_dir}/.debs (apt-get source jemalloc)")
  file(MAKE_DIRECTORY ${zs_je_fetch_dir})
  execute_process(COMMAND ${ZS_BASH} -c ". '${PROJECT_SOURCE_DIR}/scripts/lib.sh' && zs_fetch_jemalloc_source"
                  WORKING_DIRECTORY ${zs_je_fetch_dir} RESULT_VARIABLE zs_je_rc
                  OUTPUT_VARIABLE zs_je_out ERROR_VARIABLE zs_je_out TIMEOUT 600)
  zs_jemalloc_find_debs(zs_je_src)
  if(NOT zs_je_rc EQUAL 0 OR NOT zs_je_src)
    string(STRIP "${zs_je_out}" zs_je_out)
    message(FATAL_ERROR "jemalloc: fetching its source failed (offline? no deb-src for this system?):\n"
                        "${zs_je_out}\n${zs_je_why}")
  endif()
endif()
if(NOT EXISTS "${zs_je_src}")
  message(FATAL_ERROR "ZS_JEMALLOC_SOURCE=${zs_je_src} does not exist")
endif()

# ---- the source tree (unpacked here at configure time, once per tarball) -------
set(zs_je_root ${PROJECT_BINARY_DIR}/_deps/jemalloc)
if(IS_DIRECTORY "${zs_je_src}")
  set(zs_je_tree "${zs_je_src}")
else()
  file(SIZE "${zs_je_src}" zs_je_size)
  set(zs_je_stamp "${zs_je_src} ${zs_je_size}")
  set(zs_je_old "")
  if(EXISTS ${zs_je_root}/src.stamp)
    file(READ ${zs_je_root}/src.stamp zs_je_old)
  endif()
  if(NOT zs_je_old STREQUAL zs_je_stamp)
    file(REMOVE_RECURSE ${zs_je_root})
    file(ARCHIVE_EXTRACT INPUT "${zs_je_src}" DESTINATION ${zs_je_root}/src)
    file(WRITE ${zs_je_root}/src.stamp "${zs_je_stamp}")
  endif()
  file(GLOB zs_je_tree LIST_DIRECTORIES true ${zs_je_root}/src/jemalloc-*)
endif()
if(NOT EXISTS "${zs_je_tree}/configure" OR NOT EXISTS "${zs_je_tree}/VERSION")
  message(FATAL_ERROR "${zs_je_src}: not a jemalloc release source (no configure or VERSION in ${zs_je_tree})")
endif()
file(STRINGS "${zs_je_tree}/VERSION" zs_je_version LIMIT_COUNT 1)

# ---- configure and build it ------------------------------------------------------
set(zs_je_bin ${zs_je_root}/build)
if(CMAKE_GENERATOR MATCHES "Makefiles")
  set(zs_je_make "$(MAKE)") # joins the outer make's job server (-j)
else()
  find_program(ZS_MAKE_PROGRAM NAMES gmake make REQUIRED)
  set(zs_je_make ${ZS_MAKE_PROGRAM})
endif()
ExternalProject_Add(zs_jemalloc_ep
  PREFIX ${zs_je_root}/ep # its stamps go with the tree when a new tarball replaces it
  SOURCE_DIR ${zs_je_tree}
  BINARY_DIR ${zs_je_bin}
  CONFIGURE_COMMAND ${CMAKE_COMMAND} -E env CC=${CMAKE_C_COMPILER} AR=${CMAKE_AR}
                    ${zs_je_tree}/configure --with-version=${zs_je_version} ${zs_je_options}
  # only the position-independent archive, then its members as one object (the
  # libraries take objects; --whole-archive as jemalloc's own .so does)
  BUILD_COMMAND ${zs_je_make} lib/libjemalloc_pic.a
        COMMAND ${CMAKE_C_COMPILER} -r -nostdlib -o ${zs_je_bin}/zs_jemalloc.o
                -Wl,--whole-archive lib/libjemalloc_pic.a -Wl,--no-whole-archive
  INSTALL_COMMAND ""
  BUILD_BYPRODUCTS ${zs_je_bin}/zs_jemalloc.o
  LOG_CONFIGURE ON LOG_BUILD ON LOG_OUTPUT_ON_FAILURE ON)
# what another folder's ZS_JEMALLOC_FROM_BUILD compares and reports
file(WRITE ${zs_je_root}/key.txt "${zs_je_key}\n${zs_je_version}\n${zs_je_src}\n")
zs_jemalloc_targets()
add_dependencies(zs_jemalloc zs_jemalloc_ep)
message(STATUS "jemalloc ${zs_je_version}: bundled from ${zs_je_src} (general-dynamic TLS, prefix zs_je_)")
