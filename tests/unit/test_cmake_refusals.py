"""What a failed CMake configure says, read as introspection reads it: CMake 4's refusal of an
old `cmake_minimum_required` (and the variable it names to get past it), the NOTFOUND
list whose variable names are the news, and a `find_package` that found nothing. The outputs
are CMake 4.4.5's, recorded on this machine from libKMCUDA 6.2.3's CMakeLists.txt
(2026-11-28) and, through scikit-build-core, from atlas-engine 0.2.0's (2026-11-29)."""

from __future__ import annotations

from pathlib import Path

from flashbuild.building.cmake import (
    missing_package_error,
    notfound_toolkit_libraries,
    policy_minimum_needed,
)
from flashbuild.pipeline.introspect import _first_cmake_error

REFUSAL = """\
CMake Error at CMakeLists.txt:1 (cmake_minimum_required):
  Compatibility with CMake < 3.5 has been removed from CMake.

  Update the VERSION argument <min> value.  Or, use the <min>...<max> syntax
  to tell CMake that the project requires at least <min> but has been updated
  to work with policies introduced by <max> or earlier.

  Or, add -DCMAKE_POLICY_VERSION_MINIMUM=3.5 to try configuring anyway.


-- Configuring incomplete, errors occurred!
"""

NOTFOUND = """\
-- Configuring done (2.1s)
CMake Error: The following variables are used in this project, but they are set to NOTFOUND.
Please set them or make sure they are set and tested correctly in the CMake files:
CUDA_curand_LIBRARY (ADVANCED)
    linked by target "KMCUDA" in directory /tmp/pt/libKMCUDA-6.2.3

-- Generating done (0.0s)
CMake Generate step failed.  Build files cannot be regenerated correctly.
"""


def test_the_policy_refusal_names_the_variable_and_value_cmake_asks_for() -> None:
    found = policy_minimum_needed(REFUSAL)
    assert found is not None
    name, value, why = found
    assert (name, value) == ("CMAKE_POLICY_VERSION_MINIMUM", "3.5")
    assert why == ("CMake refuses `cmake_minimum_required` older than 3.5 "
                   '("Compatibility with CMake < 3.5 has been removed")')
    # Any other failure is not this one, also one that mentions the variable.
    assert policy_minimum_needed(NOTFOUND) is None
    assert policy_minimum_needed("-DCMAKE_POLICY_VERSION_MINIMUM=3.5 to try configuring "
                                 "anyway") is None


def test_a_notfound_failure_names_its_variables() -> None:
    assert _first_cmake_error(NOTFOUND) == (
        "CUDA_curand_LIBRARY: used by the project and set to NOTFOUND (a library or header "
        "the configure did not find)")
    assert _first_cmake_error(REFUSAL) == (
        "CMakeLists.txt:1 (cmake_minimum_required): Compatibility with CMake < 3.5 has been "
        "removed from CMake.")


def test_toolkit_library_variables_left_notfound_are_components() -> None:
    assert notfound_toolkit_libraries(NOTFOUND) == [("CUDA_curand_LIBRARY", "CUDA::curand")]
    assert notfound_toolkit_libraries(REFUSAL) == []
    # A variable of that shape outside a NOTFOUND report is not one.
    assert notfound_toolkit_libraries("CUDA_curand_LIBRARY (ADVANCED)\n") == []


#: scikit-build-core's log of atlas-engine 0.2.0 (its lines indented by two).
NO_TBB = """\
  -- [ATLAS] Toolchain: GNU (/usr/bin/g++); no CUDA toolkit or Thrust
  CMake Error at cmake/Dependencies.cmake:6 (find_package):
    By not providing "FindTBB.cmake" in CMAKE_MODULE_PATH this project has
    asked CMake to find a package configuration file provided by "TBB", but
    CMake did not find one.

    Could not find a package configuration file provided by "TBB" with any of
    the following names:

      TBB.cps
      tbb.cps
      TBBConfig.cmake
      tbb-config.cmake

    Add the installation prefix of "TBB" to CMAKE_PREFIX_PATH or set "TBB_DIR"
    to a directory containing one of the above files.  If "TBB" provides a
    separate development package or SDK, be sure it has been installed.
  Call Stack (most recent call first):
    CMakeLists.txt:115 (include)
"""


def test_a_package_nobody_has_is_named_with_where_and_the_recipe_line(tmp_path: Path) -> None:
    error = missing_package_error(NO_TBB, tmp_path / "build.log")
    assert error is not None
    assert "needs the TBB library (find_package at cmake/Dependencies.cmake:6)" in error.what
    assert '[[build.options]] define = { TBB_DIR = "<prefix>/lib/cmake/TBB" }' in error.fix
    assert missing_package_error(NOTFOUND, tmp_path / "build.log") is None
    assert missing_package_error(REFUSAL, tmp_path / "build.log") is None



#: An optional `find_package(NCCL)` that found nothing is a warning (CMake 4.4.5's wording);
#: the configure then stops somewhere else.
NO_NCCL_WARNING = """\
CMake Warning at CMakeLists.txt:3 (find_package):
  By not providing "FindNCCL.cmake" in CMAKE_MODULE_PATH this project has
  asked CMake to find a package configuration file provided by "NCCL", but
  CMake did not find one.

  Could not find a package configuration file provided by "NCCL" with any of
  the following names:

    NCCLConfig.cmake
    nccl-config.cmake

  Add the installation prefix of "NCCL" to CMAKE_PREFIX_PATH or set "NCCL_DIR"
  to a directory containing one of the above files.  If "NCCL" provides a
  separate development package or SDK, be sure it has been installed.


"""


def test_an_optional_package_s_warning_is_not_the_failure(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    assert missing_package_error(NO_NCCL_WARNING + REFUSAL, log) is None
    # A warning before the real find_package error: the error's package is named, not NCCL.
    error = missing_package_error(NO_NCCL_WARNING + NO_TBB, log)
    assert error is not None
    assert error.details["package"] == "TBB"
    assert "(find_package at cmake/Dependencies.cmake:6)" in error.what
    # A log written with CRLF (Windows) reads the same.
    crlf = missing_package_error(NO_TBB.replace("\n", "\r\n"), log)
    assert crlf is not None and crlf.details["package"] == "TBB"
