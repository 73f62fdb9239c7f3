#!/usr/bin/env bash
# Builds (when the jar is missing or older than its sources) and runs the Java
# reference-client checks against a broker:
#
#   integration/java/run.sh BOOTSTRAP [--timeout-seconds N] [features|txn|share|ctp ...]
#
# Exit status: 0 all scenarios passed, 1 a scenario failed (or the build did),
# 2 bad usage. The built runner is target/kshare-javaclients.jar; tests find it
# through KSHARE_JAVA_RUNNER and run it with `java -jar`.
#
# KSHARE_KAFKA_VERSION, when set, picks the kafka-clients version (default:
# the one in pom.xml), so that the clients match the broker kafka.sh runs.
set -euo pipefail

dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
jar="$dir/target/kshare-javaclients.jar"
stamp="$dir/target/kafka-clients.version"
version_args=()
want_version="pom default"
if [[ -n "${KSHARE_KAFKA_VERSION:-}" ]]; then
	version_args=("-Dkafka.version=$KSHARE_KAFKA_VERSION")
	want_version="$KSHARE_KAFKA_VERSION"
fi

if [[ $# -lt 1 ]]; then
	echo "usage: run.sh BOOTSTRAP [--timeout-seconds N] [features|txn|share|ctp ...]" >&2
	exit 2
fi

if [[ ! -f "$jar" || ! -d "$dir/target/lib" ]] ||
	[[ "$(cat "$stamp" 2>/dev/null)" != "$want_version" ]] ||
	[[ -n "$(find "$dir/src" "$dir/pom.xml" -newer "$jar" -print -quit)" ]]; then
	build_log="$(mktemp)"
	# clean: a version change must not leave the old client jars in target/lib.
	if ! mvn -q -B -f "$dir/pom.xml" "${version_args[@]}" clean package >"$build_log" 2>&1; then
		tail -n 30 "$build_log" >&2
		echo "run.sh: building the Java reference clients failed (full log: $build_log)" >&2
		exit 1
	fi
	rm -f "$build_log"
	echo "$want_version" >"$stamp"
fi

exec java -jar "$jar" "$@"
