# `make install` / `cmake --install`: headers, libkizuna, the tools, a CMake
# package (find_package(kizuna) -> kizuna::kizuna) and kizuna.pc.
include(CMakePackageConfigHelpers)

# Installed programs find libkizuna without LD_LIBRARY_PATH, wherever the
# tree is installed or moved: the tools look in the library folder relative
# to their own ($ORIGIN/../lib), the library beside itself ($ORIGIN). The
# build tree keeps CMake's absolute build RPATH.
file(RELATIVE_PATH _kz_bin_to_lib /prefix/${CMAKE_INSTALL_BINDIR} /prefix/${CMAKE_INSTALL_LIBDIR})
set_target_properties(kizuna PROPERTIES INSTALL_RPATH "$ORIGIN")

install(TARGETS kizuna EXPORT kizunaTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/kizuna DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h" PATTERN "*.hpp")
install(FILES ${PROJECT_BINARY_DIR}/include/kizuna/config.hpp
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kizuna)

get_property(kizuna_tools GLOBAL PROPERTY KIZUNA_TOOLS)
if(kizuna_tools)
  set_target_properties(${kizuna_tools} PROPERTIES INSTALL_RPATH "$ORIGIN/${_kz_bin_to_lib}")
  install(TARGETS ${kizuna_tools} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

set(KIZUNA_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/kizuna)
install(EXPORT kizunaTargets NAMESPACE kizuna:: DESTINATION ${KIZUNA_CMAKE_DIR})
configure_package_config_file(cmake/kizunaConfig.cmake.in
  ${PROJECT_BINARY_DIR}/kizunaConfig.cmake INSTALL_DESTINATION ${KIZUNA_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/kizunaConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/kizunaConfig.cmake ${PROJECT_BINARY_DIR}/kizunaConfigVersion.cmake
  DESTINATION ${KIZUNA_CMAKE_DIR})

# The .pc file finds its prefix relative to itself, so an installed tree can move.
file(RELATIVE_PATH KIZUNA_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
configure_file(cmake/kizuna.pc.in ${PROJECT_BINARY_DIR}/kizuna.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/kizuna.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
