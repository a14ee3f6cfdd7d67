# Layering is enforced by include paths. Each layer's sources include other
# layers' internal headers as "core/log.hpp", "store/frame.hpp", ... and the
# only directory on a layer's include path is a tree of links to the layers
# it may see (itself and those below it). Including a higher layer's header is
# therefore a "No such file or directory" build error, not a review comment.

set(KIZUNA_LAYER_ROOT ${PROJECT_BINARY_DIR}/layers)

# kizuna_layer_includes(<layer> SEES <layer-or-dir>...)
# Creates ${KIZUNA_LAYER_ROOT}/<layer>/ with one link per visible layer.
# A visible name is a folder of src/ or a top-level folder (kernels).
function(kizuna_layer_includes layer)
  cmake_parse_arguments(ARG "" "" "SEES" ${ARGN})
  set(dir ${KIZUNA_LAYER_ROOT}/${layer})
  file(MAKE_DIRECTORY ${dir})
  foreach(seen IN LISTS ARG_SEES)
    if(EXISTS ${PROJECT_SOURCE_DIR}/src/${seen})
      set(target_dir ${PROJECT_SOURCE_DIR}/src/${seen})
    else()
      set(target_dir ${PROJECT_SOURCE_DIR}/${seen})
    endif()
    if(NOT IS_SYMLINK ${dir}/${seen})
      file(CREATE_LINK ${target_dir} ${dir}/${seen} SYMBOLIC)
    endif()
  endforeach()
endfunction()

# kizuna_layer(<name> SOURCES ... SEES ...)
# An object library kizuna_<name>, folded later into libkizuna.
function(kizuna_layer name)
  cmake_parse_arguments(ARG "" "" "SOURCES;SEES" ${ARGN})
  kizuna_layer_includes(${name} SEES ${name} ${ARG_SEES})
  add_library(kizuna_${name} OBJECT ${ARG_SOURCES})
  target_include_directories(kizuna_${name} PRIVATE ${KIZUNA_LAYER_ROOT}/${name})
  target_include_directories(kizuna_${name} PUBLIC
    ${PROJECT_SOURCE_DIR}/include ${PROJECT_BINARY_DIR}/include)
  target_link_libraries(kizuna_${name} PUBLIC kizuna_build_options Threads::Threads)
  set_property(GLOBAL APPEND PROPERTY KIZUNA_LAYERS kizuna_${name})
endfunction()

# kizuna_sees(<target> <layer>): give a test, tool or benchmark the include
# view of <layer> (its internal headers and those below it).
function(kizuna_sees target layer)
  target_include_directories(${target} PRIVATE ${KIZUNA_LAYER_ROOT}/${layer})
endfunction()

# kizuna_layer_links(<layer> <imported targets>...): the layer compiles
# against them and libkizuna links them.
function(kizuna_layer_links layer)
  target_link_libraries(kizuna_${layer} PUBLIC ${ARGN})
  set_property(GLOBAL APPEND PROPERTY KIZUNA_LINK_LIBS ${ARGN})
endfunction()
