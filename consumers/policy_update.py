"""The policy update: a clipped token-level policy-gradient step on stored completions, and atomic checkpoints.

Why not trl's GRPOTrainer: it owns generation, the prompt dataset and the reward call inside its
training loop (`_generate_and_score_completions`); our completions, behaviour log-probabilities
and advantages arrive from the event log, already scored, possibly several versions old. A
subclass would have to stub out generation, the sampler and the dataloader -- most of the
class. So the loss is written here (about 40 lines), in the same form as trl's "bnpo"/"dapo"
loss, and trl's `selective_log_softmax` computes the per-token log-probabilities.

The loss, per completion token t of sample i (advantage A_i, sample weight w_i, behaviour
log-probability b_t stored at generation, current log-probability l_t, temperature-scaled as
the sample was drawn):
- fresh sample: -min(rho_t A_i, clip(rho_t, 1 - clip_eps, 1 + clip_eps) A_i), rho_t = exp(l_t - b_t);
- stale sample (older than staleness_k versions, stale = "importance_weight"; with "drop" it
  is left out): -min(exp(l_t - b_t), is_cap) A_i, the weight detached (truncated importance
  sampling; one gradient step per batch, so the proximal policy is the current one);
- plus kl_beta * k3, k3 = exp(r_t - l_t) - (r_t - l_t) - 1 against the reference model, the policy RL
  started from (the base model with the LoRA adapter disabled, or a frozen copy of the start for full
  fine-tuning, loaded from the start even when resuming from a checkpoint);
- times w_i, summed over every token of the step and divided by their count (token-level mean).
One `step` is one optimizer step (gradients accumulate over micro-batches) and one version. The trust
region (kl_max > 0): after the optimizer's step the mean k3 over the step's tokens must not exceed
max(kl_max, its value before the step); a step that would is halved toward the old weights until it
does, and undone after MAX_HALVINGS halvings, so no batch, however large its advantages, moves the
policy out of the region (metrics `kl_to_start`, `trust_region_halvings`).
Under a distributed launch each rank trains on its slice of the batch (consumers/data_parallel.py).
It does not guarantee bitwise-reproducible steps across devices.
"""

from __future__ import annotations

import copy
import os
import time
import uuid
from pathlib import Path
from typing import Sequence

import torch
from trl.trainer.utils import selective_log_softmax

from kernelzero.config import TrainerConfig
from kernelzero.consumers import data_parallel
from kernelzero.consumers.ca_grpo import is_stale
from kernelzero.kit.models import is_adapter_dir, load_model, weights_sha256
from kernelzero.schemas import Event, PolicyUpdated, make_event
from kernelzero.schemas.messages import TrainingSample


MAX_HALVINGS = 6  # a step still outside the trust region at 1/64 of its size is undone


class Batch:
    """Left-padded prompts followed by right-padded completions, so completions share columns."""

    def __init__(self, samples: Sequence[TrainingSample], device: torch.device, current_version: int,
                 config: TrainerConfig) -> None:
        prompt_len = max(len(s.prompt_token_ids) for s in samples)
        completion_len = max(len(s.token_ids) for s in samples)
        rows, masks, completion_masks, old = [], [], [], []
        for s in samples:
            p_pad, c_pad = prompt_len - len(s.prompt_token_ids), completion_len - len(s.token_ids)
            rows.append([0] * p_pad + s.prompt_token_ids + s.token_ids + [0] * c_pad)
            masks.append([0] * p_pad + [1] * (len(s.prompt_token_ids) + len(s.token_ids)) + [0] * c_pad)
            completion_masks.append([1] * len(s.token_ids) + [0] * c_pad)
            old.append(s.logprobs + [0.0] * c_pad)
        self.input_ids = torch.tensor(rows, device=device)
        self.attention_mask = torch.tensor(masks, device=device)
        self.completion_ids = self.input_ids[:, prompt_len:]
        self.completion_mask = torch.tensor(completion_masks, device=device, dtype=torch.float32)
        self.old_logprobs = torch.tensor(old, device=device, dtype=torch.float32)
        self.advantages = torch.tensor([s.advantage for s in samples], device=device, dtype=torch.float32)
        self.weights = torch.tensor([s.weight for s in samples], device=device, dtype=torch.float32)
        self.temperatures = torch.tensor([s.temperature for s in samples], device=device, dtype=torch.float32)
        self.stale = torch.tensor(
            [is_stale(s.policy_version, current_version, config.staleness_k) for s in samples], device=device,
        )


def token_logprobs(model: torch.nn.Module, batch: Batch) -> torch.Tensor:
    """log pi(token | prefix) for every completion column, at each row's sampling temperature."""
    position_ids = (batch.attention_mask.cumsum(-1) - 1).clamp(min=0)
    keep = batch.completion_ids.size(1) + 1
    logits = model(
        input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=position_ids,
        logits_to_keep=keep, use_cache=False,
    ).logits[:, :-1].float()
    logits = logits / batch.temperatures[:, None, None]
    return selective_log_softmax(logits, batch.completion_ids)


def policy_loss_terms(
    logp: torch.Tensor, batch: Batch, config: TrainerConfig, ref_logp: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token loss (masked, weighted, not yet averaged) and token sums for the metrics."""
    advantages = batch.advantages[:, None]
    log_ratio = logp - batch.old_logprobs
    ratio = torch.exp(log_ratio)
    clipped = torch.clamp(ratio, 1 - config.clip_eps, 1 + config.clip_eps)
    fresh_loss = -torch.min(ratio * advantages, clipped * advantages)
    is_weight = torch.clamp(torch.exp(log_ratio.detach()), max=config.is_cap)
    stale_loss = -is_weight * advantages * torch.exp(logp - logp.detach())
    per_token = torch.where(batch.stale[:, None], stale_loss, fresh_loss)
    mask = batch.completion_mask * batch.weights[:, None]
    sums = {
        "clip_fraction": ((ratio != clipped) & ~batch.stale[:, None]).float().mul(batch.completion_mask).sum(),
        "ratio_mean": ratio.detach().mul(batch.completion_mask).sum(),
    }
    if ref_logp is not None:
        delta = ref_logp - logp
        kl = torch.exp(delta) - delta - 1
        per_token = per_token + config.kl_beta * kl
        sums["kl"] = kl.detach().mul(batch.completion_mask).sum()
    return per_token * mask, sums


def wrap_with_lora(model: torch.nn.Module, config: TrainerConfig) -> torch.nn.Module:
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(r=config.lora_rank, lora_alpha=config.lora_alpha, target_modules="all-linear",
                      task_type="CAUSAL_LM", lora_dropout=0.0)
    return get_peft_model(model, lora)


class PolicyLearner:
    """One role's trainable policy: optimizer state, version counter, checkpoints."""

    def __init__(self, model: torch.nn.Module, config: TrainerConfig, *, role: str = "coder", version: int = 0,
                 tokenizer=None, start: torch.nn.Module | None = None) -> None:
        """`start`: the policy RL began from, the KL reference of full fine-tuning (default: `model` as it is now)."""
        from peft import PeftModel

        self.config = config
        self.role = role
        self.version = version
        self.tokenizer = tokenizer  # saved with full fine-tuning checkpoints so they load on their own
        if config.lora_rank > 0 and not isinstance(model, PeftModel):
            model = wrap_with_lora(model, config)
        self.model = model
        self.device = next(model.parameters()).device
        if config.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            if isinstance(model, PeftModel):
                model.enable_input_require_grads()
        self.is_lora = isinstance(model, PeftModel)
        self.tracks_kl = config.kl_beta > 0 or config.kl_max > 0
        self.reference = None
        if self.tracks_kl and not self.is_lora:
            self.reference = (start if start is not None else copy.deepcopy(model)).eval().requires_grad_(False)
        params = [p for p in model.parameters() if p.requires_grad]
        data_parallel.broadcast_parameters(params)
        rate = config.lora_learning_rate if self.is_lora else config.learning_rate
        self.optimizer = torch.optim.AdamW(params, lr=rate, weight_decay=0.0)

    @classmethod
    def from_directory(cls, model_dir: str, config: TrainerConfig, *, role: str, device: str = "auto",
                       checkpoint_root: str | os.PathLike | None = None) -> "PolicyLearner":
        """Load `model_dir`, or resume from the newest checkpoint under checkpoint_root (optimizer state restarts).

        A LoRA adapter (an SFT result, or one of our checkpoints) loads trainable on the base it
        names, so RL continues the adapter instead of freezing it; a full model gets a fresh adapter
        (lora_rank > 0) or is trained whole.
        """
        latest = latest_checkpoint(checkpoint_root) if checkpoint_root is not None else None
        version = int(latest.name[1:]) if latest else 0
        # A frozen LoRA base can stay in the compute dtype; full fine-tuning keeps float32 master weights.
        dtype = config.dtype if config.lora_rank > 0 or is_adapter_dir(latest or model_dir) else "float32"
        source = latest or Path(model_dir).resolve()
        model, tokenizer = load_model(str(source), device=device, dtype=dtype, trainable=True)
        start = None
        if latest and (config.kl_beta > 0 or config.kl_max > 0) and config.lora_rank <= 0 and not is_adapter_dir(latest):
            start, _ = load_model(str(Path(model_dir).resolve()), device=device, dtype=dtype)
        return cls(model, config, role=role, version=version, tokenizer=tokenizer, start=start)

    def forward_logprobs(self, model: torch.nn.Module, batch: Batch) -> torch.Tensor:
        on_cuda = self.device.type == "cuda"
        dtype = torch.bfloat16 if self.config.dtype == "auto" else getattr(torch, self.config.dtype)
        with torch.autocast(self.device.type, dtype=dtype, enabled=on_cuda and dtype != torch.float32):
            return token_logprobs(model, batch)

    def _reference_logprobs(self, batch: Batch) -> torch.Tensor | None:
        if not self.tracks_kl:
            return None
        with torch.no_grad():
            if self.is_lora:
                with self.model.disable_adapter():
                    return self.forward_logprobs(self.model, batch)
            return self.forward_logprobs(self.reference, batch)

    def trainable(self, samples: Sequence[TrainingSample]) -> tuple[list[TrainingSample], int]:
        """(the samples a step would use, how many were dropped as stale at this version)."""
        kept = [s for s in samples if s.weight > 0 and s.token_ids]
        if self.config.stale != "drop":
            return kept, 0
        fresh = [s for s in kept if not is_stale(s.policy_version, self.version, self.config.staleness_k)]
        return fresh, len(kept) - len(fresh)

    def step(self, samples: Sequence[TrainingSample]) -> dict[str, float]:
        """One optimizer step over `samples`; the version advances by one. Returns metrics."""
        started = time.perf_counter()
        samples, dropped = self.trainable(samples)
        if not samples:
            raise ValueError("no trainable samples in this step (all stale, weightless or empty)")
        bad = [s.sample_id for s in samples if len(s.logprobs) != len(s.token_ids) or not s.prompt_token_ids]
        if bad:
            raise ValueError(f"samples without a prompt or with log-probabilities not matching tokens: {bad[:5]}")
        self.model.train()
        tokens = float(sum(len(s.token_ids) for s in samples))  # of the whole batch, on every rank
        # every name up front: a rank whose slice is empty still sums the same metrics as the others
        totals = dict.fromkeys(["loss", "clip_fraction", "ratio_mean"] + (["kl"] if self.tracks_kl else []), 0.0)
        self.optimizer.zero_grad(set_to_none=True)
        size = max(1, self.config.micro_batch_size)
        mine = data_parallel.shard(samples)
        batches = []
        for start in range(0, len(mine), size):
            batch = Batch(mine[start:start + size], self.device, self.version, self.config)
            ref_logp = self._reference_logprobs(batch)
            batches.append((batch, ref_logp))
            logp = self.forward_logprobs(self.model, batch)
            per_token, sums = policy_loss_terms(logp, batch, self.config, ref_logp)
            loss = per_token.sum() / tokens
            loss.backward()
            totals["loss"] += loss.item()
            for name, value in sums.items():
                totals[name] += value.item() / tokens
        params = [p for p in self.model.parameters() if p.requires_grad]
        data_parallel.sum_gradients(params)
        totals = data_parallel.sum_metrics(totals, self.device)
        grad_norm = torch.nn.utils.clip_grad_norm_(params, self.config.max_grad_norm)
        before = [p.detach().clone() for p in params] if self.config.kl_max > 0 else []
        self.optimizer.step()
        if self.tracks_kl:
            totals["kl_to_start"], totals["trust_region_halvings"] = self._within_trust_region(
                params, before, batches, tokens, limit=max(self.config.kl_max, totals["kl"]))
        self.version += 1
        return {
            **totals, "grad_norm": float(grad_norm), "samples": float(len(samples)), "tokens": tokens,
            "stale_dropped": float(dropped), "reward_mean": sum(s.reward for s in samples) / len(samples),
            "step_s": time.perf_counter() - started,
        }

    def _kl_to_start(self, batches: list, tokens: float) -> float:
        """The mean per-token KL (k3) of the policy as it is now to the start policy, over the step's tokens."""
        total = 0.0
        with torch.no_grad():
            for batch, ref_logp in batches:
                delta = ref_logp - self.forward_logprobs(self.model, batch)
                total += (torch.exp(delta) - delta - 1).mul(batch.completion_mask).sum().item()
        return data_parallel.sum_metrics({"kl": total / tokens}, self.device)["kl"]

    def _within_trust_region(self, params: list, before: list, batches: list, tokens: float,
                             limit: float) -> tuple[float, float]:
        """(KL to the start after the step, how often it was halved): with kl_max, a step that ends farther from
        the start than `limit` (kl_max, or where the policy already was on these tokens) is halved toward where
        it began until it is within, and undone after MAX_HALVINGS. Adam's moments keep the whole step."""
        kl = self._kl_to_start(batches, tokens)
        halvings = 0
        while self.config.kl_max > 0 and kl > limit:
            halvings += 1
            with torch.no_grad():
                for param, old in zip(params, before):
                    param.copy_(old if halvings > MAX_HALVINGS else (param + old) / 2)
            kl = self._kl_to_start(batches, tokens)
            if halvings > MAX_HALVINGS:
                break
        return kl, float(halvings)

    def save(self, root: str | os.PathLike) -> tuple[Path, str]:
        """Write the weights of the current version atomically under root/v{version:06d}; returns (path, sha256)."""
        root = Path(root)
        root.mkdir(parents=True, exist_ok=True)
        final = root / f"v{self.version:06d}"
        if final.exists():
            raise FileExistsError(f"checkpoint {final} already exists; versions must only grow")
        tmp = root / f".tmp-{final.name}-{uuid.uuid4().hex[:8]}"
        self.model.save_pretrained(tmp)
        if self.tokenizer is not None and not self.is_lora:
            self.tokenizer.save_pretrained(tmp)
        for path in tmp.rglob("*"):
            if path.is_file():
                _fsync(path)
        _fsync(tmp)
        os.rename(tmp, final)
        _fsync(root)
        return final, weights_sha256(final)

    def update_event(self, path: Path, sha256: str, metrics: dict[str, float], producer: str = "trainer") -> Event:
        payload = PolicyUpdated(role=self.role, version=self.version, uri=str(path.resolve()), sha256=sha256,
                                step=self.version, metrics=metrics)
        return make_event(payload, correlation_id=f"policy:{self.role}", producer=producer,
                          policy_version=self.version)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def latest_checkpoint(root: str | os.PathLike) -> Path | None:
    """The highest-version complete checkpoint under root (temp directories are ignored)."""
    root = Path(root)
    if not root.is_dir():
        return None
    versions = sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("v") and p.name[1:].isdigit())
    return versions[-1] if versions else None
