# What this configuration leaves out, said once at the end of configure.
#
# An optional piece (a comparison harness, the torch backend, the CUDA
# backend, tests that need a program) whose dependency is missing is
# skipped, never an error; it calls kizuna_skipped() to say so, and
# kizuna_report_skipped(), at the end of the top-level CMakeLists.txt,
# prints one line per skipped piece:
#
#   -- kizuna: skipped bench/compare Gloo harness (libgloo-dev not found)

# kizuna_skipped(<what> <why>)
function(kizuna_skipped what why)
  string(REPLACE ";" "," why "${why}")  # one list element per piece
  set_property(GLOBAL APPEND PROPERTY KIZUNA_SKIPPED "${what} (${why})")
endfunction()

function(kizuna_report_skipped)
  get_property(skipped GLOBAL PROPERTY KIZUNA_SKIPPED)
  if(NOT skipped)
    message(STATUS "kizuna: every optional piece is built")
    return()
  endif()
  foreach(line IN LISTS skipped)
    message(STATUS "kizuna: skipped ${line}")
  endforeach()
endfunction()
