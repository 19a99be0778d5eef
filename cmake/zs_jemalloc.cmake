# jemalloc, the host allocator (src/memory): defines the INTERFACE target
# zs_jemalloc (headers, and the link for targets built from the layers) and sets
# ZS_JEMALLOC_MODE to BUNDLED or SYSTEM.
#
# Why not Debian's libjemalloc.so.2: it is built with initial-exec TLS, whose
# block (2.6 KiB) must come from the static TLS surplus glibc keeps for libraries
# loaded after start-up, which is smaller; so dlopen("libzeroshard.so") from
# Python, a plugin host or a framework failed ("cannot allocate memory in static
# TLS block") unless the process set GLIBC_TUNABLES. Its libjemalloc_pic.a is no
# way out: the same initial-exec relocations, and it defines malloc/free, which
# would take over the host program's allocator.
#
# BUNDLED (the default when the source is found) builds the same jemalloc from
# Debian's source package (apt-get source jemalloc; scripts/lib.sh
# zs_fetch_jemalloc_source puts it in .debs/) with Debian's amd64 options plus:
#   --disable-initial-exec-tls   general-dynamic TLS: any process can dlopen it
#   --with-jemalloc-prefix=zs_je_, --with-private-namespace=zs_je_private_,
#   --without-export             its own names, hidden: the host program's malloc
#                                (glibc's or its own jemalloc) is untouched
# and links its objects into libzeroshard (.so and .a) as one more layer object,
# so nothing extra is installed or loaded. Tuning it at run time: ZS_JE_MALLOC_CONF
# (jemalloc's MALLOC_CONF under our prefix). Builds jemalloc once per build
# folder (about a minute on two cores).
# SYSTEM uses libjemalloc-dev through pkg-config, for packagers who must: then
# libzeroshard.so cannot be dlopened (test_dlopen fails and says so).
include(ExternalProject)

set(ZS_JEMALLOC AUTO CACHE STRING
    "jemalloc: BUNDLED (built from its source, dlopen-safe, private), SYSTEM (libjemalloc-dev), AUTO")
set_property(CACHE ZS_JEMALLOC PROPERTY STRINGS AUTO BUNDLED SYSTEM)
set(ZS_JEMALLOC_SOURCE "" CACHE PATH
    "jemalloc source for BUNDLED: a jemalloc_*.orig.tar.* (apt-get source jemalloc) or an unpacked tree; default: .debs/")

set(zs_je_src "${ZS_JEMALLOC_SOURCE}")
if(NOT zs_je_src AND NOT ZS_JEMALLOC STREQUAL "SYSTEM")
  file(GLOB zs_je_found ${PROJECT_SOURCE_DIR}/.debs/jemalloc_*.orig.tar.*)
  if(zs_je_found)
    list(SORT zs_je_found COMPARE NATURAL)
    list(GET zs_je_found -1 zs_je_src)
  endif()
endif()

if(ZS_JEMALLOC STREQUAL "SYSTEM" OR (ZS_JEMALLOC STREQUAL "AUTO" AND NOT zs_je_src))
  if(ZS_JEMALLOC STREQUAL "AUTO")
    message(WARNING "jemalloc source not found (.debs/jemalloc_*.orig.tar.*, or -DZS_JEMALLOC_SOURCE=...): "
                    "using the system's libjemalloc, with which libzeroshard.so cannot be dlopened "
                    "(initial-exec TLS). Fetch it with: . scripts/lib.sh; zs_fetch_jemalloc_source")
  endif()
  pkg_check_modules(JEMALLOC REQUIRED IMPORTED_TARGET jemalloc)
  add_library(zs_jemalloc INTERFACE)
  target_link_libraries(zs_jemalloc INTERFACE PkgConfig::JEMALLOC)
  set(ZS_JEMALLOC_MODE SYSTEM)
  set(ZS_JEMALLOC_LIBS PkgConfig::JEMALLOC) # for the libraries' own link
  return()
endif()
if(NOT ZS_JEMALLOC MATCHES "^(AUTO|BUNDLED)$")
  message(FATAL_ERROR "ZS_JEMALLOC=${ZS_JEMALLOC}: use AUTO, BUNDLED or SYSTEM")
endif()
if(NOT zs_je_src OR NOT EXISTS "${zs_je_src}")
  message(FATAL_ERROR "ZS_JEMALLOC=BUNDLED but no jemalloc source: run `. scripts/lib.sh; zs_fetch_jemalloc_source` "
                      "(puts Debian's source package in .debs/) or pass -DZS_JEMALLOC_SOURCE=path")
endif()

# ---- the source tree (unpacked here at configure time, once per tarball) -------
set(zs_je_root ${CMAKE_BINARY_DIR}/_deps/jemalloc)
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
# Debian's page options (debian/rules): 4 KiB pages on x86, 64 KiB elsewhere, so
# the library runs on any kernel page size up to that.
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64|i.86)$")
  set(zs_je_lg_page 12)
else()
  set(zs_je_lg_page 16)
endif()
set(zs_je_bin ${zs_je_root}/build)
set(zs_je_obj ${zs_je_bin}/zs_jemalloc.o)
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
                    ${zs_je_tree}/configure --with-version=${zs_je_version}
                    --with-jemalloc-prefix=zs_je_ --with-private-namespace=zs_je_private_ --without-export
                    --disable-initial-exec-tls --disable-shared --disable-cxx --disable-doc
                    --with-lg-page=${zs_je_lg_page} --with-lg-hugepage=21
  # only the position-independent archive, then its members as one object (the
  # libraries take objects; --whole-archive as jemalloc's own .so does)
  BUILD_COMMAND ${zs_je_make} lib/libjemalloc_pic.a
        COMMAND ${CMAKE_C_COMPILER} -r -nostdlib -o ${zs_je_obj}
                -Wl,--whole-archive lib/libjemalloc_pic.a -Wl,--no-whole-archive
  INSTALL_COMMAND ""
  BUILD_BYPRODUCTS ${zs_je_obj}
  LOG_CONFIGURE ON LOG_BUILD ON LOG_OUTPUT_ON_FAILURE ON)

# The header exists only after the build step: make the folder now so the
# target can name it.
file(MAKE_DIRECTORY ${zs_je_bin}/include)
add_library(zs_jemalloc INTERFACE)
add_dependencies(zs_jemalloc zs_jemalloc_ep)
target_include_directories(zs_jemalloc INTERFACE ${zs_je_bin}/include)
# JEMALLOC_MANGLE: mallocx etc. in our code name the zs_je_ symbols
target_compile_definitions(zs_jemalloc INTERFACE JEMALLOC_MANGLE)
target_link_libraries(zs_jemalloc INTERFACE ${zs_je_obj} ${CMAKE_DL_LIBS})
# The object as a layer of libzeroshard (src/memory/CMakeLists.txt adds it).
add_library(zs_jemalloc_obj OBJECT IMPORTED GLOBAL)
set_target_properties(zs_jemalloc_obj PROPERTIES IMPORTED_OBJECTS ${zs_je_obj})
set(ZS_JEMALLOC_MODE BUNDLED)
set(ZS_JEMALLOC_LIBS ${CMAKE_DL_LIBS})
message(STATUS "jemalloc ${zs_je_version}: bundled from ${zs_je_src} (general-dynamic TLS, prefix zs_je_)")
