"""Turn one decoded event into rows of the projection's tables; does not touch DuckDB or dedupe anything.

Token arrays (token_ids, logprobs, prompt_token_ids) stay in the log: tables keep their lengths
and the mean log-probability, and the `events.payload` JSON leaves them out. API lists of
samples and evaluations are stored sorted and without repeats (the frontier groups by them).
"""

from __future__ import annotations

from typing import Callable

import msgspec

from kernelzero.analytics.taxonomy import classify_failure
from kernelzero.log import Record
from kernelzero.schemas import (
    Event, api_set_key, GroupScored, ModuleAccepted, ModuleProposed, ModuleRejected, PolicyUpdated, SampleEvaluated,
    SampleGenerated,
)

TOKEN_FIELDS = ("token_ids", "logprobs", "prompt_token_ids")
Rows = dict[str, list[dict]]

_json = msgspec.json.Encoder()


def micros(seconds: float) -> int:
    """Epoch seconds to the integer microseconds Arrow timestamps hold (rounded, so rebuilds agree)."""
    return round(seconds * 1_000_000)


def _event_row(event: Event, record: Record) -> dict:
    env = event.envelope
    payload = msgspec.to_builtins(event.payload)
    for name in TOKEN_FIELDS:
        payload.pop(name, None)
    return {
        "event_id": env.event_id, "type": env.type, "schema_version": env.schema_version,
        "produced_at": micros(env.produced_at), "correlation_id": env.correlation_id,
        "causation_id": env.causation_id, "producer": env.producer, "policy_version": env.policy_version,
        "topic": record.topic, "partition": record.partition, "offset": record.offset,
        "payload": _json.encode(payload).decode(),
    }


def _common(event: Event) -> dict:
    env = event.envelope
    return {"event_id": env.event_id, "produced_at": micros(env.produced_at)}


def _evaluated(event: Event, p: SampleEvaluated) -> Rows:
    env = event.envelope
    row = _common(event) | msgspec.structs.asdict(p) | {
        "evidence": _json.encode(p.evidence).decode(),
        "failure_class": classify_failure(p.verdict, p.reason, p.evidence),
        "policy_version": env.policy_version, "producer": env.producer, "causation_id": env.causation_id,
        "apis": sorted(set(p.apis)), "api_set": api_set_key(p.apis),  # views.sql splits it on API_SET_SEPARATOR
        "first_evaluation": True,  # the projection clears it for re-evaluations
    }
    return {"evaluations": [row]}


def _generated(event: Event, p: SampleGenerated) -> Rows:
    env = event.envelope
    row = _common(event) | {
        "sample_id": p.sample_id, "module_id": p.module_id, "backend": p.backend, "source": p.source,
        "reason": p.reason, "group_size": p.group_size, "group_index": p.group_index, "turn": p.turn,
        "prompt_hash": p.prompt_hash, "prompt_tokens": len(p.prompt_token_ids),
        "completion_tokens": len(p.token_ids),
        "mean_logprob": sum(p.logprobs) / len(p.logprobs) if p.logprobs else None,
        "temperature": p.temperature, "apis": sorted(set(p.apis)), "level": p.level, "split": p.split,
        "policy_version": env.policy_version, "producer": env.producer,
    }
    return {"samples": [row]}


def _proposed(event: Event, p: ModuleProposed) -> Rows:
    env = event.envelope
    row = _common(event) | {
        "module_id": p.module_id, "source": p.source, "apis": p.apis, "generator": p.generator,
        "level": p.level, "prompt_hash": p.prompt_hash, "completion_tokens": len(p.token_ids),
        "policy_version": env.policy_version, "producer": env.producer,
    }
    return {"modules_proposed": [row]}


def _accepted(event: Event, p: ModuleAccepted) -> Rows:
    return {"modules_accepted": [_common(event) | msgspec.structs.asdict(p) | {"producer": event.envelope.producer}]}


def _rejected(event: Event, p: ModuleRejected) -> Rows:
    return {"modules_rejected": [_common(event) | msgspec.structs.asdict(p) | {"producer": event.envelope.producer}]}


def _scored(event: Event, p: GroupScored) -> Rows:
    rewards = [s.reward for s in p.samples]
    group = _common(event) | {
        "module_id": p.module_id, "policy_version": p.policy_version, "pass_rate": p.pass_rate,
        "gate_open": p.gate_open, "partial": p.partial, "rule": p.rule, "turn": p.turn,
        "informative": p.informative, "n_samples": len(p.samples),
        "mean_reward": sum(rewards) / len(rewards) if rewards else None,
    }
    members = [
        msgspec.structs.asdict(s) | {"event_id": event.envelope.event_id, "module_id": p.module_id}
        for s in p.samples
    ]
    return {"groups_scored": [group], "group_samples": members}


def _policy(event: Event, p: PolicyUpdated) -> Rows:
    row = _common(event) | msgspec.structs.asdict(p) | {"metrics": _json.encode(p.metrics).decode()}
    return {"policies": [row]}


_TYPED: dict[type, Callable[[Event, object], Rows]] = {
    SampleEvaluated: _evaluated, SampleGenerated: _generated, ModuleProposed: _proposed,
    ModuleAccepted: _accepted, ModuleRejected: _rejected, GroupScored: _scored, PolicyUpdated: _policy,
}


def rows_for(event: Event, record: Record) -> Rows:
    """The event's `events` row plus its typed table's rows (types without a typed table get only the former)."""
    rows: Rows = {"events": [_event_row(event, record)]}
    typed = _TYPED.get(type(event.payload))
    if typed is not None:
        rows.update(typed(event, event.payload))
    return rows
