# zerostate_check_layers(<library>): before <library> builds, and again
# whenever a header or source under the current folder changes,
# cmake/check_layers.cmake checks the tree's layers (it fails the build
# naming each include that crosses one).
function(zerostate_check_layers library)
  set(stamp ${CMAKE_CURRENT_BINARY_DIR}/layers.stamp)
  file(GLOB_RECURSE sources CONFIGURE_DEPENDS
    ${CMAKE_CURRENT_SOURCE_DIR}/*.h ${CMAKE_CURRENT_SOURCE_DIR}/*.cc)
  add_custom_command(
    OUTPUT ${stamp}
    COMMAND ${CMAKE_COMMAND} -DROOT=${PROJECT_SOURCE_DIR}
            -P ${PROJECT_SOURCE_DIR}/cmake/check_layers.cmake
    COMMAND ${CMAKE_COMMAND} -E touch ${stamp}
    DEPENDS ${sources} ${PROJECT_SOURCE_DIR}/cmake/check_layers.cmake
    COMMENT "Checking the layers of ${library} (cmake/check_layers.cmake)")
  add_custom_target(${library}_layers DEPENDS ${stamp})
  add_dependencies(${library} ${library}_layers)
endfunction()
