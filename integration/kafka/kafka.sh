#!/usr/bin/env bash
# Runs a real Apache Kafka (KRaft) on loopback for the integration tests,
# fetched from Maven Central with the pom.xml beside this script. No Docker,
# no tarball. By default one node, combined broker+controller; with --nodes 2
# a second, broker-only node joins the first one's controller quorum, so that
# partitions (and with them the transaction and group coordinators) can move
# between brokers and a coordinator can be made unavailable.
#
#   kafka.sh fetch                      put Kafka and its deps in the cache
#   kafka.sh start [--nodes N] [--port P] [--keep-data]
#                                       format, start, wait until every node is
#                                       ready, print "kafka ready bootstrap=..."
#                                       (one host:port per node, node 1 first)
#   kafka.sh stop [--nodes N] [--port P]
#                                       stop every node started by start
#   kafka.sh stop-node 2 [--port P]     stop only the broker-only node 2 of a
#   kafka.sh start-node 2 [--port P]    two-node cluster, or start it again
#                                       with its data; prints the ready line
#   kafka.sh status [--nodes N] [--port P]
#                                       say whether it runs
#   kafka.sh version                    print the fetched Kafka version (build
#                                       the Java clients with the same one)
#
# Ports: node 1 serves clients on P and its controller on P+1; node 2 serves
# clients on P+2. P defaults to 19092 with one node and to 29192 with two,
# so that both set-ups can run at once; --nodes only picks that default (a
# cluster started with --port is addressed with the same --port). Each P has
# its own folder $KSHARE_KAFKA_CACHE/run-P (node 2 in its node2/ subfolder).
# Every internal topic has one replica, so moving a partition of
# __transaction_state to the other node moves its coordinator, and stopping
# node 2 makes the coordinators it hosts unavailable.
#
# Environment:
#   KSHARE_KAFKA_VERSION    Kafka version; unset: 4.4.0, falling back to 4.3.1
#   KSHARE_KAFKA_CACHE      cache folder (default $HOME/.cache/kshare)
#   KSHARE_KAFKA_START_TIMEOUT  seconds to wait for start-up (default 120)
#   KSHARE_KAFKA_HEAP       JVM heap options per node (default "-Xms256m -Xmx1g")
#
# Every failure prints "kafka.sh: <step> failed: <why>" on stderr and exits
# non-zero, so CI logs say whether fetching or starting broke.
set -euo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_dir="${KSHARE_KAFKA_CACHE:-$HOME/.cache/kshare}"
start_timeout="${KSHARE_KAFKA_START_TIMEOUT:-120}"
heap_opts="${KSHARE_KAFKA_HEAP:--Xms256m -Xmx1g}"
default_port=19092 # one node
# Two nodes use other ports, so that both set-ups can run at once. Every
# port sits below Linux's ephemeral range (32768-60999): a port inside it
# may be held, as its local port, by any outgoing connection of the machine
# (or one in TIME_WAIT), and Kafka then cannot bind it (seen with 39192 for
# node 1 while node 2 dialled its controller, and with 39092 in CI).
cluster_port=29192
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

# node_dir_for RUN N: node 1 lives in the run folder itself (as a single
# node always has), node 2 in its node2/ subfolder.
node_dir_for() {
	if [[ "$2" == 1 ]]; then echo "$1"; else echo "$1/node$2"; fi
}

# A pid from an old pid file may since belong to another program; only a
# live kafka.Kafka process counts.
pid_alive() {
	[[ -n "$1" ]] && kill -0 "$1" 2>/dev/null || return 1
	# Read the whole command line first: a pipe into grep -q could fail under
	# pipefail when grep stops early and the writer gets SIGPIPE.
	local cmdline
	cmdline="$(tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null)" || return 1
	[[ "$cmdline" == *kafka.Kafka* ]]
}

# started_alive PID reports whether a process launch_node started is still
# running: alive and not a zombie (its parent, this script, has not reaped
# it). Unlike pid_alive it does not look for kafka.Kafka on the command
# line: right after the launch the child may not have exec'd the JVM yet
# and still shows this shell's command line, which made a start that was
# going fine look like an exit (and left that Kafka running, orphaned).
started_alive() {
	[[ -n "$1" ]] && kill -0 "$1" 2>/dev/null || return 1
	local stat
	stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
	stat="${stat##*) }"
	[[ "${stat:0:1}" != Z ]]
}

read_pid() {
	local pid_file="$1/kafka.pid"
	[[ -f "$pid_file" ]] && cat "$pid_file" || true
}

node_alive() { pid_alive "$(read_pid "$1")"; }

# write_server_properties DIR NODE PORT CONTROLLER_PORT: node 1 is broker and
# controller, node 2 a broker of node 1's quorum.
write_server_properties() {
	local dir="$1" node="$2" port="$3" controller_port="$4"
	if [[ "$node" == 1 ]]; then
		cat >"$dir/server.properties" <<EOF
process.roles=broker,controller
node.id=1
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$controller_port
EOF
	else
		cat >"$dir/server.properties" <<EOF
process.roles=broker
node.id=$node
listeners=PLAINTEXT://127.0.0.1:$port
EOF
	fi
	cat >>"$dir/server.properties" <<EOF
advertised.listeners=PLAINTEXT://127.0.0.1:$port
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
controller.quorum.bootstrap.servers=127.0.0.1:$controller_port
log.dirs=$dir/data

num.partitions=1
default.replication.factor=1
num.network.threads=2
num.io.threads=4
background.threads=4

# Every internal topic has one replica, with two nodes too: moving that
# replica moves the coordinator. Few partitions make the coordinators load
# faster at start-up.
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
	local dir="$1"
	cat >"$dir/log4j2.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="warn">
  <Appenders>
    <File name="server" fileName="$dir/logs/server.log" append="true">
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
	local dir="$1"
	echo "--- errors in $dir/logs/server.log:" >&2
	grep -m 10 -E '^\[[^]]*\] (ERROR|FATAL) ' "$dir/logs/server.log" >&2 || echo "(none logged)" >&2
	echo "--- last lines of $dir/logs/stdout.log:" >&2
	tail -n 20 "$dir/logs/stdout.log" >&2 || true
}

# jvm_for DIR LIB sets the array jvm to the java command line of the node
# in DIR.
jvm_for() {
	# shellcheck disable=SC2206 # the heap options are several words
	jvm=(java $heap_opts -XX:+UseG1GC -Djava.awt.headless=true
		"-Dlog4j2.configurationFile=$1/log4j2.xml" "-Dkafka.logs.dir=$1/logs"
		-cp "$2/*")
}

# format_node DIR LIB CLUSTER_ID NODE formats the node's storage unless it
# already is (--keep-data). Node 1 founds a one-voter quorum; node 2, a
# broker, is formatted without controllers.
format_node() {
	local dir="$1" lib="$2" cluster_id="$3" node="$4"
	[[ -f "$dir/data/meta.properties" ]] && return 0
	local quorum=--standalone
	[[ "$node" == 1 ]] || quorum=--no-initial-controllers
	local jvm
	jvm_for "$dir" "$lib"
	if ! "${jvm[@]}" kafka.tools.StorageTool format "$quorum" \
		--config "$dir/server.properties" --cluster-id "$cluster_id" \
		>>"$dir/logs/format.log" 2>&1; then
		tail -n 20 "$dir/logs/format.log" >&2
		die start "formatting the storage in $dir/data failed (see $dir/logs/format.log)"
	fi
}

# cluster_id_of DIR prints the cluster id node 1 in DIR was formatted with,
# nothing when it was not formatted yet.
cluster_id_of() {
	[[ -f "$1/data/meta.properties" ]] || return 0
	sed -n '/^cluster\.id=/{s///p;q;}' "$1/data/meta.properties"
}

# launch_node DIR LIB starts the node in DIR in the background and records
# its pid.
launch_node() {
	local dir="$1" lib="$2"
	local jvm
	jvm_for "$dir" "$lib"
	: >"$dir/logs/server.log"
	nohup "${jvm[@]}" kafka.Kafka "$dir/server.properties" \
		>"$dir/logs/stdout.log" 2>&1 </dev/null &
	echo "$!" >"$dir/kafka.pid"
}

# wait_ready DIR VERSION LABEL waits until the node in DIR logs the ready
# line (a broker logs it once the controller has unfenced it). On failure
# it kills that node, says why and returns 1.
wait_ready() {
	local dir="$1" version="$2" label="$3"
	local pid
	pid="$(read_pid "$dir")"
	local waited=0
	until grep -q "$ready_line" "$dir/logs/server.log" 2>/dev/null; do
		if ! started_alive "$pid"; then
			rm -f "$dir/kafka.pid"
			show_start_errors "$dir"
			echo "kafka.sh: start failed: Kafka $version $label exited during start-up (logs in $dir/logs)" >&2
			return 1
		fi
		if ((waited >= start_timeout)); then
			kill "$pid" 2>/dev/null || true
			rm -f "$dir/kafka.pid"
			show_start_errors "$dir"
			echo "kafka.sh: start failed: Kafka $version $label did not log \"$ready_line\" within ${start_timeout}s (logs in $dir/logs)" >&2
			return 1
		fi
		sleep 1
		waited=$((waited + 1))
	done
	echo "kafka.sh: Kafka $version $label pid $pid, logs in $dir/logs" >&2
}

# check_port_free STEP PORT WHY
check_port_free() {
	if (exec 3<>"/dev/tcp/127.0.0.1/$2") 2>/dev/null; then
		die "$1" "port $2 on 127.0.0.1 is already in use ($3)"
	fi
}

bootstrap_for() {
	local port="$1" nodes="$2"
	if ((nodes == 1)); then
		echo "127.0.0.1:$port"
	else
		echo "127.0.0.1:$port,127.0.0.1:$((port + 2))"
	fi
}

# parse_args STEP ALLOW_KEEP_DATA ARGS... sets port, nodes and keep_data,
# which the caller declares local.
parse_args() {
	local step="$1" allow_keep="$2"
	shift 2
	port="" nodes=1 keep_data=0
	while [[ $# -gt 0 ]]; do
		case "$1" in
		--port)
			[[ $# -ge 2 ]] || die "$step" "--port needs a value"
			port="$2"
			shift 2
			;;
		--nodes)
			[[ $# -ge 2 ]] || die "$step" "--nodes needs a value"
			[[ "$2" == 1 || "$2" == 2 ]] || die "$step" "--nodes must be 1 or 2, not $2"
			nodes="$2"
			shift 2
			;;
		--keep-data)
			((allow_keep)) || die "$step" "unknown argument $1"
			keep_data=1
			shift
			;;
		*) die "$step" "unknown argument $1" ;;
		esac
	done
	if [[ -z "$port" ]]; then
		if ((nodes == 1)); then port="$default_port"; else port="$cluster_port"; fi
	fi
	[[ "$port" =~ ^[0-9]+$ ]] && ((port > 0 && port < 65533)) || die "$step" "bad port $port"
}

cmd_start() {
	local port nodes keep_data
	parse_args start 1 "$@"
	local controller_port=$((port + 1))
	local run
	run="$(run_dir_for "$port")"
	local node2_dir
	node2_dir="$(node_dir_for "$run" 2)"

	if node_alive "$run"; then
		if ((nodes == 1)) || node_alive "$node2_dir"; then
			echo "kafka.sh: Kafka already running (pid $(read_pid "$run"))" >&2
			echo "kafka ready bootstrap=$(bootstrap_for "$port" "$nodes")"
			return 0
		fi
		[[ -f "$node2_dir/data/meta.properties" ]] ||
			die start "a one-node Kafka runs on port $port; stop it before starting a two-node cluster there"
		start_node 2 "$port"
		echo "kafka ready bootstrap=$(bootstrap_for "$port" "$nodes")"
		return 0
	fi

	local version
	version="$(fetched_version)" || version="$(cmd_fetch)" || exit 1
	local lib
	lib="$(lib_dir_for "$version")"

	local p
	for p in "$port" "$controller_port"; do
		check_port_free start "$p" "the broker needs $port and the controller $controller_port"
	done
	if ((nodes == 2)); then
		check_port_free start "$((port + 2))" "node 2 needs it"
	fi

	if ((keep_data == 0)); then
		rm -rf "$run"
	fi
	mkdir -p "$run/logs" "$run/data"
	write_server_properties "$run" 1 "$port" "$controller_port"
	write_log4j2_config "$run"
	if ((nodes == 2)); then
		mkdir -p "$node2_dir/logs" "$node2_dir/data"
		write_server_properties "$node2_dir" 2 "$((port + 2))" "$controller_port"
		write_log4j2_config "$node2_dir"
	fi

	local cluster_id
	cluster_id="$(cluster_id_of "$run")"
	if [[ -z "$cluster_id" ]]; then
		local jvm
		jvm_for "$run" "$lib"
		cluster_id="$("${jvm[@]}" kafka.tools.StorageTool random-uuid 2>>"$run/logs/format.log" | tail -n 1)" ||
			die start "kafka-storage random-uuid did not run (see $run/logs/format.log)"
	fi
	format_node "$run" "$lib" "$cluster_id" 1
	if ((nodes == 2)); then
		format_node "$node2_dir" "$lib" "$cluster_id" 2
	fi

	# Node 2 is launched right after node 1, not once node 1 is ready: it
	# keeps asking the quorum until node 1's controller answers, and the two
	# JVMs start up side by side.
	launch_node "$run" "$lib"
	if ((nodes == 2)); then
		launch_node "$node2_dir" "$lib"
	fi
	if ! wait_ready "$run" "$version" "node 1"; then
		if ((nodes == 2)); then
			stop_node_dir "$node2_dir" "node 2" || true
		fi
		exit 1
	fi
	if ((nodes == 2)) && ! wait_ready "$node2_dir" "$version" "node 2"; then
		stop_node_dir "$run" "node 1" || true
		exit 1
	fi
	echo "kafka ready bootstrap=$(bootstrap_for "$port" "$nodes")"
}

# start_node NODE PORT starts node NODE (2) of the two-node cluster on PORT
# again, with the data it had.
start_node() {
	local node="$1" port="$2"
	local run
	run="$(run_dir_for "$port")"
	local dir
	dir="$(node_dir_for "$run" "$node")"
	[[ -f "$dir/data/meta.properties" ]] ||
		die start-node "node $node of a two-node cluster on port $port was never started (kafka.sh start --nodes 2 --port $port)"
	node_alive "$run" || die start-node "node 1 (the controller) on port $port is not running"
	if node_alive "$dir"; then
		echo "kafka.sh: node $node already running (pid $(read_pid "$dir"))" >&2
		return 0
	fi
	local version
	version="$(fetched_version)" || die start-node "no Kafka of (${candidate_versions[*]}) fetched yet"
	check_port_free start-node "$((port + 2))" "node $node needs it"
	launch_node "$dir" "$(lib_dir_for "$version")"
	wait_ready "$dir" "$version" "node $node" || exit 1
}

# stop_node_dir DIR LABEL stops the node in DIR: SIGTERM (a controlled
# shutdown), SIGKILL after 60s.
stop_node_dir() {
	local dir="$1" label="$2"
	local pid
	pid="$(read_pid "$dir")"
	if ! pid_alive "$pid"; then
		rm -f "$dir/kafka.pid"
		echo "kafka.sh: Kafka $label is not running" >&2
		return 0
	fi
	kill "$pid"
	local waited=0
	while pid_alive "$pid"; do
		if ((waited >= 60)); then
			echo "kafka.sh: Kafka $label pid $pid ignored SIGTERM for 60s; killing it" >&2
			kill -9 "$pid" 2>/dev/null || true
			sleep 1
			break
		fi
		sleep 1
		waited=$((waited + 1))
	done
	if pid_alive "$pid"; then
		echo "kafka.sh: stop failed: Kafka $label pid $pid is still alive after SIGKILL" >&2
		return 1
	fi
	rm -f "$dir/kafka.pid"
	echo "kafka.sh: Kafka $label stopped" >&2
}

# Node 2 stops first: a broker's controlled shutdown needs node 1's
# controller.
cmd_stop() {
	local port nodes keep_data
	parse_args stop 0 "$@"
	local run
	run="$(run_dir_for "$port")"
	local node2_dir
	node2_dir="$(node_dir_for "$run" 2)"
	if [[ -f "$node2_dir/kafka.pid" ]]; then
		stop_node_dir "$node2_dir" "node 2 on port $((port + 2))" || exit 1
	fi
	stop_node_dir "$run" "on port $port" || exit 1
}

# parse_node_args STEP ARGS... sets node and port for stop-node and
# start-node. They know only node 2: node 1 holds the controller, without
# which node 2 cannot run.
parse_node_args() {
	local step="$1"
	shift
	[[ $# -ge 1 ]] || die "$step" "name the node (usage: kafka.sh $step 2 [--port P])"
	node="$1"
	shift
	[[ "$node" == 2 ]] || die "$step" "only node 2 (the broker-only node) can be stopped and started alone; node 1 holds the controller"
	local nodes keep_data
	parse_args "$step" 0 --nodes 2 "$@"
}

cmd_stop_node() {
	local node port
	parse_node_args stop-node "$@"
	stop_node_dir "$(node_dir_for "$(run_dir_for "$port")" "$node")" "node $node on port $((port + 2))" || exit 1
}

cmd_start_node() {
	local node port
	parse_node_args start-node "$@"
	start_node "$node" "$port"
	echo "kafka ready node=$node bootstrap=127.0.0.1:$((port + 2))"
}

cmd_status() {
	local port nodes keep_data
	parse_args status 0 "$@"
	local run
	run="$(run_dir_for "$port")"
	if ((nodes == 1)); then
		local pid
		pid="$(read_pid "$run")"
		if pid_alive "$pid"; then
			echo "kafka running pid=$pid bootstrap=127.0.0.1:$port"
			return 0
		fi
		echo "kafka not running on port $port"
		return 1
	fi
	local n pid down=0
	for n in 1 2; do
		pid="$(read_pid "$(node_dir_for "$run" "$n")")"
		if pid_alive "$pid"; then
			echo "kafka node $n running pid=$pid bootstrap=127.0.0.1:$((port + 2 * (n - 1)))"
		else
			echo "kafka node $n not running on port $((port + 2 * (n - 1)))"
			down=1
		fi
	done
	return "$down"
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
stop-node)
	shift
	cmd_stop_node "$@"
	;;
start-node)
	shift
	cmd_start_node "$@"
	;;
status)
	shift
	cmd_status "$@"
	;;
version)
	fetched_version || die version "no Kafka of (${candidate_versions[*]}) fetched yet; run kafka.sh fetch"
	;;
*)
	echo "usage: kafka.sh fetch | start [--nodes N] [--port P] [--keep-data] | stop [--nodes N] [--port P]" >&2
	echo "       | stop-node 2 [--port P] | start-node 2 [--port P] | status [--nodes N] [--port P] | version" >&2
	exit 2
	;;
esac
