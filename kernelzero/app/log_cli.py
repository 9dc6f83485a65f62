"""`kernelzero log tail|stats`: read the event log as JSON lines, counts per topic and type, group lag."""

from __future__ import annotations

import collections
import sys
import uuid

import anyio
import msgspec


def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    tail = sub.add_parser("tail", help="print a topic's last events as JSON lines")
    tail.add_argument("topic")
    tail.add_argument("-n", type=int, default=10, help="how many of the last events (default 10)")
    tail.add_argument("--follow", "-f", action="store_true", help="keep printing new events")
    sub.add_parser("stats", help="events per topic and type, consumer-group lag")


def main(args, config) -> int:
    from kernelzero.log import LogError

    try:
        return anyio.run(_tail if args.action == "tail" else _stats, args, config)
    except LogError as exc:
        print(f"kernelzero log: {exc}", file=sys.stderr)
        return 2


async def _follow(log, topic: str):
    """Records of a topic as they come, read by a throwaway group that never commits."""
    async with await log.consumer(f"kernelzero-log-{uuid.uuid4().hex[:8]}", [topic]) as consumer:
        while True:
            for record in sorted(await consumer.poll(1000, 1.0), key=lambda r: (r.timestamp_ms, r.partition, r.offset)):
                yield record


async def _scan(log, topic: str, ends: dict[int, int] | None = None):
    """Every record of a topic up to its end (`ends` where given), oldest first."""
    from kernelzero.log import read_to_end

    records = [r async for r in read_to_end(log, topic, reader="kernelzero-log", ends=ends)]
    for record in sorted(records, key=lambda r: (r.timestamp_ms, r.partition, r.offset)):
        yield record


def _as_json(record) -> bytes:
    from kernelzero.schemas import DecodeError, decode, to_builtins

    try:
        data = to_builtins(decode(record.value))
    except DecodeError as exc:
        data = {"undecodable": str(exc), "bytes": len(record.value)}
    data["_at"] = f"{record.topic}/{record.partition}@{record.offset}"
    return msgspec.json.encode(data)


async def _tail(args, config) -> int:
    from kernelzero.log import open_log

    async with await open_log(config.log.url, create=False) as log:
        if args.topic not in await log.topics():
            print(f"kernelzero log: no topic {args.topic!r} in {log.url}", file=sys.stderr)
            return 2
        ends = await log.end_offsets(args.topic)
        last = collections.deque(maxlen=args.n)
        async for record in _scan(log, args.topic, ends):  # the ends --follow starts from: nothing twice
            last.append(record)
        for record in last:
            sys.stdout.buffer.write(_as_json(record) + b"\n")
        sys.stdout.flush()
        if args.follow:  # what came after the ends read above, whatever was printed of before
            async for record in _follow(log, args.topic):
                if record.offset >= ends.get(record.partition, 0):
                    sys.stdout.buffer.write(_as_json(record) + b"\n")
                    sys.stdout.flush()
    return 0


async def _stats(args, config) -> int:
    from rich.console import Console
    from rich.table import Table

    from kernelzero.log import open_log
    from kernelzero.schemas import DecodeError, decode_envelope

    console = Console()
    async with await open_log(config.log.url, create=False) as log:
        topics = await log.topics()
        table = Table(title=f"events in {log.url}")
        for column in ("topic", "partitions", "events", "types"):
            table.add_column(column, justify="right" if column in ("partitions", "events") else "left")
        for topic, partitions in sorted(topics.items()):
            types: collections.Counter[str] = collections.Counter()
            async for record in _scan(log, topic):  # an empty topic is not read: read_to_end sees its ends are 0
                try:
                    types[decode_envelope(record.value).type] += 1
                except DecodeError:
                    types["(undecodable)"] += 1
            # counted, not end offsets: on Kafka every transaction's commit marker takes an offset too
            table.add_row(topic, str(partitions), str(types.total()),
                          ", ".join(f"{t}: {n}" for t, n in types.most_common()))
        console.print(table)
        lag = Table(title="consumer groups")
        for column in ("group", "topic", "committed", "lag"):
            lag.add_column(column, justify="left" if column in ("group", "topic") else "right")
        for group in await log.groups():
            for topic in sorted(topics):
                committed = await log.committed(group, topic)
                if any(committed.values()):
                    ends = await log.end_offsets(topic)
                    behind = sum(end - committed.get(p, 0) for p, end in ends.items())
                    lag.add_row(group, topic, str(sum(committed.values())), str(behind))
        console.print(lag if lag.row_count else "no consumer group has committed yet")
    return 0
