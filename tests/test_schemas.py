"""Envelope round trips, schema versions, and decode failures."""

import msgspec
import pytest

from kernelzero.schemas import (
    PAYLOAD_TYPES, SCHEMA_VERSIONS, DecodeError, ModuleProposed, SampleEvaluated, UnknownEventType, decode,
    decode_envelope, encode, make_event, to_builtins, uuid7,
)


def test_round_trip_keeps_envelope_and_payload():
    payload = SampleEvaluated(sample_id="s1", module_id="m1", backend="triton", verdict="correct", reason="ok", speedup=1.5)
    event = make_event(payload, correlation_id="m1", producer="evaluator", causation_id="e0", policy_version=3)
    back = decode(encode(event))
    assert back.payload == payload
    assert back.envelope.policy_version == 3 and back.envelope.causation_id == "e0"
    assert back.envelope.type == "samples.evaluated" and back.envelope.schema_version == 1


def test_every_payload_type_has_a_version_and_distinct_tag():
    tags = [t.__struct_config__.tag for t in PAYLOAD_TYPES]
    assert len(set(tags)) == len(tags) == len(SCHEMA_VERSIONS)


def test_uuid7_is_version_7_and_time_ordered():
    ids = [uuid7() for _ in range(200)]
    assert all(i[14] == "7" for i in ids)
    assert [i[:13] for i in ids] == sorted(i[:13] for i in ids)
    assert len(set(ids)) == 200


def test_envelope_decodes_without_knowing_the_payload_type():
    event = make_event(ModuleProposed(module_id="m", source="x", apis=["torch.relu"]), correlation_id="m", producer="p")
    event.envelope.type = "modules.from_the_future"
    data = encode(event)
    assert decode_envelope(data).type == "modules.from_the_future"
    with pytest.raises(UnknownEventType):
        decode(data)


def test_newer_schema_version_is_unknown_not_misread():
    event = make_event(ModuleProposed(module_id="m", source="x", apis=[]), correlation_id="m", producer="p")
    event.envelope.schema_version = SCHEMA_VERSIONS["modules.proposed"] + 1
    with pytest.raises(UnknownEventType, match="newer"):
        decode(encode(event))


def test_garbage_and_wrong_payload_shapes_are_decode_errors():
    with pytest.raises(DecodeError):
        decode(b"\x00\x01garbage")
    event = make_event(ModuleProposed(module_id="m", source="x", apis=[]), correlation_id="m", producer="p")
    event.envelope.payload = msgspec.Raw(msgspec.msgpack.encode({"module_id": 5}))
    with pytest.raises(DecodeError, match="modules.proposed"):
        decode(encode(event))


def test_an_older_version_is_a_clear_error_not_a_misread(monkeypatch):
    monkeypatch.setitem(SCHEMA_VERSIONS, "modules.proposed", 2)  # as if the type had moved on without an upcaster
    old = make_event(ModuleProposed(module_id="m", source="src", apis=[]), correlation_id="m", producer="p")
    old.envelope.schema_version = 1
    with pytest.raises(DecodeError, match="older than this build's 2"):
        decode(encode(old))


def test_new_fields_default_when_old_events_lack_them():
    raw = msgspec.msgpack.encode({"sample_id": "s", "module_id": "m", "backend": "cuda", "verdict": "timeout", "reason": "t"})
    event = make_event(SampleEvaluated(sample_id="s", module_id="m", backend="cuda", verdict="timeout", reason="t"),
                       correlation_id="m", producer="p")
    event.envelope.payload = msgspec.Raw(raw)
    assert decode(encode(event)).payload.speedup is None


def test_to_builtins_is_json_ready():
    event = make_event(ModuleProposed(module_id="m", source="s", apis=["a"]), correlation_id="m", producer="p")
    data = to_builtins(event)
    assert msgspec.json.decode(msgspec.json.encode(data))["payload"]["apis"] == ["a"]


def test_uncharged_verdicts_round_trip_and_old_evaluations_still_decode():
    from kernelzero.schemas import UNCHARGED_VERDICTS, VERDICTS
    assert set(UNCHARGED_VERDICTS) == {"evaluator_error", "problem_error"} and set(UNCHARGED_VERDICTS) < set(VERDICTS)
    for verdict, reason in (("evaluator_error", "exception"), ("problem_error", "constant_output")):
        payload = SampleEvaluated(sample_id="s", module_id="m", backend="triton", verdict=verdict, reason=reason,
                                  evidence={"detail": "why"})
        assert decode(encode(make_event(payload, correlation_id="m", producer="evaluator"))).payload == payload
    old = make_event(SampleEvaluated(sample_id="s", module_id="m", backend="cuda", verdict="correct", reason="ok"),
                     correlation_id="m", producer="evaluator")
    old.envelope.payload = msgspec.Raw(msgspec.msgpack.encode(
        {"sample_id": "s", "module_id": "m", "backend": "cuda", "verdict": "correct", "reason": "ok", "speedup": 2.0}))
    back = decode(encode(old)).payload  # written before ref_compile_ms and speedup_compile existed
    assert back.speedup == 2.0 and back.ref_compile_ms is None and back.speedup_compile is None
