#!/usr/bin/env bash
# Copy this machine's bubblewrap, and the libraries it links beyond glibc, into .sandbox-tools/ (ignored by git),
# for a machine that cannot install it: kernelzero/sandbox/launcher.py finds .sandbox-tools/bwrap and its lib/ there.
set -euo pipefail
cd "$(dirname "$0")/.."
bwrap=$(command -v bwrap) || { echo "sandbox_tools: no bwrap on this machine: install bubblewrap first" >&2; exit 1; }
rm -rf .sandbox-tools
mkdir -p .sandbox-tools/lib
cp "$bwrap" .sandbox-tools/bwrap
ldd "$bwrap" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|ld-linux*) ;;  # glibc: the target machine's own
    *) cp -L "$lib" .sandbox-tools/lib/ ;;
  esac
done
LD_LIBRARY_PATH=.sandbox-tools/lib .sandbox-tools/bwrap --version
echo "needs glibc $(objdump -T .sandbox-tools/bwrap .sandbox-tools/lib/* 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1 | cut -d_ -f2) or newer; copied: $(ls .sandbox-tools/lib | tr '\n' ' ')"
