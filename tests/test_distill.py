"""`kernelzero distill` on the CPU: verified rows for both roles, the same rows as `replay sft`, held-out API sets kept out, resumable."""

import json

import pytest

from kernelzero.app.cli import main as cli_main
from kernelzero.kit.codeblocks import last_python_block
from kernelzero.producers.proposer import last_model_block
from kernelzero.schemas import api_set_key

APIS = ["torch.relu", "torch.sigmoid", "torch.abs", "torch.sum", "torch.mean"]


def read(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_distill_writes_verified_split_sets_and_resumes(tmp_path, capsys):
    config = tmp_path / "kz.toml"
    config.write_text(f"[proposer]\nscale = {2.0 ** -15}\napi_set_size = 2\napis = {json.dumps(APIS)}\n"
                      f'[coder]\nprompt = "compact"\n[evaluator]\ndevice = "cpu"\ncache_dir = "{tmp_path / "cache"}"\n'
                      '[validator]\ndevice = "cpu"\n')
    out = tmp_path / "distill"
    args = ["distill", "--config", str(config), "--modules", "8", "--out", str(out), "--heldout-share", "0.3"]
    assert cli_main(args) == 0
    report = json.loads((out / "distill.json").read_text())
    sets = {name: read(out / f"{name}.jsonl") for name in report["rows"]}
    assert report["correct"] >= 1 and report["rows"]["coder_train"] + report["rows"]["coder_heldout"] == report["correct"]
    heldout = set(report["heldout_sets"])
    assert heldout and all(api_set_key(r["apis"]) not in heldout for r in sets["coder_train"] + sets["proposer_train"])
    assert all(api_set_key(r["apis"]) in heldout for r in sets["coder_heldout"] + sets["proposer_heldout"])
    for row in sets["coder_train"] + sets["coder_heldout"]:
        assert last_python_block(row["completion"], "ModelNew") and row["prompt"].endswith("Answer:\n")
    for row in sets["proposer_train"]:
        assert last_model_block(row["completion"]) == row["reference"].strip("\n") + "\n"
    # the same Coder rows as `kernelzero replay --kind sft` on the run's log
    assert cli_main(["replay", "--config", str(out / "kernelzero.toml"), "--kind", "sft", "--to", str(tmp_path / "r.jsonl")]) == 0
    replayed = {(r["prompt"], r["completion"]) for r in read(tmp_path / "r.jsonl")}
    assert replayed == {(r["prompt"], r["completion"]) for r in sets["coder_train"] + sets["coder_heldout"]}
    capsys.readouterr()
    # a second run resumes: nothing is proposed, judged or evaluated again
    assert cli_main(args) == 0
    again = json.loads((out / "distill.json").read_text())
    assert {k: again[k] for k in ("modules", "accepted", "lowered", "correct", "rows")} == \
        {k: report[k] for k in ("modules", "accepted", "lowered", "correct", "rows")}


def test_distilling_leaves_the_callers_log_and_proposer_alone(tmp_path):
    # the demo distils first, then runs its loop with the same configuration: on a first run it once
    # ran that loop on the distillation's log, with the synthesizer as its Proposer
    from kernelzero.app.distill import distill_config
    from kernelzero.config import load_config

    config = load_config(env={"KERNELZERO_LOG_URL": f"embedded:{tmp_path}/run.sqlite"})
    config.proposer.backend = "transformers"
    distilling = distill_config(config, tmp_path / "distill")
    assert distilling.log.url.endswith("distill/log.sqlite") and distilling.proposer.backend == "synth"
    assert (config.log.url, config.proposer.backend) == (f"embedded:{tmp_path}/run.sqlite", "transformers")
