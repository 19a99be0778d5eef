# The README's walk-through block must be examples/walkthrough/walkthrough.c's
# region between the "walk-through begins/ends" markers, line for line.
file(READ ${ROOT}/examples/walkthrough/walkthrough.c src)
file(READ ${ROOT}/README.md readme)
string(REGEX MATCH "/\\* --- walk-through begins --- \\*/\n(.*)  /\\* --- walk-through ends --- \\*/" m "${src}")
set(code "${CMAKE_MATCH_1}")
string(REGEX MATCH "<!-- walkthrough -->\n```c\n(.*)```\n<!-- /walkthrough -->" m2 "${readme}")
set(block "${CMAKE_MATCH_1}")
if(NOT code)
  message(FATAL_ERROR "markers not found in walkthrough.c")
endif()
if(NOT code STREQUAL block)
  message(FATAL_ERROR "README.md's walk-through differs from examples/walkthrough/walkthrough.c: copy the region between the markers")
endif()
