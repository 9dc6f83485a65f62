"""The Proposer stage: API sets sampled at the Coder's frontier become modules.proposed events, written by the synthesizer or by an LLM; it judges nothing (the validator does).

`Proposer.propose(n)` is the library call; `ProposerStage` runs it on the stage host like every
other stage (`kernelzero serve proposer`): it consumes frontier.snapshot (aim at the newest) and
policy.updated (load the Proposer's new weights between batches, once their hash checks out; a
mismatch is dead-lettered, as in the Coder: producers/policy.py), and proposes a batch whenever it
has caught up with them and the validator keeps up. The LLM path is thin: a prompt from
kernelzero/kit/prompts/proposer.md, one completion per API set through the shared `Generator`, and
the last fenced python block defining `Model` (the whole answer when there is none, so the validator
rejects it and the trainer still sees the tokens). Its events carry what the Proposer trainer needs
(prompt and completion tokens, log-probabilities, temperature, policy version).
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Sequence

import anyio

from kernelzero.config import ProposerConfig
from kernelzero.kit.api_catalog import Limits, get, names
from kernelzero.kit.templates import fill, prompt_hash, template
from kernelzero.producers.api_sampler import ApiSampler
from kernelzero.producers.policy import following_policy, load_update
from kernelzero.producers.synthesizer import SynthesisError, synthesize
from kernelzero.schemas import Event, FrontierSnapshot, ModuleProposed, PolicyUpdated, api_set_key, make_event, uuid7

logger = logging.getLogger("kernelzero.proposer")

PRODUCER = "proposer"
_EXAMPLE_APIS = ("torch.nn.Conv2d", "torch.nn.functional.gelu", "torch.sum")
_SYNTH_TRIES = 8  # API sets redrawn when the synthesizer finds no valid composition


def describe(api: str) -> str:
    """One prompt line: the API, its family and the input shape it wants."""
    try:
        spec = get(api)
    except KeyError:
        return f"- {api}"
    shape = f"rank-{spec.rank} input" if spec.rank else f"input of rank >= {spec.min_rank}"
    hint = f"; {spec.note}" if spec.note else ""
    built = f", with self.m = {spec.init.format_map(_Placeholder())}" if spec.init else ""
    return f"- {api} ({spec.family}; {shape}; e.g. `{spec.call.format_map(_Placeholder())}`{built}{hint})"


class _Placeholder(dict):
    """Template fields shown to the model: extra inputs become y, z; sizes keep their names."""

    def __missing__(self, key: str) -> str:
        return {"e0": "y", "e1": "z"}.get(key, key)


_SET_TRIES = 100  # draws before an excluded API set is given up on


def build_prompt(apis: Sequence[str], scale: float, style: str) -> str:
    """The Proposer's prompt for an API set: full (rules, sizes, an example) or compact (the API list alone)."""
    if style == "compact":
        return fill(template("proposer_compact"), {"apis": ", ".join(apis)})
    limits = Limits.at_scale(scale)
    example = synthesize(list(_EXAMPLE_APIS), seed=0, scale=min(scale, 2.0 ** -6), check=False).source
    return fill(template("proposer"), {
        "apis": "\n".join(describe(a) for a in apis), "numel": f"{limits.numel:,}",
        "max_numel": f"{2 * limits.numel:,}", "feature": str(limits.feature), "channel": str(limits.channel),
        "example": example.strip(),
    })


class Proposer:
    def __init__(self, config: ProposerConfig, generator=None, frontier: FrontierSnapshot | None = None,
                 already_proposed: int = 0):
        if config.backend != "synth" and generator is None:
            raise ValueError(f"proposer backend {config.backend!r} needs a generator (see producers/generation.py)")
        self.config = config
        self.generator = generator
        unknown = sorted(set(config.apis) - set(names()))
        if unknown:
            raise ValueError(f"[proposer] apis: not in the API catalog: {', '.join(unknown)}")
        # A restarted proposer continues the draw sequence instead of proposing its first modules again.
        self.sampler = ApiSampler(config.apis or None, frontier=frontier if config.sampling == "frontier" else None,
                                  explore=config.explore, seed=config.seed + already_proposed)
        self._count = already_proposed

    def update_frontier(self, frontier: FrontierSnapshot) -> None:
        """Aim at a new frontier; with [proposer] sampling = "uniform" the snapshot is ignored (sets stay uniform)."""
        if self.config.sampling == "frontier":
            self.sampler.update(frontier)

    async def propose(self, n: int) -> list[Event]:
        """n modules.proposed events (fewer only if the synthesizer fails on every redraw)."""
        if self.config.backend == "synth":
            return [e for e in (self._synthesized() for _ in range(n)) if e is not None]
        return await self._generated(n)

    def draw(self) -> list[str]:
        """An API set from the sampler that is not excluded (held out); ValueError when none comes in many draws."""
        excluded = set(self.config.exclude_sets)
        smallest, largest = self.config.min_api_set_size or self.config.api_set_size, self.config.api_set_size
        for _ in range(_SET_TRIES):
            size = self.sampler.rng.randint(smallest, largest) if smallest < largest else largest
            apis = self.sampler.sample(size)
            if api_set_key(apis) not in excluded:
                return apis
        raise ValueError(f"[proposer] exclude_sets excludes every API set drawn in {_SET_TRIES} tries")

    def _synthesized(self) -> Event | None:
        for _ in range(_SYNTH_TRIES):
            apis = self.draw()
            self._count += 1
            try:
                module = synthesize(apis, seed=self.config.seed * 1_000_003 + self._count, scale=self.config.scale)
            except SynthesisError as exc:
                logger.info("synthesizer skips %s: %s", apis, exc)
                continue
            return self._event(ModuleProposed(module_id=uuid7(), source=module.source, apis=apis, generator="synth"))
        return None

    async def _generated(self, n: int) -> list[Event]:
        api_sets = [self.draw() for _ in range(n)]
        prompts = [build_prompt(apis, self.config.scale, self.config.prompt) for apis in api_sets]
        completions = await self.generator.generate(
            prompts, 1, temperature=self.config.temperature, top_p=self.config.top_p, max_tokens=self.config.max_tokens,
        )
        events = []
        for apis, prompt, (completion, *_) in zip(api_sets, prompts, completions):
            source = last_model_block(completion.text)
            payload = ModuleProposed(
                module_id=uuid7(), source=source, apis=apis, generator="llm", prompt_hash=prompt_hash(prompt),
                prompt_token_ids=list(completion.prompt_token_ids), token_ids=list(completion.token_ids),
                logprobs=list(completion.logprobs), temperature=self.config.temperature,
            )
            events.append(self._event(payload, policy_version=self.generator.policy_version))
        return events

    def _event(self, payload: ModuleProposed, policy_version: int | None = None) -> Event:
        return make_event(payload, correlation_id=payload.module_id, producer=PRODUCER, policy_version=policy_version)


def last_model_block(text: str) -> str:
    """The module an answer holds: its last python block defining Model, else the raw text."""
    from kernelzero.kit.codeblocks import last_python_block

    return last_python_block(text, "Model") or text


async def _pending(log) -> int:
    """modules.proposed records the validator (its consumer group, named after its role) has not consumed yet."""
    ends = await log.end_offsets("modules.proposed")
    done = await log.committed("validator", "modules.proposed")
    return sum(end - done.get(p, 0) for p, end in ends.items())


class ProposerStage:
    """The Proposer on the stage host: it follows frontier.snapshot and its policy.updated events, and proposes a batch
    each time it has caught up with them (`at_head`) while fewer than `max_pending` modules wait for the validator."""

    name = PRODUCER
    topics = ("frontier.snapshot", "policy.updated")

    def __init__(self, proposer: Proposer, log) -> None:
        self.proposer = proposer
        self.config = proposer.config
        self.log = log
        self.rounds = 0

    async def handle(self, event: Event) -> list[Event]:
        payload = event.payload
        if isinstance(payload, FrontierSnapshot):
            self.proposer.update_frontier(payload)
        elif isinstance(payload, PolicyUpdated) and self.proposer.generator is not None:
            await load_update(self.proposer.generator, payload, PRODUCER)  # a hash mismatch is dead-lettered
        return []

    async def at_head(self) -> list[Event]:
        if self.done() or await _pending(self.log) >= self.config.max_pending:
            return []
        self.rounds += 1
        return await self.proposer.propose(self.config.batch)

    def done(self) -> bool:
        """`[proposer] rounds` rounds proposed (0: never done)."""
        return 0 < self.config.rounds <= self.rounds


async def run(config: Any, idle_exit_s: float | None = None) -> int:
    from contextlib import AsyncExitStack, asynccontextmanager

    from kernelzero.stage import host_stage, read_payloads

    cfg = config.proposer

    @asynccontextmanager
    async def stage(log):
        async with AsyncExitStack() as stack:
            generator = None if cfg.backend == "synth" else \
                await stack.enter_async_context(following_policy(log, cfg, PRODUCER))
            # the newest snapshot so far: the group's commits have moved past the ones an earlier run consumed
            snapshots = await read_payloads(log, "frontier.snapshot", FrontierSnapshot, reader="proposer-frontier")
            proposer = Proposer(cfg, generator, frontier=snapshots[-1] if snapshots else None,
                                already_proposed=sum((await log.end_offsets("modules.proposed")).values()))
            yield ProposerStage(proposer, log)

    stats = await host_stage(config.log, stage, idle_exit_s=idle_exit_s)
    print(f"proposer: consumed {stats.consumed}, produced {stats.produced}, dead-lettered {stats.dead_lettered}",
          file=sys.stderr)
    return 0


def serve(args, config) -> int:
    """`kernelzero serve proposer`: propose in rounds while the validator keeps up; new weights between rounds."""
    return anyio.run(run, config, getattr(args, "idle_exit", None))
