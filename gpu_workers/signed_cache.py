"""Cache files signed with a key only the evaluator reads: an entry whose signature fails is as good as absent; not encrypted.

The key is 32 random bytes in `KEY_FILE` inside the cache folder, made on first use (mode 0600,
created atomically so concurrent pools agree on one key). Candidate processes never see the
cache folder (kernelzero/sandbox/launcher.py), so they can neither read the key nor write an entry;
the signature also covers the entry's file name, so a genuine entry copied under another
key's name does not verify. With the sandbox off a candidate runs as the evaluator's uid and
can read the key: the signature then only catches accidents.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import uuid
from pathlib import Path

KEY_FILE = "cache.key"


class SignedFiles:
    def __init__(self, cache_dir: Path):
        self.key_path = cache_dir / KEY_FILE
        self._key: bytes | None = None

    def _mac(self, path: Path, payload: bytes) -> bytes:
        if self._key is None:
            self._key = _load_or_create_key(self.key_path)
        return hmac.new(self._key, path.name.encode() + b"\n" + payload, hashlib.sha256).hexdigest().encode()

    def read(self, path: Path) -> bytes | None:
        """The payload written by `write`, or None when absent, unsigned or tampered with."""
        try:
            mac, _, payload = path.read_bytes().partition(b"\n")
        except OSError:
            return None
        return payload if hmac.compare_digest(mac, self._mac(path, payload)) else None

    def write(self, path: Path, payload: bytes) -> None:
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        tmp.write_bytes(self._mac(path, payload) + b"\n" + payload)
        os.replace(tmp, path)  # atomic: concurrent pools never read half a file


def _load_or_create_key(path: Path) -> bytes:
    if not path.exists():
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, os.urandom(32))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)  # fails if another pool made the key first: theirs is the key
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp)
    key = path.read_bytes()
    if len(key) != 32:
        raise RuntimeError(f"{path}: the cache's signing key is not 32 bytes; remove it to make a new one")
    return key
