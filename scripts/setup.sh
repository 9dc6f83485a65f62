#!/usr/bin/env bash
# Create .venv (if missing) and install KernelZero with its test dependencies into it; as root, install bubblewrap.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.kernelzero-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  # uv resolves the same packages as pip and installs them faster (torch and its CUDA libraries are several GB,
  # docs/BENCHMARKS.md); pip where uv cannot be had
  if .venv/bin/python -m pip install -q uv; then
    .venv/bin/python -m uv pip install -q --python .venv/bin/python -e '.[test]'
  else
    .venv/bin/python -m pip install -q -e '.[test]'
  fi
  # Bytecode: where PYTHONDONTWRITEBYTECODE is set, every process would compile torch again (imports 9-11 s against
  # 4.5 s), yet compiling all 13,700 files of the venv took 24.8 s. So only what is imported is compiled, once: the
  # evaluator's sandbox sees the venv read-only and cannot write its own, so its imports are compiled here; demo.sh
  # and test.sh let every other process write what it imports first
  PYTHONDONTWRITEBYTECODE= .venv/bin/python -c \
    'from kernelzero.gpu_workers.zygote import EvaluationJobs; EvaluationJobs().preload()'
  touch "$stamp"
fi
# bubblewrap contains candidate code (docs/evaluator.md, Containment); without it the sandbox tests skip
if ! command -v bwrap >/dev/null 2>&1 && [ -x .sandbox-tools/bwrap ]; then
  :  # carried with the checkout (scripts/sandbox_tools.sh): kernelzero/sandbox/launcher.py finds it there
elif ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq bubblewrap >/dev/null 2>&1 \
      || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq bubblewrap >/dev/null 2>&1; } \
      || true
  fi
  command -v bwrap >/dev/null 2>&1 \
    || echo "setup: bubblewrap (bwrap) is not installed and could not be: candidate code runs without namespaces and the sandbox tests skip; install it (as root: apt-get install bubblewrap)" >&2
fi
