"""The event contract: payload types, the envelope and its codec. Imports nothing else of the project.

The messages between processes are schemas/messages.py's (not imported here: it imports the configuration).
"""

from kernelzero.schemas.envelope import (
    DecodeError, Envelope, Event, UnknownEventType, decode, decode_envelope, encode, make_event,
    to_builtins, uuid7,
)
from kernelzero.schemas.events import *  # noqa: F403
from kernelzero.schemas.events import PAYLOAD_TYPES, SCHEMA_VERSIONS, VERDICTS

TOPICS: tuple[str, ...] = tuple(SCHEMA_VERSIONS)
