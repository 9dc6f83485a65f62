"""Data-parallel policy updates on the CPU (gloo): two ranks step like one process on the whole batch.

The real launcher runs the service: `torchrun --nproc-per-node 2 -m kernelzero.app.cli serve trainer`,
rank 0 on the event log, rank 1 following. NCCL and several GPUs are not exercised here.
"""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from kernelzero.config import TrainerConfig
from kernelzero.consumers.policy_update import PolicyLearner
from kernelzero.kit.models import TINY_QWEN2, build_random_model, load_model
from kernelzero.schemas import PolicyUpdated
from kernelzero.schemas.messages import TrainingSample

CONFIG = TrainerConfig(lora_rank=4, kl_beta=0.05, micro_batch_size=2, lora_learning_rate=1e-2, device="cpu")


def batch() -> list[TrainingSample]:
    """Five samples of uneven lengths: the two ranks get 3 and 2 samples and different token counts."""
    lengths = [2, 7, 3, 5, 1]
    return [TrainingSample(sample_id=f"s{i}", prompt_token_ids=[1, 2 + i], token_ids=list(range(10, 10 + n)),
                           logprobs=[-4.0] * n, advantage=(-1.0) ** i * (i + 1) / 5, policy_version=0)
            for i, n in enumerate(lengths)]


def learner(model_dir: Path, seed: int) -> PolicyLearner:
    torch.manual_seed(seed)  # the LoRA adapter's random start
    return PolicyLearner(load_model(str(model_dir), device="cpu")[0], CONFIG)


def trainable_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def gradients(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """What the step applied (kept after it): summed over ranks and clipped."""
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}


def _rank(rank: int, port: int, model_dir: Path, out: Path) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank))
    from kernelzero.consumers import data_parallel
    data_parallel.start("cpu", TrainerConfig().collective_timeout_s)
    policy = learner(model_dir, seed=rank)  # rank 1 starts from another adapter: rank 0's must win
    metrics = policy.step(batch())
    torch.save({"state": trainable_state(policy.model), "grads": gradients(policy.model), "metrics": metrics},
               out / f"rank{rank}.pt")
    data_parallel.finish()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return build_random_model(tmp_path_factory.mktemp("tiny"), dict(TINY_QWEN2, initializer_range=0.3), seed=0)


def test_two_ranks_step_like_one_process_on_the_whole_batch(model_dir, tmp_path):
    mp.start_processes(_rank, args=(free_port(), model_dir, tmp_path), nprocs=2, start_method="spawn")
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1)]
    single = learner(model_dir, seed=0)
    before = trainable_state(single.model)
    metrics = single.step(batch())
    after = trainable_state(single.model)
    assert any(not torch.equal(before[n], after[n]) for n in after)  # the step moved the adapter
    grads = gradients(single.model)
    scale = max(g.abs().max().item() for g in grads.values())
    for name in after:
        torch.testing.assert_close(ranks[0]["state"][name], ranks[1]["state"][name], rtol=0, atol=0)
        torch.testing.assert_close(ranks[0]["grads"][name], grads[name], rtol=1e-4, atol=1e-5 * scale)
    for key in ("loss", "kl", "clip_fraction", "grad_norm", "tokens"):  # grad_norm: the global normalisation
        assert ranks[0]["metrics"][key] == pytest.approx(metrics[key], rel=1e-4, abs=1e-7), key


def test_the_service_under_torchrun_steps_once_per_batch_and_publishes_from_rank_0(model_dir, tmp_path):
    import anyio

    from kernelzero.log import open_log
    from kernelzero.stage import publish
    from tests.trainer.test_trainer_service import module_events, read_topic

    log_url = f"embedded:{tmp_path / 'log.sqlite'}"
    (tmp_path / "kz.toml").write_text(
        f'[log]\nurl = "{log_url}"\n[coder]\nmodel = "{model_dir}"\n'
        f'[trainer]\ngroups_per_step = 2\nlora_rank = 4\ndevice = "cpu"\ncheckpoint_dir = "{tmp_path / "ckpt"}"\n'
        # rank 0 then idles for 8 s, past the timeout: only its pings keep rank 1's broadcast alive
        'collective_timeout_s = 4\n')

    async def fill() -> None:
        log = await open_log(log_url)
        await publish(log, module_events("m1", ["correct", "incorrect", "rejected", "correct"])
                      + module_events("m2", ["incorrect", "compile_error", "correct", "timeout"]))
        await log.close()

    anyio.run(fill)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_"))}
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "-m", "kernelzero.app.cli", "serve", "trainer", "--config", str(tmp_path / "kz.toml"), "--idle-exit", "8"],
        capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "trainer rank 1: took part in 1 steps" in output
    assert "ranks 2" in output

    async def updates() -> list:
        log = await open_log(log_url)
        events = await read_topic(log, "policy.updated")
        await log.close()
        return [e.payload for e in events]

    published = anyio.run(updates)
    assert [(u.role, u.version) for u in published] == [("coder", 1)]  # one writer, one step
    assert isinstance(published[0], PolicyUpdated) and Path(published[0].uri).is_dir()
