#!/usr/bin/env bash
# Runs a real single-node Apache Kafka (KRaft, combined broker+controller) on
# loopback for the integration tests, fetched from Maven Central with the
# pom.xml beside this script. No Docker, no tarball.
#
#   kafka.sh fetch                      put Kafka and its deps in the cache
#   kafka.sh start [--port P] [--keep-data]
#                                       format, start, wait until ready, print
#                                       "kafka ready bootstrap=127.0.0.1:P"
#   kafka.sh stop [--port P]            stop the node started by start
#   kafka.sh status [--port P]          say whether it runs
#   kafka.sh version                    print the fetched Kafka version (build
#                                       the Java clients with the same one)
#
# Environment:
#   KSHARE_KAFKA_VERSION    Kafka version; unset: 4.4.0, falling back to 4.3.1
#   KSHARE_KAFKA_CACHE      cache folder (default $HOME/.cache/kshare)
#   KSHARE_KAFKA_START_TIMEOUT  seconds to wait for start-up (default 120)
#   KSHARE_KAFKA_HEAP       JVM heap options (default "-Xms256m -Xmx1g")
#
# Every failure prints "kafka.sh: <step> failed: <why>" on stderr and exits
# non-zero, so CI logs say whether fetching or starting broke.
set -euo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_dir="${KSHARE_KAFKA_CACHE:-$HOME/.cache/kshare}"
start_timeout="${KSHARE_KAFKA_START_TIMEOUT:-120}"
heap_opts="${KSHARE_KAFKA_HEAP:--Xms256m -Xmx1g}"
default_port=39092
ready_line="Kafka Server started"

if [[ -n "${KSHARE_KAFKA_VERSION:-}" ]]; then
	candidate_versions=("$KSHARE_KAFKA_VERSION")
else
	candidate_versions=(4.4.0 4.3.1)
fi

die() {
	local step="$1"
	shift
	echo "kafka.sh: $step failed: $*" >&2
	exit 1
}

lib_dir_for() { echo "$cache_dir/kafka-$1/lib"; }

# A lib dir counts only once copy-dependencies finished: the marker file is
# written last, so an interrupted fetch is redone instead of half-used.
fetched_version() {
	local v
	for v in "${candidate_versions[@]}"; do
		if [[ -f "$cache_dir/kafka-$v/fetched" ]]; then
			echo "$v"
			return 0
		fi
	done
	return 1
}

fetch_version() {
	local v="$1"
	local dir="$cache_dir/kafka-$v"
	local log="$cache_dir/fetch-$v.log"
	mkdir -p "$cache_dir"
	rm -rf "$dir"
	echo "kafka.sh: fetching org.apache.kafka:kafka_2.13:$v into $dir/lib" >&2
	# -U: retry artifacts that an earlier failed attempt left marked missing.
	if ! mvn -q -B -U -f "$script_dir/pom.xml" \
		-Dkafka.version="$v" \
		-DincludeScope=runtime \
		-DoutputDirectory="$dir/lib" \
		dependency:copy-dependencies >"$log" 2>&1; then
		echo "kafka.sh: mvn could not fetch Kafka $v; last lines of $log:" >&2
		tail -n 15 "$log" >&2
		rm -rf "$dir"
		return 1
	fi
	if ! ls "$dir/lib/kafka_2.13-$v.jar" >/dev/null 2>&1; then
		echo "kafka.sh: mvn ran but $dir/lib has no kafka_2.13-$v.jar" >&2
		rm -rf "$dir"
		return 1
	fi
	touch "$dir/fetched"
}

cmd_fetch() {
	command -v java >/dev/null || die fetch "java is not on PATH"
	command -v mvn >/dev/null || die fetch "mvn is not on PATH"
	local v
	if v="$(fetched_version)"; then
		echo "kafka.sh: Kafka $v already in $(lib_dir_for "$v")" >&2
		echo "$v"
		return 0
	fi
	for v in "${candidate_versions[@]}"; do
		if fetch_version "$v"; then
			echo "$v"
			return 0
		fi
	done
	die fetch "no Kafka version of (${candidate_versions[*]}) could be fetched from Maven Central"
}

run_dir_for() { echo "$cache_dir/run-$1"; }

# A pid from an old pid file may since belong to another program; only a
# live kafka.Kafka process counts.
pid_alive() {
	[[ -n "$1" ]] && kill -0 "$1" 2>/dev/null &&
		tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -q 'kafka\.Kafka'
}

read_pid() {
	local pid_file="$1/kafka.pid"
	[[ -f "$pid_file" ]] && cat "$pid_file" || true
}

write_server_properties() {
	local run="$1" port="$2" controller_port="$3"
	cat >"$run/server.properties" <<EOF
process.roles=broker,controller
node.id=1
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$controller_port
advertised.listeners=PLAINTEXT://127.0.0.1:$port
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
controller.quorum.bootstrap.servers=127.0.0.1:$controller_port
log.dirs=$run/data

num.partitions=1
default.replication.factor=1
num.network.threads=2
num.io.threads=4
background.threads=4

# One node: every internal topic has one replica. Few partitions make the
# coordinators load faster at start-up.
offsets.topic.replication.factor=1
offsets.topic.num.partitions=5
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=5
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
share.coordinator.state.topic.num.partitions=5

group.initial.rebalance.delay.ms=0
# Share groups need only the share.version feature, finalized by default since
# 4.2. These lower the floors of the per-group share configs so that tests may
# set short record locks and sessions with IncrementalAlterConfigs.
group.share.min.record.lock.duration.ms=1000
group.share.min.session.timeout.ms=6000
group.share.min.heartbeat.interval.ms=1000
EOF
}

write_log4j2_config() {
	local run="$1"
	cat >"$run/log4j2.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="warn">
  <Appenders>
    <File name="server" fileName="$run/logs/server.log" append="true">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </File>
  </Appenders>
  <Loggers>
    <Logger name="kafka.request.logger" level="warn"/>
    <Logger name="org.apache.kafka.controller" level="info"/>
    <Root level="info">
      <AppenderRef ref="server"/>
    </Root>
  </Loggers>
</Configuration>
EOF
}

# The config dump at start-up fills the log tail, so errors are picked out.
show_start_errors() {
	local run="$1"
	echo "--- errors in $run/logs/server.log:" >&2
	grep -m 10 -E '^\[[^]]*\] (ERROR|FATAL) ' "$run/logs/server.log" >&2 || echo "(none logged)" >&2
	echo "--- last lines of $run/logs/stdout.log:" >&2
	tail -n 20 "$run/logs/stdout.log" >&2 || true
}

cmd_start() {
	local port="$default_port" keep_data=0
	while [[ $# -gt 0 ]]; do
		case "$1" in
		--port)
			[[ $# -ge 2 ]] || die start "--port needs a value"
			port="$2"
			shift 2
			;;
		--keep-data)
			keep_data=1
			shift
			;;
		*) die start "unknown argument $1 (usage: kafka.sh start [--port P] [--keep-data])" ;;
		esac
	done
	[[ "$port" =~ ^[0-9]+$ ]] && ((port > 0 && port < 65535)) || die start "bad port $port"
	local controller_port=$((port + 1))
	local bootstrap="127.0.0.1:$port"

	local run
	run="$(run_dir_for "$port")"
	local pid
	pid="$(read_pid "$run")"
	if pid_alive "$pid"; then
		echo "kafka.sh: Kafka already running (pid $pid)" >&2
		echo "kafka ready bootstrap=$bootstrap"
		return 0
	fi

	local version
	version="$(fetched_version)" || version="$(cmd_fetch)" || exit 1
	local lib
	lib="$(lib_dir_for "$version")"

	local p
	for p in "$port" "$controller_port"; do
		if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			die start "port $p on 127.0.0.1 is already in use (the broker needs $port and the controller $controller_port)"
		fi
	done

	if ((keep_data == 0)); then
		rm -rf "$run"
	fi
	mkdir -p "$run/logs" "$run/data"
	write_server_properties "$run" "$port" "$controller_port"
	write_log4j2_config "$run"

	local jvm=(java $heap_opts -XX:+UseG1GC -Djava.awt.headless=true
		"-Dlog4j2.configurationFile=$run/log4j2.xml" "-Dkafka.logs.dir=$run/logs"
		-cp "$lib/*")

	if [[ ! -f "$run/data/meta.properties" ]]; then
		local cluster_id
		cluster_id="$("${jvm[@]}" kafka.tools.StorageTool random-uuid 2>>"$run/logs/format.log" | tail -n 1)" ||
			die start "kafka-storage random-uuid did not run (see $run/logs/format.log)"
		if ! "${jvm[@]}" kafka.tools.StorageTool format --standalone \
			--config "$run/server.properties" --cluster-id "$cluster_id" \
			>>"$run/logs/format.log" 2>&1; then
			tail -n 20 "$run/logs/format.log" >&2
			die start "formatting the storage in $run/data failed (see $run/logs/format.log)"
		fi
	fi

	: >"$run/logs/server.log"
	nohup "${jvm[@]}" kafka.Kafka "$run/server.properties" \
		>"$run/logs/stdout.log" 2>&1 </dev/null &
	pid=$!
	echo "$pid" >"$run/kafka.pid"

	local waited=0
	until grep -q "$ready_line" "$run/logs/server.log" 2>/dev/null; do
		if ! pid_alive "$pid"; then
			rm -f "$run/kafka.pid"
			show_start_errors "$run"
			die start "Kafka $version exited during start-up (logs in $run/logs)"
		fi
		if ((waited >= start_timeout)); then
			kill "$pid" 2>/dev/null || true
			rm -f "$run/kafka.pid"
			show_start_errors "$run"
			die start "Kafka $version did not log \"$ready_line\" within ${start_timeout}s (logs in $run/logs)"
		fi
		sleep 1
		waited=$((waited + 1))
	done
	echo "kafka.sh: Kafka $version pid $pid, logs in $run/logs" >&2
	echo "kafka ready bootstrap=$bootstrap"
}

parse_port_only() {
	local step="$1"
	shift
	local port="$default_port"
	while [[ $# -gt 0 ]]; do
		case "$1" in
		--port)
			[[ $# -ge 2 ]] || die "$step" "--port needs a value"
			port="$2"
			shift 2
			;;
		*) die "$step" "unknown argument $1" ;;
		esac
	done
	echo "$port"
}

cmd_stop() {
	local port
	port="$(parse_port_only stop "$@")"
	local run
	run="$(run_dir_for "$port")"
	local pid
	pid="$(read_pid "$run")"
	if ! pid_alive "$pid"; then
		rm -f "$run/kafka.pid"
		echo "kafka.sh: Kafka on port $port is not running" >&2
		return 0
	fi
	kill "$pid"
	local waited=0
	while pid_alive "$pid"; do
		if ((waited >= 60)); then
			echo "kafka.sh: Kafka pid $pid ignored SIGTERM for 60s; killing it" >&2
			kill -9 "$pid" 2>/dev/null || true
			sleep 1
			break
		fi
		sleep 1
		waited=$((waited + 1))
	done
	pid_alive "$pid" && die stop "Kafka pid $pid is still alive after SIGKILL"
	rm -f "$run/kafka.pid"
	echo "kafka.sh: Kafka on port $port stopped" >&2
}

cmd_status() {
	local port
	port="$(parse_port_only status "$@")"
	local pid
	pid="$(read_pid "$(run_dir_for "$port")")"
	if pid_alive "$pid"; then
		echo "kafka running pid=$pid bootstrap=127.0.0.1:$port"
	else
		echo "kafka not running on port $port"
		return 1
	fi
}

case "${1:-}" in
fetch)
	shift
	[[ $# -eq 0 ]] || die fetch "fetch takes no arguments"
	cmd_fetch >/dev/null
	echo "kafka.sh: fetched Kafka $(fetched_version) into $(lib_dir_for "$(fetched_version)")"
	;;
start)
	shift
	cmd_start "$@"
	;;
stop)
	shift
	cmd_stop "$@"
	;;
status)
	shift
	cmd_status "$@"
	;;
version)
	fetched_version || die version "no Kafka of (${candidate_versions[*]}) fetched yet; run kafka.sh fetch"
	;;
*)
	echo "usage: kafka.sh fetch | start [--port P] [--keep-data] | stop [--port P] | status [--port P] | version" >&2
	exit 2
	;;
esac
