"""What a tool prints, read as Windows prints it, and commands echoed as Windows quotes them
(issue 20): cl, link and nvcc write in the console's OEM code page, not UTF-8; `-v` shows the
command line CreateProcess receives, not POSIX quoting. Each test starts this Python to print
the bytes a Windows tool would."""

from __future__ import annotations

import io
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import pytest

from flashbuild import platforms
from flashbuild.platforms import windows
from flashbuild.platforms.linux import LinuxPlatform
from flashbuild.platforms.windows import WindowsPlatform
from flashbuild.proc import ProcessRunner, quote

if TYPE_CHECKING:
    from flashbuild.platforms.children import ChildTree

# A German cl.exe in the OEM code page 850: "Pfad für Datei nicht gefunden: C:\Users\José".
CL_OEM_850 = "Pfad für Datei nicht gefunden: C:\\Users\\José\r\n".encode("cp850")
PRINT = "import sys; sys.stdout.buffer.write(bytes.fromhex(sys.argv[1])); sys.stdout.flush()"


class _WindowsOutput(WindowsPlatform):
    """Windows' decoding and quoting, with this host's way of starting a child (the process
    group flags and Job Objects of the real Windows platform exist only on Windows)."""

    def child_start_options(self) -> dict[str, Any]:
        return LinuxPlatform().child_start_options()

    def child_tree(self, proc: subprocess.Popen[Any]) -> ChildTree:
        return LinuxPlatform().child_tree(proc)


@pytest.fixture
def as_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(platforms, "current", _WindowsOutput)
    monkeypatch.setattr(windows, "oem_code_page", lambda: 850)


def _run(data: bytes) -> str:
    # sys.executable found by path: WindowsPlatform.which would look for `python.exe`.
    return ProcessRunner().run([sys.executable, "-c", PRINT, data.hex()]).stdout


@pytest.mark.usefixtures("as_windows")
def test_oem_output_is_decoded_with_the_oem_code_page() -> None:
    # Before: decoded as UTF-8 with replacement, "Pfad f\ufffdr ... Jos\ufffd".
    assert _run(CL_OEM_850) == "Pfad für Datei nicht gefunden: C:\\Users\\José\n"


@pytest.mark.usefixtures("as_windows")
def test_utf8_output_stays_utf8_on_windows() -> None:
    assert _run("→ José\n".encode()) == "→ José\n"


@pytest.mark.usefixtures("as_windows")
def test_streamed_oem_output_is_decoded_line_by_line() -> None:
    lines: list[str] = []
    log = io.StringIO()
    data = b"[1/2] nvcc k.cu\r\n" + CL_OEM_850 + "ok ✓\n".encode()
    code = ProcessRunner().stream([sys.executable, "-c", PRINT, data.hex()],
                                  on_line=lines.append, log=log)
    assert code == 0
    assert lines == ["[1/2] nvcc k.cu", "Pfad für Datei nicht gefunden: C:\\Users\\José",
                     "ok ✓"]
    assert log.getvalue() == "\n".join(lines) + "\n"


def test_linux_decodes_utf8_with_replacement(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(platforms, "current", LinuxPlatform)
    assert _run(b"ok \xff\n") == "ok \ufffd\n"


def test_oem_encoding_falls_back_to_cp437(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(windows, "oem_code_page", lambda: None)
    assert windows.oem_encoding() == "cp437"
    monkeypatch.setattr(windows, "oem_code_page", lambda: 99999)  # no codec for it
    assert windows.oem_encoding() == "cp437"
    monkeypatch.setattr(windows, "oem_code_page", lambda: 932)
    assert windows.oem_encoding() == "cp932"


def test_commands_are_echoed_as_windows_quotes_them(monkeypatch: pytest.MonkeyPatch) -> None:
    argv = ["C:\\Program Files\\NVIDIA GPU Computing Toolkit\\CUDA\\v13.0\\bin\\nvcc.exe",
            "-Xcompiler=/Zc:preprocessor", "C:\\Users\\José Müller\\k.cu", "-DNAME=\"x y\""]
    monkeypatch.setattr(platforms, "current", WindowsPlatform)
    # Before: shlex.join's single quotes, which cmd and CreateProcess do not understand.
    assert quote(argv) == ('"C:\\Program Files\\NVIDIA GPU Computing Toolkit\\CUDA\\v13.0\\bin\\'
                           'nvcc.exe" -Xcompiler=/Zc:preprocessor "C:\\Users\\José Müller\\k.cu" '
                           '"-DNAME=\\"x y\\""')
    monkeypatch.setattr(platforms, "current", LinuxPlatform)
    assert quote(["/usr/bin/nvcc", "a b"]) == "/usr/bin/nvcc 'a b'"
