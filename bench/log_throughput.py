"""Event-log benchmark: produce and consume throughput and end-to-end latency of 1 KiB events, embedded vs Kafka.

Measures one producer and one consumer in one process on this machine; it says nothing about many
machines, replication, or durability settings other than the backends' defaults (Kafka acks=all,
idempotent; SQLite WAL). Starts the local broker with scripts/kafka.sh when none answers.

    .venv/bin/python bench/log_throughput.py [--events 50000] [--broker 127.0.0.1:9092] [--out /tmp/log.md]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import platform
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import msgspec

from kernelzero.log import EventLog, Message, TopicSpec, next_offsets
from kernelzero.log.embedded import EmbeddedLog
from kernelzero.log.kafka import KafkaLog

REPO = Path(__file__).resolve().parents[1]
PARTITIONS = 4
BATCH = 500


class Result(msgspec.Struct):
    backend: str
    events: int
    produce_per_s: float
    consume_per_s: float
    latency_p50_ms: float
    latency_p99_ms: float
    latency_rate_per_s: int


def event(topic: str, i: int, size: int) -> Message:
    """A keyed event whose first 8 bytes are its creation time (ns), padded to `size` bytes."""
    body = struct.pack(">q", time.time_ns()) + os.urandom(size - 8)
    return Message(topic, f"module-{i % 64}".encode(), body)


async def produce_rate(log: EventLog, topic: str, events: int, size: int) -> float:
    messages = [event(topic, i, size) for i in range(events)]
    async with await log.producer("bench") as producer:
        started = time.perf_counter()
        for i in range(0, events, BATCH):
            await producer.send(messages[i:i + BATCH])
        return events / (time.perf_counter() - started)


async def consume_rate(log: EventLog, topic: str, events: int) -> float:
    async with await log.consumer(f"bench-{uuid.uuid4().hex[:8]}", [topic], session_timeout_s=10.0) as consumer:
        started = time.perf_counter()
        seen = 0
        while seen < events:
            records = await consumer.poll(BATCH, 1.0)
            seen += len(records)
            if records:
                await consumer.commit(next_offsets(records))
        return events / (time.perf_counter() - started)


async def latencies(log: EventLog, topic: str, rate: int, seconds: float, size: int) -> list[float]:
    """Send `rate` events/s in batches of 10 while a consumer reads them; milliseconds from send to receipt."""
    total = int(rate * seconds)
    received: list[float] = []
    async with await log.consumer(f"lat-{uuid.uuid4().hex[:8]}", [topic], session_timeout_s=10.0) as consumer:
        async def produce() -> None:
            async with await log.producer("bench-latency") as producer:
                started = time.perf_counter()
                for i in range(0, total, 10):
                    await asyncio.sleep(max(0.0, started + i / rate - time.perf_counter()))
                    await producer.send([event(topic, i + j, size) for j in range(10)])

        sender = asyncio.create_task(produce())
        deadline = time.monotonic() + seconds + 30
        while len(received) < total and time.monotonic() < deadline:
            for r in await consumer.poll(BATCH, 0.5):
                received.append((time.time_ns() - struct.unpack(">q", r.value[:8])[0]) / 1e6)
        await sender
    return sorted(received)


def percentile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


async def measure(name: str, log: EventLog, events: int, size: int, rate: int, seconds: float) -> Result:
    bulk, live = f"bench.bulk.{uuid.uuid4().hex[:8]}", f"bench.live.{uuid.uuid4().hex[:8]}"
    await log.ensure_topics([TopicSpec(bulk, PARTITIONS), TopicSpec(live, PARTITIONS)])
    produced = await produce_rate(log, bulk, events, size)
    consumed = await consume_rate(log, bulk, events)
    lat = await latencies(log, live, rate, seconds, size)
    return Result(name, events, produced, consumed, percentile(lat, 0.5), percentile(lat, 0.99), rate)


def ensure_broker(bootstrap: str) -> None:
    host, port = bootstrap.rsplit(":", 1)
    probe = subprocess.run([sys.executable, str(REPO / "scripts/kafka/probe.py"), host, port], capture_output=True)
    if probe.returncode != 0:
        subprocess.run(["bash", str(REPO / "scripts/kafka.sh"), "start", "--port", port], check=True)


def table(results: list[Result]) -> str:
    lines = [
        "| backend | events | produce (events/s) | consume (events/s) | e2e p50 (ms) | e2e p99 (ms) | at (events/s) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r.backend} | {r.events} | {r.produce_per_s:,.0f} | {r.consume_per_s:,.0f} | "
        f"{r.latency_p50_ms:.1f} | {r.latency_p99_ms:.1f} | {r.latency_rate_per_s} |"
        for r in results
    ]
    return "\n".join(lines)


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    load = os.getloadavg()[0]  # the machine is shared: other work skews the numbers
    return f"{os.cpu_count()}-core CPU ({cpu}), Python {platform.python_version()}, load average {load:.1f} at the end"


async def run(args: argparse.Namespace) -> list[Result]:
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        async with EmbeddedLog(Path(tmp) / "bench.sqlite") as log:
            results.append(await measure("embedded (SQLite WAL)", log, args.events, args.size, args.rate, args.seconds))
    ensure_broker(args.broker)
    async with KafkaLog(args.broker) as log:
        results.append(await measure("kafka (local broker, acks=all)", log, args.events, args.size, args.rate, args.seconds))
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=50_000, help="events for the throughput runs")
    parser.add_argument("--size", type=int, default=1024, help="event size in bytes")
    parser.add_argument("--rate", type=int, default=2000, help="offered load (events/s) while measuring latency")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of the latency run")
    parser.add_argument("--broker", default="127.0.0.1:9092", help="Kafka bootstrap host:port")
    parser.add_argument("--out", type=Path, required=True, help="markdown report to write (copy the table into docs/BENCHMARKS.md)")
    args = parser.parse_args()
    if args.size < 8:
        parser.error("--size must be at least 8 bytes (the send timestamp)")
    results = asyncio.run(run(args))
    report = (
        "# Event-log throughput and latency\n\n"
        f"- date: {datetime.date.today().isoformat()}\n- machine: {machine()}\n"
        f"- command: `{' '.join(['.venv/bin/python bench/log_throughput.py', *sys.argv[1:]])}`\n"
        f"- {args.size}-byte events, {PARTITIONS} partitions, batches of {BATCH}; one producer and one consumer "
        "in one process; consume commits after every poll; latency is send-to-receipt at the offered load.\n\n"
        + table(results) + "\n"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report)
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
