"""The versioned event envelope and its msgpack encoding; does not validate payload semantics, nor upcast old versions.

A consumer decodes the envelope first with the payload left as raw bytes, so an event type it
does not know, or a newer schema version of one, is skipped (`UnknownEventType`) instead of
crashing it. Every type is at version 1 (schemas/events.py), so there is nothing to upcast: a
payload of an older version than this build's is a DecodeError. The type that first moves to
version 2 brings the step that upcasts version 1, with its test.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

import msgspec

from kernelzero.schemas.events import PAYLOAD_TYPES, SCHEMA_VERSIONS, Payload


class Envelope(msgspec.Struct, kw_only=True, omit_defaults=True):
    event_id: str
    type: str
    schema_version: int
    produced_at: float  # seconds since the epoch, UTC
    correlation_id: str  # the module the event is about; also the partition key
    producer: str
    payload: msgspec.Raw
    causation_id: str = ""  # the event this one answers
    policy_version: int | None = None


class Event(msgspec.Struct, kw_only=True):
    """An envelope with its payload decoded to the current schema version."""

    envelope: Envelope
    payload: Any

    @property
    def type(self) -> str:
        return self.envelope.type

    @property
    def event_id(self) -> str:
        return self.envelope.event_id


class DecodeError(ValueError):
    """The bytes are not a KernelZero event (corrupt, truncated, or a payload that does not fit its type)."""


class UnknownEventType(DecodeError):
    """A well-formed envelope of a type (or a newer schema version) this build does not know."""


_TYPES: dict[str, type[Payload]] = {t.__struct_config__.tag: t for t in PAYLOAD_TYPES}
_ENCODER = msgspec.msgpack.Encoder()
_ENVELOPE_DECODER = msgspec.msgpack.Decoder(Envelope)
_PAYLOAD_DECODERS = {name: msgspec.msgpack.Decoder(t) for name, t in _TYPES.items()}


def uuid7() -> str:
    """A time-ordered UUID (RFC 9562 version 7): sorts by creation time, unique across processes."""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= (rand >> 62 & 0xFFF) << 64
    value |= 0b10 << 62
    value |= rand & ((1 << 62) - 1)
    return str(uuid.UUID(int=value))


def make_event(
    payload: Payload,
    *,
    correlation_id: str,
    producer: str,
    causation_id: str = "",
    policy_version: int | None = None,
    event_id: str | None = None,
) -> Event:
    """Wrap a payload in a fresh envelope at its type's current schema version."""
    event_type = type(payload).__struct_config__.tag
    envelope = Envelope(
        event_id=event_id or uuid7(),
        type=event_type,
        schema_version=SCHEMA_VERSIONS[event_type],
        produced_at=time.time(),
        correlation_id=correlation_id,
        producer=producer,
        causation_id=causation_id,
        policy_version=policy_version,
        payload=msgspec.Raw(_ENCODER.encode(payload)),
    )
    return Event(envelope=envelope, payload=payload)


def encode(event: Event) -> bytes:
    return _ENCODER.encode(event.envelope)


def decode_envelope(data: bytes) -> Envelope:
    try:
        return _ENVELOPE_DECODER.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise DecodeError(f"not an event envelope: {exc}") from exc


def decode(data: bytes) -> Event:
    """Decode envelope and payload; raises UnknownEventType (a type or version this build does not know) or DecodeError."""
    envelope = decode_envelope(data)
    event_type, version = envelope.type, envelope.schema_version
    current = SCHEMA_VERSIONS.get(event_type)
    if current is None:
        raise UnknownEventType(f"unknown event type {event_type!r}")
    if version > current:
        raise UnknownEventType(f"{event_type} schema version {version} is newer than this build's {current}")
    if version < current:
        raise DecodeError(f"{event_type} schema version {version} is older than this build's {current}: nothing upcasts it")
    try:
        payload = _PAYLOAD_DECODERS[event_type].decode(envelope.payload)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise DecodeError(f"{event_type} payload does not decode: {exc}") from exc
    return Event(envelope=envelope, payload=payload)


def to_builtins(event: Event) -> dict:
    """The event as plain JSON-ready data (for `log tail`, analytics and datasets)."""
    envelope = msgspec.structs.asdict(event.envelope)
    envelope["payload"] = msgspec.to_builtins(event.payload)  # bytes become base64 text
    return envelope
