"""`kernelzero distill` on the CPU: checked rows for both roles, held-out combinations kept out of training, a share audited by the real evaluator, prompts free of per-row noise."""

import json

import pytest

from kernelzero.app.cli import main as cli_main
from kernelzero.kit.codeblocks import last_python_block
from kernelzero.producers.proposer import last_model_block
from kernelzero.bootstrap.teacher_check import check
from kernelzero.schemas import api_set_key

APIS = ["torch.relu", "torch.sigmoid", "torch.abs", "torch.sum", "torch.tanh", "torch.exp"]


def read(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_distill_writes_checked_split_sets_and_audits_a_share(tmp_path, capsys):
    config = tmp_path / "kz.toml"
    config.write_text(f"[proposer]\nscale = {2.0 ** -16}\napi_set_size = 3\nmin_api_set_size = 1\n"
                      f'apis = {json.dumps(APIS)}\nprompt = "compact"\n[coder]\nprompt = "compact"\n'
                      f'[evaluator]\ndevice = "cpu"\ncache_dir = "{tmp_path / "cache"}"\n')
    out = tmp_path / "distill"
    args = ["distill", "--config", str(config), "--modules", "400", "--out", str(out), "--heldout-share", "0.3",
            "--audit-share", "0.03", "--workers", "2"]
    assert cli_main(args) == 0
    report = json.loads((out / "distill.json").read_text())
    sets = {name: read(out / f"{name}.jsonl") for name in report["rows"]}
    assert report["rows"] == {name: len(rows) for name, rows in sets.items()}
    assert report["rows"]["coder_train"] >= 100 and report["rows"]["coder_heldout"] >= 10
    assert report["audited"] >= 3 and report["disagreements"] == []  # the evaluator agrees with the check
    heldout = set(report["heldout_sets"])
    assert heldout and all(api_set_key(r["apis"]) not in heldout for r in sets["coder_train"] + sets["proposer_train"])
    assert all(api_set_key(r["apis"]) in heldout for r in sets["coder_heldout"] + sets["proposer_heldout"])
    prompts = [r["prompt"] for r in sets["coder_train"]]
    assert len(set(prompts)) == len(prompts)  # one row per distinct module
    assert not any("seed" in p or '"""' in p for p in prompts)  # nothing a model could key a memory on
    shapes = {r["reference"].split("torch.randn(")[1].split(")")[0] for r in sets["coder_train"]}
    assert len(shapes) >= 5  # sizes vary from module to module
    for row in sets["coder_train"][:20] + sets["coder_heldout"][:5]:
        source = last_python_block(row["completion"], "ModelNew")
        check(row["reference"], source)
        assert row["prompt"].endswith("Answer:\n")
    for row in sets["proposer_train"][:20]:
        assert last_model_block(row["completion"]) == row["reference"].strip("\n") + "\n"
        assert all(api in row["prompt"] for api in row["apis"])


def test_bad_arguments_are_refused_with_a_message(tmp_path, capsys):
    assert cli_main(["distill", "--modules", "0", "--out", str(tmp_path / "d")]) == 2
    assert cli_main(["distill", "--modules", "5", "--out", str(tmp_path / "d"), "--audit-share", "2"]) == 2
    assert "--modules must be >= 1" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()


def test_a_module_that_torch_refuses_drops_its_row_and_the_distillation_goes_on(monkeypatch):
    """Seen at scale 2**-15 over the whole catalog: a loss given a negative variance raised out of the worker."""
    from kernelzero.bootstrap import distill
    from kernelzero.bootstrap import teacher_check

    def refuses(module, answer):
        raise ValueError("var has negative entry/entries")

    monkeypatch.setattr(teacher_check, "check", refuses)
    made = distill.make(distill.ModuleSpec(apis=["torch.relu"], seed=0, scale=2.0 ** -15))
    assert made.failed == "raised: ValueError" and made.module and made.answer


def test_the_bootstraps_set_sizes_are_its_plans_not_the_loops(tmp_path):
    """The loop may propose other sizes than the bootstrap distilled (the demo: two or three, on one to three)."""
    from kernelzero.bootstrap.from_zero import Plan, distill_step
    from kernelzero.config import Config

    config = Config()
    config.proposer.apis, config.proposer.scale, config.proposer.prompt = APIS, 2.0 ** -16, "compact"
    config.proposer.api_set_size = config.proposer.min_api_set_size = 3
    config.evaluator.cache_dir = str(tmp_path / "cache")
    plan = Plan(modules=40, audit_share=0.0, api_set_sizes=(1, 1))
    out = distill_step(config, plan, tmp_path)
    rows = read(out / "coder_train.jsonl") + read(out / "coder_heldout.jsonl")
    assert rows and {len(r["apis"]) for r in rows} == {1}
    assert distill_step(config, Plan(modules=40, audit_share=0.0, api_set_sizes=(2, 3)), tmp_path) != out


def test_work_beside_the_audit_reads_the_final_sets_before_the_report(tmp_path):
    """The bootstrap's SFT runs while the audit judges: the sets it reads are whole and the audit changes none of
    them; distill.json, which marks the distillation done, comes after both."""
    from kernelzero.bootstrap.distill import distill
    from kernelzero.config import Config

    config = Config()
    config.proposer.apis, config.proposer.scale, config.proposer.prompt = APIS, 2.0 ** -16, "compact"
    config.evaluator.cache_dir = str(tmp_path / "cache")
    out = tmp_path / "d"
    seen: dict = {}

    def beside(sets, progress):
        seen["rows"] = read(sets / "coder_train.jsonl") + read(sets / "coder_heldout.jsonl")
        seen["done"] = (sets / "distill.json").exists()

    report = distill(config, out, 30, 0.2, audit_share=0.1, workers=2, set_sizes=(1, 2), beside=beside)
    assert seen["rows"] and seen["done"] is False
    assert report.audited >= 1 and (out / "distill.json").exists()
    assert read(out / "coder_train.jsonl") + read(out / "coder_heldout.jsonl") == seen["rows"]


def test_the_audit_starts_at_once_only_on_a_gpu_asked_without_starting_cuda():
    """On a CPU the audit waits for freed cores (three busy processes on two cores took the bootstrap 391 s against
    319 s); the question must not start CUDA in the process that forks the distillation's workers after it."""
    import torch

    from kernelzero.bootstrap.from_zero import _trains_on_gpu

    assert _trains_on_gpu("cuda") and not _trains_on_gpu("cpu")
    assert _trains_on_gpu("auto") == torch.cuda.is_available()
    assert not torch.cuda.is_initialized()


def test_the_audit_waits_for_the_cores_it_is_given_and_never_past_the_work_beside(tmp_path):
    """On a CPU the audit starts when the first role's SFT is done (its cores freed), not beside both SFT processes;
    work beside that ends without setting the event (cached, failed) starts it too."""
    import threading
    import time

    from kernelzero.bootstrap.distill import distill
    from kernelzero.config import Config

    config = Config()
    config.proposer.apis, config.proposer.scale, config.proposer.prompt = APIS, 2.0 ** -16, "compact"
    config.evaluator.cache_dir = str(tmp_path / "cache")

    def auditing(progress) -> bool:
        return any(task.description.startswith("auditing") for task in progress.tasks)

    def freeing(event):
        def beside(sets, progress):
            time.sleep(1.0)
            assert not auditing(progress)
            if event is not None:
                event.set()
                for _ in range(200):
                    if auditing(progress):
                        break
                    time.sleep(0.05)
                assert auditing(progress)
        return beside

    freed = threading.Event()
    assert distill(config, tmp_path / "a", 20, 0.2, audit_share=0.1, workers=1, set_sizes=(1, 1),
                   beside=freeing(freed), audit_after=freed, audit_workers=1).audited >= 1
    assert distill(config, tmp_path / "b", 20, 0.2, audit_share=0.1, workers=1, set_sizes=(1, 1),
                   beside=freeing(None), audit_after=threading.Event(), audit_workers=1).audited >= 1


def test_the_first_role_done_frees_its_cores_while_the_other_trains():
    import concurrent.futures
    import threading

    from kernelzero.bootstrap.from_zero import _show_steps

    release, freed = threading.Event(), threading.Event()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        futures = {"proposer": pool.submit(lambda: None), "coder": pool.submit(release.wait, 30)}
        watcher = threading.Thread(target=_show_steps, args=({}, futures, None, freed))
        watcher.start()
        assert freed.wait(10) and not futures["coder"].done()
        release.set()
        watcher.join(10)
        assert not watcher.is_alive()


def test_the_distillations_cache_key_follows_every_evaluator_module(monkeypatch):
    from pathlib import Path

    from kernelzero.bootstrap.from_zero import _code_hash

    before = _code_hash()
    read = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: read(self) + (b"#" if self.name == "digest.py" else b""))
    assert _code_hash() != before  # the audit's verdicts, in distill.json, depend on the digest's comparison


def test_the_models_cache_key_follows_what_a_size_stands_for(monkeypatch):
    from pathlib import Path

    from kernelzero.bootstrap.from_zero import DEMO_PLAN, models_key
    from kernelzero.config import Config
    from kernelzero.kit import models

    before = models_key(Config(), DEMO_PLAN, Path("distill-x"), "cpu")
    assert models_key(Config(), DEMO_PLAN, Path("distill-y"), "cpu") != before
    monkeypatch.setitem(models.MODEL_SIZES, "tiny", {**models.MODEL_SIZES["tiny"], "num_hidden_layers": 3})
    assert models_key(Config(), DEMO_PLAN, Path("distill-x"), "cpu") != before  # same name, another model


def test_a_small_coder_keeps_a_tiny_proposer_and_both_sizes_name_the_models(monkeypatch):
    from pathlib import Path

    import msgspec

    from kernelzero.bootstrap.from_zero import DEMO_PLAN, models_key
    from kernelzero.config import Config
    from kernelzero.kit import models

    small = msgspec.structs.replace(DEMO_PLAN, size="small")
    assert (small.coder.size_in(small), small.proposer.size_in(small)) == ("small", "tiny")
    before = models_key(Config(), small, Path("distill-x"), "cpu")
    monkeypatch.setitem(models.MODEL_SIZES, "tiny", {**models.MODEL_SIZES["tiny"], "num_hidden_layers": 3})
    assert models_key(Config(), small, Path("distill-x"), "cpu") != before  # the Proposer's size changed meaning


def test_the_models_cache_key_follows_the_stopping_rule_s_source(monkeypatch):
    from pathlib import Path

    from kernelzero.bootstrap.from_zero import DEMO_PLAN, models_key
    from kernelzero.config import Config

    before = models_key(Config(), DEMO_PLAN, Path("distill-x"), "cpu")
    read = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: read(self) + (b"#" if self.name == "sft_stop.py" else b""))
    assert models_key(Config(), DEMO_PLAN, Path("distill-x"), "cpu") != before  # a cached SFT stopped by another rule
