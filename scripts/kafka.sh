#!/usr/bin/env bash
# Starts, stops or reports a single-node Apache Kafka 4 broker (KRaft, combined mode) on 127.0.0.1 without Docker.
# Jars come from Maven Central (scripts/kafka/pom.xml); it is a development/test broker: one node, replication 1,
# no security, and it does not guarantee durability beyond the local disk.
#
#   scripts/kafka.sh start|stop|status [--port 9092] [--dir .kafka] [--fresh]
#
# --fresh (with start): delete the broker's topics and data first, unless it is already running.
#
# Environment: KAFKA_HEAP (default -Xmx512m -Xms256m), KAFKA_START_TIMEOUT_S (default 120),
# KAFKA_STOP_TIMEOUT_S (default 30).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
kafka_files="$repo_root/scripts/kafka"

usage() { echo "usage: scripts/kafka.sh start|stop|status [--port 9092] [--dir .kafka] [--fresh]" >&2; exit 2; }
die() { echo "kafka.sh: $*" >&2; exit 1; }

[[ $# -ge 1 ]] || usage
command="$1"; shift
port=9092
base_dir="$repo_root/.kafka"
fresh=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --port) port="${2:?--port needs a value}"; shift 2 ;;
    --dir) base_dir="$(mkdir -p "${2:?--dir needs a value}" && cd "$2" && pwd)"; shift 2 ;;
    --fresh) fresh=1; shift ;;
    *) usage ;;
  esac
done
[[ "$port" =~ ^[0-9]+$ ]] && (( port > 0 && port < 65535 )) || die "--port must be a TCP port number, got '$port'"

controller_port=$((port + 1))
libs="$base_dir/libs"
state="$base_dir/broker-$port"
pid_file="$state/kafka.pid"
log_file="$state/kafka.log"
address="127.0.0.1:$port"
start_timeout_s="${KAFKA_START_TIMEOUT_S:-120}"
stop_timeout_s="${KAFKA_STOP_TIMEOUT_S:-30}"

probe() { python3 "$kafka_files/probe.py" 127.0.0.1 "$port" 2>/dev/null; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# The pid in the pid file, if that process is alive and is our kafka.Kafka (pids get reused).
running_pid() {
  [[ -f "$pid_file" ]] || return 1
  local pid; pid="$(cat "$pid_file")"
  [[ "$pid" =~ ^[0-9]+$ ]] && [[ -r "/proc/$pid/cmdline" ]] || return 1
  tr '\0' ' ' < "/proc/$pid/cmdline" | grep -q "kafka.Kafka $state/server.properties" || return 1
  echo "$pid"
}

require_tools() {
  command -v java >/dev/null || die "java not found on PATH: Kafka 4 needs Java 17 or newer"
  local major
  major="$(java -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p')"
  [[ "${major%%.*}" -ge 17 ]] 2>/dev/null || die "Kafka 4 needs Java 17 or newer; java on PATH is version '$major'"
  command -v python3 >/dev/null || die "python3 not found on PATH (needed to probe the broker)"
}

# Copies the broker's jars into $libs once per version of the pom (the stamp holds the pom's hash).
resolve_jars() {
  local stamp; stamp="$(sha256sum "$kafka_files/pom.xml" | cut -d' ' -f1)"
  if [[ -f "$libs/.resolved" && "$(cat "$libs/.resolved")" == "$stamp" ]]; then return 0; fi
  command -v mvn >/dev/null || die "mvn not found on PATH: install Maven to fetch Kafka from Maven Central"
  echo "kafka.sh: resolving Kafka jars from Maven Central into $libs"
  rm -rf "$libs.tmp"
  mkdir -p "$base_dir"
  mvn -B -Dstyle.color=never -f "$kafka_files/pom.xml" dependency:copy-dependencies -DincludeScope=runtime \
    -DoutputDirectory="$libs.tmp" > "$base_dir/maven.log" 2>&1 \
    || { tail -n 40 "$base_dir/maven.log" >&2; die "Maven could not resolve the Kafka jars; full output: $base_dir/maven.log"; }
  echo "$stamp" > "$libs.tmp/.resolved"
  rm -rf "$libs"
  mv "$libs.tmp" "$libs"
}

write_config() {
  mkdir -p "$state/data"
  cat > "$state/server.properties" <<EOF
# Written by scripts/kafka.sh on every start; edits are overwritten.
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$controller_port
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$controller_port
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$state/data
auto.create.topics.enable=false
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=8
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
# Tests use short consumer sessions (seconds) to see dead members leave quickly.
group.min.session.timeout.ms=1000
num.network.threads=2
num.io.threads=4
EOF
}

format_storage() {
  [[ -f "$state/data/meta.properties" ]] && return 0
  # A cluster id is 16 random bytes in URL-safe base64 without padding. One in 64 of those
  # starts with "-", which the storage tool's argument parser reads as an option (a CI run
  # failed so), so draw again until it does not, as Kafka's own Uuid.randomUuid does.
  local cluster_id="-"
  while [[ "$cluster_id" == -* ]]; do
    cluster_id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')"
  done
  java -cp "$libs/*" -Dlog4j2.configurationFile="$kafka_files/log4j2.yaml" kafka.tools.StorageTool \
    format --standalone --cluster-id "$cluster_id" --config "$state/server.properties" > "$state/format.log" 2>&1 \
    || { cat "$state/format.log" >&2; die "formatting KRaft storage in $state/data failed"; }
}

wait_ready() {
  local pid="$1" deadline=$((SECONDS + start_timeout_s))
  until probe; do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -n 40 "$log_file" >&2 || true
      die "the broker exited during startup; its log is $log_file"
    fi
    (( SECONDS < deadline )) || { tail -n 40 "$log_file" >&2; die "broker on $address not ready after ${start_timeout_s}s; log: $log_file"; }
    sleep 0.5
  done
}

start() {
  require_tools
  mkdir -p "$state"
  exec 9>"$state/lock"
  flock 9  # concurrent starts (parallel test sessions) serialise here; the loser finds the winner's broker
  local pid
  if pid="$(running_pid)"; then
    wait_ready "$pid"
    echo "kafka.sh: broker already running on $address (pid $pid)"
    return 0
  fi
  if port_open "$port"; then
    probe && { echo "kafka.sh: a Kafka broker not started by this script already answers on $address; using it"; return 0; }
    die "port $port on 127.0.0.1 is taken by something that is not a Kafka broker"
  fi
  port_open "$controller_port" && die "controller port $controller_port on 127.0.0.1 is taken (it is --port + 1)"
  resolve_jars
  if (( fresh )); then rm -rf "$state/data"; fi
  write_config
  format_storage
  [[ -f "$log_file" ]] && mv "$log_file" "$log_file.1"
  # setsid: the broker outlives this shell and the caller's terminal or test session.
  setsid nohup java ${KAFKA_HEAP:--Xmx512m -Xms256m} -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$kafka_files/log4j2.yaml" -cp "$libs/*" \
    kafka.Kafka "$state/server.properties" > "$log_file" 2>&1 < /dev/null 9>&- &
  pid=$!
  echo "$pid" > "$pid_file"
  wait_ready "$pid"
  echo "kafka.sh: broker ready on $address (pid $pid, log $log_file)"
}

stop() {
  mkdir -p "$state"
  exec 9>"$state/lock"
  flock 9
  local pid
  if ! pid="$(running_pid)"; then
    rm -f "$pid_file"
    echo "kafka.sh: no broker started by this script is running on $address"
    return 0
  fi
  kill -TERM "$pid"
  local deadline=$((SECONDS + stop_timeout_s))
  while kill -0 "$pid" 2>/dev/null && (( SECONDS < deadline )); do sleep 0.2; done
  if kill -0 "$pid" 2>/dev/null; then
    echo "kafka.sh: broker (pid $pid) still running after ${stop_timeout_s}s; killing it" >&2
    kill -KILL "$pid"
    while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  fi
  rm -f "$pid_file"
  echo "kafka.sh: broker on $address stopped"
}

status() {
  local pid
  if pid="$(running_pid)"; then
    if probe; then echo "running on $address (pid $pid)"; return 0; fi
    echo "starting or unhealthy on $address (pid $pid): no metadata answer yet"; return 1
  fi
  echo "not running on $address"
  return 3
}

case "$command" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) usage ;;
esac
