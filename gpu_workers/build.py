"""Build a candidate's CUDA extensions ahead of its GPU run, in a throwaway CPU process; no GPU needed, no checks made.

Run as `python -m kernelzero.gpu_workers.build CANDIDATE.py EXT_DIR [--headers MODE] [--pch HEADER]
[--confinement JSON]`: imports the candidate with TORCH_EXTENSIONS_DIR=EXT_DIR so `load_inline`
compiles there (in the headers mode asked, `gpu_workers/headers.py`), then prints one
line, BUILD_LINE and a BuildOutcome as JSON (schemas/messages.py). The GPU worker later imports the same
source with the same directory, flags and headers, and `load_inline` finds the library already
built. With --confinement the process first confines itself (kernelzero/sandbox/confine.py: the build
runs candidate code, and the compiler follows candidate-controlled paths) and prints CONFINED
before the candidate is imported, or REFUSED with what is missing and stops: whatever the
candidate prints comes after.
"""

from __future__ import annotations

import importlib.util
import os
import resource
import sys
import time
import traceback

import msgspec

from kernelzero.gpu_workers import headers
from kernelzero.schemas.messages import BUILD_LINE, CONFINED, REFUSED, BuildOutcome, Confinement, SandboxRefusal


def main(argv: list[str]) -> int:
    path, ext_dir = argv[:2]
    if "--confinement" in argv and not _confine(argv[argv.index("--confinement") + 1], ext_dir):
        os._exit(0)
    os.environ["TORCH_EXTENSIONS_DIR"] = ext_dir
    os.chdir(os.path.dirname(path))
    headers.use(_option(argv, "--headers", "full"), _option(argv, "--pch", ""))
    built = _record_builds()
    started = time.perf_counter()
    try:
        spec = importlib.util.spec_from_file_location("kz_candidate", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["kz_candidate"] = module
        spec.loader.exec_module(module)
        outcome = BuildOutcome(ok=True)
    except BaseException as exc:  # noqa: BLE001
        error = "".join(traceback.format_exception_only(type(exc), exc))[-3000:]
        # after a successful build, a failure needing the GPU (hidden here) is the GPU run's business
        outcome = BuildOutcome(ok=bool(built) and not built.count(False), error=error)
    outcome.compile_s = round(time.perf_counter() - started, 3)
    outcome.headers = headers.in_effect()
    outcome.cpu_s = round(sum(getattr(resource.getrusage(who), f) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
                              for f in ("ru_utime", "ru_stime")), 3)
    sys.__stdout__.write("\n" + BUILD_LINE + msgspec.json.encode(outcome).decode() + "\n")
    sys.__stdout__.flush()
    os._exit(0)


def _option(argv: list[str], name: str, default: str) -> str:
    return argv[argv.index(name) + 1] if name in argv else default


def _confine(confinement_json: str, ext_dir: str) -> bool:
    """Confine this process to its build folder; prints CONFINED, or REFUSED with what is missing."""
    from kernelzero.sandbox import confine
    confinement = msgspec.json.decode(confinement_json, type=Confinement)
    mechanisms = confine.enter(confinement, [ext_dir], os.path.join(ext_dir, ".home"))
    missing = confine.missing(confinement.required, mechanisms)
    if missing:
        in_force = confine.label(confinement.launcher, mechanisms)
        line = REFUSED + msgspec.json.encode(SandboxRefusal(missing, in_force)).decode()
    else:
        line = CONFINED
    sys.__stdout__.write(line + "\n")
    sys.__stdout__.flush()
    return not missing


def _record_builds() -> list[bool]:
    """Wrap cpp_extension.load_inline / load (in this throwaway process) to record whether each build succeeded."""
    from torch.utils import cpp_extension
    outcomes: list[bool] = []

    def recording(original):
        def build(*args, **kwargs):
            try:
                result = original(*args, **kwargs)
            except BaseException:
                outcomes.append(False)
                raise
            outcomes.append(True)
            return result
        return build

    cpp_extension.load_inline = recording(cpp_extension.load_inline)
    cpp_extension.load = recording(cpp_extension.load)
    return outcomes


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
