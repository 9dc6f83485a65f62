"""Asks a Kafka broker for cluster metadata (Metadata v4) with the standard library; exit 0 only if it answers.

Used by scripts/kafka.sh to tell "ready" from "port open": it checks that one broker is listed, not that
any topic or consumer group works. Not a Kafka client.
"""

from __future__ import annotations

import socket
import struct
import sys

METADATA_API_KEY = 3
METADATA_VERSION = 4  # Kafka 4 removed v0-v3 (KIP-896); v4 is the oldest it still answers, non-flexible
CORRELATION_ID = 0x4B5A


def metadata_request() -> bytes:
    client_id = b"kernelzero-probe"
    header = struct.pack(">hhih", METADATA_API_KEY, METADATA_VERSION, CORRELATION_ID, len(client_id)) + client_id
    body = struct.pack(">i?", -1, False)  # topics=null (all), allow_auto_topic_creation=false
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def read_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("broker closed the connection mid-response")
        data += chunk
    return data


def broker_count(host: str, port: int, timeout_s: float) -> int:
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.sendall(metadata_request())
        (size,) = struct.unpack(">i", read_exact(sock, 4))
        response = read_exact(sock, size)
    correlation_id, _throttle_ms, brokers = struct.unpack_from(">iii", response, 0)
    if correlation_id != CORRELATION_ID:
        raise ValueError(f"unexpected correlation id {correlation_id}: not a Kafka broker?")
    return brokers


def main(argv: list[str]) -> int:
    host, port = argv[1], int(argv[2])
    try:
        brokers = broker_count(host, port, timeout_s=5.0)
    except (OSError, ValueError, struct.error) as exc:
        print(f"no Kafka metadata from {host}:{port}: {exc}", file=sys.stderr)
        return 1
    if brokers < 1:
        print(f"{host}:{port} answered metadata but lists no broker yet", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
