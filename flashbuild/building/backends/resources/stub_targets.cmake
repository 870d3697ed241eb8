# flashbuild introspection only (pipeline/introspect.py): included after project() through
# CMAKE_PROJECT_INCLUDE when a configure stopped at generate time because a target it links
# (a toolkit component such as CUDA::cublas) was not found. At the end of the top folder, an
# empty IMPORTED stand-in is defined for each name in FLASHBUILD_STUB_TARGETS that still does
# not exist, so the configure generates and the File API replies can be read. Never used by
# a build: the build needs the real library.
if(NOT DEFINED _FLASHBUILD_STUBS_DEFERRED)
  set(_FLASHBUILD_STUBS_DEFERRED 1)
  function(_flashbuild_stub_targets)
    foreach(name IN LISTS FLASHBUILD_STUB_TARGETS)
      if(NOT TARGET ${name})
        add_library(${name} INTERFACE IMPORTED GLOBAL)
      endif()
    endforeach()
  endfunction()
  cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _flashbuild_stub_targets)
endif()
