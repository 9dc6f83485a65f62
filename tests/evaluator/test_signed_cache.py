"""The result cache trusts only entries it signed: tampered, unsigned or moved ones are evaluated again; not the sandbox."""

from __future__ import annotations

import asyncio
import shutil
import stat
from pathlib import Path

import msgspec

from kernelzero.config import EvaluatorConfig
from kernelzero.gpu_workers import EvaluatorPool
from kernelzero.gpu_workers.result import evaluation
from kernelzero.gpu_workers.signed_cache import KEY_FILE, SignedFiles

HERE = Path(__file__).parent
RELU = (HERE / "problems" / "relu.py").read_text()
WRONG = (HERE / "candidates" / "wrong_result.py").read_text()
GOOD = (HERE / "candidates" / "correct_whole.py").read_text()


def test_a_signed_file_reads_back_and_a_changed_one_does_not(tmp_path: Path) -> None:
    files = SignedFiles(tmp_path)
    entry = tmp_path / "entry.json"
    files.write(entry, b'{"verdict": "incorrect"}')
    assert files.read(entry) == b'{"verdict": "incorrect"}'
    assert stat.S_IMODE((tmp_path / KEY_FILE).stat().st_mode) == 0o600
    assert SignedFiles(tmp_path).read(entry) == b'{"verdict": "incorrect"}'  # the key persists for the next pool
    entry.write_bytes(entry.read_bytes().replace(b"incorrect", b"correct"))
    assert files.read(entry) is None


def test_a_forged_cache_entry_is_not_trusted(tmp_path: Path) -> None:
    config = EvaluatorConfig(cache_dir=str(tmp_path), timeout_s=60)

    async def scenario() -> None:
        async with EvaluatorPool(config, device="cpu") as pool:
            first = await pool.evaluate(RELU, WRONG)
            path = pool._result_path(RELU, WRONG)
            assert (first.verdict, (await pool.evaluate(RELU, WRONG)).cached) == ("incorrect", True)

            mac, _, payload = path.read_bytes().partition(b"\n")  # the verdict changed under a genuine signature
            path.write_bytes(mac + b"\n" + payload.replace(b'"incorrect"', b'"correct"'))
            tampered = await pool.evaluate(RELU, WRONG)
            assert (tampered.verdict, tampered.cached) == ("incorrect", False)

            path.write_bytes(msgspec.json.encode(evaluation("correct", "ok")))  # written without the key
            unsigned = await pool.evaluate(RELU, WRONG)
            assert (unsigned.verdict, unsigned.cached) == ("incorrect", False)

            await pool.evaluate(RELU, GOOD)  # a genuine entry for another candidate, copied under this one's name
            shutil.copyfile(pool._result_path(RELU, GOOD), path)
            moved = await pool.evaluate(RELU, WRONG)
            assert (moved.verdict, moved.cached) == ("incorrect", False)

    asyncio.run(scenario())
