# A code block of README.md or of a page under docs/ must be a source file's marked
# region, line for line.
#   -DROOT=<repo>                       the walk-through (the defaults below)
#   -DSRC=<file> -DNAME=<marker name> -DTAG=<block tag> [-DLANG=cpp] [-DDOC=docs/<page>.md]
# The region lies between "/* --- NAME begins --- */" (or "// --- NAME begins ---")
# and the matching "ends" marker on a line of its own (indented or not); the block of
# DOC (a path under ROOT; README.md by default) between "<!-- TAG -->\n```LANG\n"
# (LANG: c by default) and "```\n<!-- /TAG -->".
if(NOT SRC)
  set(SRC ${ROOT}/examples/walkthrough/walkthrough.c)
  set(NAME walk-through)
  set(TAG walkthrough)
endif()
file(READ ${SRC} src)
if(NOT DOC)
  set(DOC README.md)
endif()
file(READ ${ROOT}/${DOC} readme)
string(REGEX MATCH "(/\\* --- ${NAME} begins --- \\*/|// --- ${NAME} begins ---)\n(.*\n)[ ]*(/\\* --- ${NAME} ends --- \\*/|// --- ${NAME} ends ---)" m
       "${src}")
set(code "${CMAKE_MATCH_2}")
if(NOT LANG)
  set(LANG c)
endif()
string(REGEX MATCH "<!-- ${TAG} -->\n```${LANG}\n(.*)```\n<!-- /${TAG} -->" m2 "${readme}")
set(block "${CMAKE_MATCH_1}")
if(NOT code)
  message(FATAL_ERROR "markers '${NAME}' not found in ${SRC}")
endif()
if(NOT code STREQUAL block)
  message(FATAL_ERROR "${DOC}'s '${TAG}' block differs from ${SRC}: copy the region between the '${NAME}' markers")
endif()
