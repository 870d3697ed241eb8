"""FB196's edge cases (a review of the first version, 2026-11-29): a `-D` given to CMake
itself is no C define; the same define under two branches is one step that expects both; a
form feed in a comment does not move the step onto another command."""

from __future__ import annotations

from flashbuild.scanning.checks_cmake import check_cmake
from flashbuild.scanning.findings import FileText, make_target
from flashbuild.scanning.proposals import EditCall

HEAD = 'set(CUDA_NVCC_FLAGS "${CUDA_NVCC_FLAGS} -arch sm_${CUDA_ARCH}")\n'


def _fb196(text: str, arch: str = "sm_90a") -> list:  # type: ignore[type-arg]
    report = check_cmake(FileText(path="CMakeLists.txt", text=text, kind="cmake"),
                         make_target("linux", arch))
    return [f for f in report.findings if f.rule == "FB196"]


def _step(finding) -> dict:  # type: ignore[no-untyped-def,type-arg]
    assert isinstance(finding.fix.step, EditCall) and finding.fix.step.step is not None
    return finding.fix.step.step.params


def test_a_define_given_to_cmake_itself_is_no_c_define() -> None:
    text = HEAD + (
        "include(ExternalProject)\n"
        "ExternalProject_Add(sub SOURCE_DIR ${CMAKE_SOURCE_DIR}/sub CMAKE_ARGS "
        "-DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCH} -DCUDA_ARCH=${CUDA_ARCH})\n"
        "execute_process(COMMAND ${CMAKE_COMMAND} -DCUDA_ARCH=${CUDA_ARCH} -P x.cmake)\n"
        'set(CMAKE_CXX_FLAGS "${CMAKE_CXX_FLAGS} -DCMAKE_X=${CUDA_ARCH}")\n')
    assert _fb196(text) == []


def test_the_same_define_under_two_branches_is_one_step_for_both() -> None:
    text = HEAD + ("if(WIN32)\n  add_definitions(-DCUDA_ARCH=${CUDA_ARCH})\nelse()\n"
                   "  add_definitions(-DCUDA_ARCH=${CUDA_ARCH})\nendif()\n")
    found = _fb196(text)
    assert [f.line for f in found] == [3, 5]
    first, second = (_step(f) for f in found)
    assert first == second and first["expect"] == 2
    assert first["block"] == ('  string(REGEX REPLACE "[a-z]+$" "" CUDA_ARCH_NUMBER '
                              '"${CUDA_ARCH}")\n  add_definitions(-DCUDA_ARCH=${CUDA_ARCH_NUMBER})')
    assert _fb196(text, "sm_90") == []


def test_a_form_feed_does_not_move_the_step() -> None:
    text = HEAD + "# section\x0c break\nset(SRCS\n  a.cu)\n" + (
        'set(CMAKE_CXX_FLAGS "${CMAKE_CXX_FLAGS} -DCUDA_ARCH=${CUDA_ARCH}")\n')
    (found,) = _fb196(text)
    assert found.line == 5
    assert _step(found)["anchor"].startswith("set(CMAKE_CXX_FLAGS")
