#!/usr/bin/env bash
# A single-node Elasticsearch 8.x for development, tests and CI: fetch, start, stop, status.
#
#   bash scripts/elasticsearch.sh fetch    # newest 8.x integ-test-zip, fetched with Maven (mvn), cached
#   bash scripts/elasticsearch.sh start    # 127.0.0.1:${ICR2_ES_PORT:-9200}, waits for yellow/green health
#   bash scripts/elasticsearch.sh status   # exit 0 when the node answers, 1 otherwise
#   bash scripts/elasticsearch.sh stop     # SIGTERM by pid file, waits, SIGKILL after a timeout
#
# A cluster of N nodes on loopback, beside the single node (which it never touches):
#   bash scripts/elasticsearch.sh start --nodes 3 [--http-port-base 9201] [--transport-port-base 9301] [--heap 256m]
#                                       [--cluster-name icr2-cluster] [--wipe]
#   bash scripts/elasticsearch.sh status --nodes 3   # one line per node: name, URL, pid; then the cluster health
#   bash scripts/elasticsearch.sh stop --nodes 3 [--wipe]
# Node i gets HTTP port base+i-1 and transport port base+i-1, its own copy of config/ (keystore, jvm options),
# data, logs and pid file under <runtime>/clusters/<name>/node-<i>; the nodes start side by side, and `start`
# returns once node 1 reports all N nodes with yellow/green health. Defaults also from ICR2_ES_CLUSTER_HEAP,
# ICR2_ES_CLUSTER_NAME, ICR2_ES_CLUSTER_HTTP_PORT_BASE, ICR2_ES_CLUSTER_TRANSPORT_PORT_BASE.
#
# The distribution is org.elasticsearch.distribution.integ-test-zip:elasticsearch (no bundled JDK; modules:
# transport-netty4, x-pack-core, x-pack-security, apm), run with OpenJDK 17. Security is disabled
# (xpack.security.enabled=false is accepted because x-pack-security ships in it): plain http, no auth,
# bound to 127.0.0.1 only.
#
# Fetching: Maven's own client (`mvn`, with maven-dependency-plugin) resolves and downloads the zip from the
# repository Maven is configured with (its built-in default, or a mirror in ~/.m2/settings.xml), verifying its
# checksum (-C). The newest 8.x is the version range [8.0.0,9.0.0) resolved by Maven on a throw-away pom. The
# Maven local repository is kept in the cache (see ICR2_ES_MAVEN_REPO), so the zip is downloaded once. The
# distribution lacks the `GET /` handler; scripts/elasticsearch/RestRootPlugin.java stands in for it, compiled
# with the JDK's javac into the cached copy (see install_rest_root).
#
# Running as root: Elasticsearch refuses to run as root ("can not run elasticsearch as root"), in this
# distribution too. When this script runs as root it creates (once, `useradd --system`) the unprivileged
# user ${ICR2_ES_USER:-icr2es}, gives it the runtime directory and starts the node with `runuser -u`. When
# the cache directory is not reachable by that user (e.g. it is under /root, mode 700), the runtime copy
# of the distribution and the data/log directories go to ${ICR2_ES_RUNTIME_DIR:-/var/lib/icr2_components/elasticsearch}
# instead; the permissions of /root are never changed. As a non-root user the node runs as that user,
# everything under the cache directory.
#
# Environment:
#   ICR2_CACHE_DIR         cache root (default ~/.cache/icr2_components); the distribution lives in <root>/elasticsearch/
#   ICR2_ES_PORT           HTTP port (default 9200); the transport port is chosen by Elasticsearch. Single nodes on
#                          different ports run side by side: each keeps its pid file, logs and data in its own
#                          folder (<runtime> for 9200, <runtime>/ports/<port> for another), and start/stop/status
#                          act on the node of this port only
#   ICR2_ES_VERSION        pin a version (default: the newest 8.x Maven resolves, or the newest cached offline)
#   ICR2_ES_HEAP           heap size (default 1g: -Xms1g -Xmx1g)
#   ICR2_ES_JAVA_HOME      JDK (default /usr/lib/jvm/java-17-openjdk-amd64)
#   ICR2_ES_START_TIMEOUT  seconds to wait for health (default 180)
#   ICR2_ES_USER           unprivileged user used when running as root (default icr2es)
#   ICR2_ES_RUNTIME_DIR    runtime directory when running as root and the cache is unreachable to that user
#   ICR2_ES_MAVEN_REPO     Maven local repository (default <root>/elasticsearch/maven-repository; give
#                          ~/.m2/repository to share Maven's own). Mirrors and proxies: Maven's settings.xml.
set -euo pipefail

export HAYSTACK_TELEMETRY_ENABLED=False RAGAS_DO_NOT_TRACK=true HF_HUB_OFFLINE=1

CACHE_ROOT="${ICR2_CACHE_DIR:-$HOME/.cache/icr2_components}"
ES_CACHE="$CACHE_ROOT/elasticsearch"
PORT="${ICR2_ES_PORT:-9200}"
HOST=127.0.0.1
URL="http://$HOST:$PORT"
HEAP="${ICR2_ES_HEAP:-1g}"
JAVA_HOME_17="${ICR2_ES_JAVA_HOME:-/usr/lib/jvm/java-17-openjdk-amd64}"
START_TIMEOUT="${ICR2_ES_START_TIMEOUT:-180}"
STOP_TIMEOUT="${ICR2_ES_STOP_TIMEOUT:-60}"
ES_USER="${ICR2_ES_USER:-icr2es}"
ROOT_RUNTIME_DIR="${ICR2_ES_RUNTIME_DIR:-/var/lib/icr2_components/elasticsearch}"
MAVEN_REPO="${ICR2_ES_MAVEN_REPO:-$ES_CACHE/maven-repository}"
ES_GROUP=org.elasticsearch.distribution.integ-test-zip
ES_ARTIFACT=elasticsearch
DEPENDENCY_PLUGIN=org.apache.maven.plugins:maven-dependency-plugin:3.6.1
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REST_ROOT_SOURCE="$SCRIPT_DIR/elasticsearch/RestRootPlugin.java"
CLUSTER_NAME=icr2-dev

log() { echo "[elasticsearch.sh] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

is_root() { [ "$(id -u)" -eq 0 ]; }

# Runs Maven in batch mode, quiet, without colours, failing on a checksum mismatch (-C), with the cache's
# local repository. Output goes to the log file $1.
mvn_run() { # log-file maven-arguments...
    local log_file="$1"
    shift
    if ! command -v mvn >/dev/null 2>&1; then
        echo "Maven (mvn) is not installed (apt-get install maven); it fetches the Elasticsearch distribution" >"$log_file"
        return 1
    fi
    mvn -B -q -C -Dstyle.color=never -Dmaven.repo.local="$MAVEN_REPO" "$@" >"$log_file" 2>&1
}

# Logs what Maven said went wrong: its [ERROR] message, or the whole log when it has none.
log_mvn_errors() { # log-file
    local line
    if grep -q '\[ERROR\]' "$1"; then
        # the message ends at Maven's first empty [ERROR] line; what follows is its generic help text
        sed -n 's/.*\[ERROR\] *//p' "$1" | awk 'NF == 0 { exit } { print }' | head -n 6
    else
        cat "$1"
    fi | while IFS= read -r line; do log "mvn: $line"; done
}

# Prints the HTTP body of a GET against the node, or fails (quietly) when it does not answer.
es_get() {
    curl -fsS --max-time "${2:-5}" "$URL$1" 2>/dev/null
}

# ---------------------------------------------------------------------------------------------- versions

# Maven resolves the range on a throw-away pom that depends on the distribution's pom (a few kB; the zip is
# fetched only when that version is not cached). -U: ask the repository for its current version list rather
# than one Maven fetched up to a day ago.
newest_remote_version() {
    local probe version
    probe="$(mktemp -d)"
    cat >"$probe/pom.xml" <<POM
<project>
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.icr2</groupId>
  <artifactId>elasticsearch-version-probe</artifactId>
  <version>0</version>
  <dependencies>
    <dependency>
      <groupId>$ES_GROUP</groupId>
      <artifactId>$ES_ARTIFACT</artifactId>
      <version>[8.0.0,9.0.0)</version>
      <type>pom</type>
    </dependency>
  </dependencies>
</project>
POM
    if ! mvn_run "$probe/mvn.log" -U -f "$probe/pom.xml" "$DEPENDENCY_PLUGIN:copy-dependencies" \
        -DoutputDirectory="$probe/resolved"; then
        log_mvn_errors "$probe/mvn.log"
        rm -rf "$probe"
        return 1
    fi
    version="$(find "$probe/resolved" -name "$ES_ARTIFACT-*.pom" -printf '%f\n' | sed "s/^$ES_ARTIFACT-//; s/\.pom\$//")"
    rm -rf "$probe"
    # releases only (8.x.y): a pre-release would sort inside the range
    if ! echo "$version" | grep -qE '^8\.[0-9]+\.[0-9]+$'; then
        log "Maven resolved [8.0.0,9.0.0) to '$version', which is not an 8.x.y release; pin one with ICR2_ES_VERSION"
        return 1
    fi
    echo "$version"
}

newest_cached_version() {
    local dir
    for dir in "$ES_CACHE"/elasticsearch-8.*; do
        # an if, not `[ ... ] &&`: with nothing cached the loop must still succeed (pipefail, set -e)
        if [ -x "$dir/bin/elasticsearch" ]; then basename "$dir" | sed 's/^elasticsearch-//'; fi
    done | sort -V | tail -n 1
}

fetch_version() { # version -> unpacked in $ES_CACHE/elasticsearch-<version>
    local version="$1" tmp
    if [ -x "$ES_CACHE/elasticsearch-$version/bin/elasticsearch" ]; then
        log "Elasticsearch $version is already fetched: $ES_CACHE/elasticsearch-$version"
        return 0
    fi
    command -v unzip >/dev/null 2>&1 || die "unzip is not installed (apt-get install unzip)"
    tmp="$(mktemp -d "$ES_CACHE/unpack.XXXXXX")"
    log "fetching $ES_GROUP:$ES_ARTIFACT:$version:zip with Maven (local repository $MAVEN_REPO)"
    if ! mvn_run "$tmp/mvn.log" "$DEPENDENCY_PLUGIN:copy" -Dartifact="$ES_GROUP:$ES_ARTIFACT:$version:zip" \
        -DoutputDirectory="$tmp"; then
        log_mvn_errors "$tmp/mvn.log"
        rm -rf "$tmp"
        die "Maven could not fetch Elasticsearch $version ($ES_GROUP:$ES_ARTIFACT:$version:zip)"
    fi
    local zip="$tmp/$ES_ARTIFACT-$version.zip"
    unzip -q "$zip" -d "$tmp" || { rm -rf "$tmp"; die "could not unzip $ES_GROUP:$ES_ARTIFACT:$version:zip"; }
    [ -x "$tmp/elasticsearch-$version/bin/elasticsearch" ] || { rm -rf "$tmp"; die "unexpected layout in $ES_GROUP:$ES_ARTIFACT:$version:zip"; }
    rm -rf "$ES_CACHE/elasticsearch-$version"
    mv "$tmp/elasticsearch-$version" "$ES_CACHE/elasticsearch-$version"
    rm -rf "$tmp"  # the zip's copy; Maven keeps the zip itself in its local repository
    log "Elasticsearch $version unpacked in $ES_CACHE/elasticsearch-$version"
}

# ------------------------------------------------------------------------------------ GET / (rest-root)

# The integ-test-zip leaves out the `rest-root` module, so `GET /` answers 405 there; the Python client's
# info() and ElasticsearchDocumentStore (which calls info() before anything else) fail on it. The module is
# not published to Maven repositories, so this script compiles a minimal equivalent (same JSON fields as the
# official handler), scripts/elasticsearch/RestRootPlugin.java, with the JDK's javac and installs it as the
# module `icr2-rest-root` of the cached copy.
REST_ROOT_MODULE=icr2-rest-root

compile_module() { # es-home version module-name source classname description what
    # compile one Java module against the distribution's jars and install it under modules/
    local home="$1" version="$2" name="$3" source="$4" classname="$5" description="$6" what="$7" build
    [ -f "$source" ] || die "the $what module's source is missing: $source"
    build="$(mktemp -d)"
    mkdir -p "$build/classes"
    if ! "$JAVA_HOME_17/bin/javac" --release 17 -nowarn -cp "$home/lib/*" -d "$build/classes" \
        "$source" >"$build/javac.log" 2>&1; then
        cat "$build/javac.log" >&2
        rm -rf "$build"
        die "could not compile the $what module against Elasticsearch $version"
    fi
    mkdir -p "$build/module"
    "$JAVA_HOME_17/bin/jar" --create --file "$build/module/$name.jar" -C "$build/classes" .
    cat >"$build/module/plugin-descriptor.properties" <<DESC
description=$description
version=$version
name=$name
classname=$classname
java.version=17
elasticsearch.version=$version
extended.plugins=
has.native.controller=false
DESC
    rm -rf "$home/modules/$name"
    mv "$build/module" "$home/modules/$name"
    rm -rf "$build"
    log "installed the $what module ($name) into $home/modules"
}

has_javac() {
    [ -x "$JAVA_HOME_17/bin/javac" ] && [ -x "$JAVA_HOME_17/bin/jar" ]
}

install_rest_root() { # es-home version
    local home="$1" version="$2"
    [ -f "$home/modules/$REST_ROOT_MODULE/plugin-descriptor.properties" ] && return 0
    if ! has_javac; then
        log "warning: no javac in $JAVA_HOME_17 (install openjdk-17-jdk-headless): GET / will answer 405 and"
        log "         ElasticsearchDocumentStore, which calls info() first, will not connect"
        return 0
    fi
    compile_module "$home" "$version" "$REST_ROOT_MODULE" "$REST_ROOT_SOURCE" org.icr2.restroot.RestRootPlugin \
        "GET / (node and version summary), standing in for the rest-root module missing from the integ-test-zip" "GET /"
}

# Neither does the integ-test-zip ship the analysis-common module, so it has no `english` analyzer (standard
# tokenizer, stop words, Porter stemming), which index configs with `store.analyzer: english` name in their
# mapping. scripts/elasticsearch/EnglishAnalysisPlugin.java registers Lucene's EnglishAnalyzer under that name;
# it is compiled and installed like the GET / module, as `icr2-analysis-english`. A node started before the
# module was installed needs a restart (stop, start) to load it.
ENGLISH_ANALYSIS_MODULE=icr2-analysis-english
ENGLISH_ANALYSIS_SOURCE="$SCRIPT_DIR/elasticsearch/EnglishAnalysisPlugin.java"

install_english_analysis() { # es-home version
    local home="$1" version="$2"
    [ -f "$home/modules/$ENGLISH_ANALYSIS_MODULE/plugin-descriptor.properties" ] && return 0
    # a full distribution has analysis-common, and with it the `english` analyzer
    [ -d "$home/modules/analysis-common" ] && return 0
    if ! has_javac; then
        log "warning: no javac in $JAVA_HOME_17 (install openjdk-17-jdk-headless): the node has no 'english' analyzer,"
        log "         so index configs with store.analyzer: english cannot create their index (use standard)"
        return 0
    fi
    compile_module "$home" "$version" "$ENGLISH_ANALYSIS_MODULE" "$ENGLISH_ANALYSIS_SOURCE" \
        org.icr2.analysis.EnglishAnalysisPlugin \
        "the english analyzer (Lucene's EnglishAnalyzer), standing in for analysis-common missing from the integ-test-zip" \
        "english analyzer"
}

cmd_fetch() {
    local version="${ICR2_ES_VERSION:-}"
    mkdir -p "$ES_CACHE"
    if [ -z "$version" ]; then
        if version="$(newest_remote_version)" && [ -n "$version" ]; then
            log "newest 8.x that Maven resolves: $version"
        else
            version="$(newest_cached_version)"
            [ -n "$version" ] || die "Maven could not resolve the newest 8.x of $ES_GROUP:$ES_ARTIFACT and nothing is cached in $ES_CACHE"
            log "Maven could not resolve the newest 8.x (offline?); using the newest cached version $version"
        fi
    fi
    fetch_version "$version"
    install_rest_root "$ES_CACHE/elasticsearch-$version" "$version"
    install_english_analysis "$ES_CACHE/elasticsearch-$version" "$version"
    echo "$version" >"$ES_CACHE/current-version"
    echo "$ES_CACHE/elasticsearch-$version"
}

# The version `start` runs: pinned, else the one the last fetch chose, else fetch now.
installed_version() {
    if [ -n "${ICR2_ES_VERSION:-}" ]; then
        [ -x "$ES_CACHE/elasticsearch-$ICR2_ES_VERSION/bin/elasticsearch" ] || cmd_fetch >/dev/null
        echo "$ICR2_ES_VERSION"
        return
    fi
    if [ -s "$ES_CACHE/current-version" ]; then
        local v
        v="$(cat "$ES_CACHE/current-version")"
        if [ -x "$ES_CACHE/elasticsearch-$v/bin/elasticsearch" ]; then
            echo "$v"
            return
        fi
    fi
    cmd_fetch >/dev/null
    cat "$ES_CACHE/current-version"
}

# ------------------------------------------------------------------------------------------ runtime dir

# Every directory from / down to $1 must be searchable by "others" for the unprivileged user to reach it.
reachable_by_others() {
    local path
    path="$(cd "$1" && pwd -P)"
    while [ -n "$path" ] && [ "$path" != "/" ]; do
        [ "$(( 0$(stat -c '%a' "$path") & 01 ))" -ne 0 ] || return 1
        path="$(dirname "$path")"
    done
    return 0
}

runtime_dir() {
    if is_root; then
        mkdir -p "$ES_CACHE"
        if reachable_by_others "$ES_CACHE"; then
            echo "$ES_CACHE/runtime"
        else
            echo "$ROOT_RUNTIME_DIR"
        fi
    else
        echo "$ES_CACHE/runtime"
    fi
}

# The single node's own folder (data, logs, pid file, tmp), one per HTTP port: the default port keeps the
# runtime folder itself (where its data always was), another port gets <runtime>/ports/<port>. A start or stop
# with ICR2_ES_PORT=9250 therefore finds, waits on and stops only the node of port 9250.
node_runtime() {
    if [ "$PORT" = 9200 ]; then runtime_dir; else echo "$(runtime_dir)/ports/$PORT"; fi
}

pid_file() { echo "$(node_runtime)/run/elasticsearch.pid"; }

running_pid() {
    local pidf pid
    pidf="$(pid_file)"
    [ -s "$pidf" ] || return 1
    pid="$(cat "$pidf")"
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        echo "$pid"
        return 0
    fi
    return 1
}

ensure_es_user() {
    if ! id -u "$ES_USER" >/dev/null 2>&1; then
        command -v useradd >/dev/null 2>&1 || die "running as root needs an unprivileged user and useradd is missing"
        log "creating the unprivileged system user '$ES_USER' (Elasticsearch refuses to run as root)"
        useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$ES_USER"
    fi
}

log_tail() {
    local rt="$1" f
    for f in "$rt/logs/$CLUSTER_NAME.log" "$rt/logs/startup.out"; do
        if [ -s "$f" ]; then
            log "---- last lines of $f ----"
            tail -n 40 "$f" >&2
        fi
    done
}

# The distribution a node runs from: the cached copy, or (as root, when the cache is not reachable by the
# unprivileged user) a copy in the runtime directory.
distribution_home() { # version runtime-dir
    local version="$1" rt="$2" home
    if [ "$rt" = "$ES_CACHE/runtime" ]; then
        echo "$ES_CACHE/elasticsearch-$version"
        return 0
    fi
    home="$rt/elasticsearch-$version"
    if [ ! -x "$home/bin/elasticsearch" ] || {
        [ ! -d "$home/modules/$REST_ROOT_MODULE" ] && [ -d "$ES_CACHE/elasticsearch-$version/modules/$REST_ROOT_MODULE" ]
    } || {
        [ ! -d "$home/modules/$ENGLISH_ANALYSIS_MODULE" ] && [ -d "$ES_CACHE/elasticsearch-$version/modules/$ENGLISH_ANALYSIS_MODULE" ]
    }; then
        rm -rf "$home"
        log "copying the distribution to $home (the cache under $CACHE_ROOT is not reachable by '$ES_USER')"
        rm -rf "$home.tmp"
        cp -a "$ES_CACHE/elasticsearch-$version" "$home.tmp"
        mv "$home.tmp" "$home"
    fi
    echo "$home"
}

# ------------------------------------------------------------------------------------------------ start

cmd_start() {
    mkdir -p "$ES_CACHE"
    exec 9>"$ES_CACHE/.lock"
    flock -w 600 9 || die "another elasticsearch.sh holds $ES_CACHE/.lock"

    local pid body
    if pid="$(running_pid)"; then
        log "Elasticsearch is already running (pid $pid) at $URL"
        wait_for_health "$(node_runtime)" "$pid"
        return 0
    fi
    if body="$(es_get /_cluster/health 3)" && echo "$body" | grep -q '"cluster_name"'; then
        log "an Elasticsearch node (not started by this script) already answers at $URL; using it"
        return 0
    fi
    if command -v ss >/dev/null 2>&1 && ss -Hltn "sport = :$PORT" | grep -q .; then
        die "port $PORT on $HOST is taken by something that is not Elasticsearch; set ICR2_ES_PORT"
    fi

    [ -x "$JAVA_HOME_17/bin/java" ] || die "OpenJDK 17 not found at $JAVA_HOME_17 (apt-get install openjdk-17-jdk-headless, or set ICR2_ES_JAVA_HOME)"

    local version rt home base
    version="$(installed_version)"
    install_rest_root "$ES_CACHE/elasticsearch-$version" "$version"
    install_english_analysis "$ES_CACHE/elasticsearch-$version" "$version"
    base="$(runtime_dir)"
    rt="$(node_runtime)"
    mkdir -p "$base" "$rt"/{data,logs,run,tmp}
    home="$(distribution_home "$version" "$base")"
    : >"$rt/logs/startup.out"

    local settings=(
        -E "cluster.name=$CLUSTER_NAME"
        -E "node.name=icr2-node"
        -E "discovery.type=single-node"
        -E "network.host=$HOST"
        -E "http.port=$PORT"
        -E "path.data=$rt/data"
        -E "path.logs=$rt/logs"
        -E "xpack.security.enabled=false"
        # a dev/CI node on a shared disk: do not turn indices read-only when the disk is fuller than 85-95%
        -E "cluster.routing.allocation.disk.threshold_enabled=false"
    )
    local envs=(
        "ES_JAVA_HOME=$JAVA_HOME_17"
        "ES_JAVA_OPTS=-Xms$HEAP -Xmx$HEAP ${ICR2_ES_EXTRA_JAVA_OPTS:-}"
        "ES_TMPDIR=$rt/tmp"
        "PATH=/usr/local/bin:/usr/bin:/bin"
        "HOME=$rt"
        "LANG=C.UTF-8"
    )

    log "starting Elasticsearch $version on $URL (heap $HEAP, data in $rt/data)"
    local rc=0
    if is_root; then
        ensure_es_user
        # the node writes its data, logs and pid file, and its keystore into config/ (recursive chown only
        # the first time: a data directory holding a whole KILT index has many files)
        [ "$rt" = "$base" ] || chown "$ES_USER:" "$base" "$(dirname "$rt")"
        chown "$ES_USER:" "$rt" "$rt"/data "$rt"/logs "$rt"/run "$rt"/tmp
        [ "$(stat -c %U "$rt/data")" = "$ES_USER" ] && [ -z "$(find "$rt/data" -maxdepth 3 ! -user "$ES_USER" -print -quit)" ] \
            || chown -R "$ES_USER:" "$rt/data"
        [ "$(stat -c %U "$home/config")" = "$ES_USER" ] || chown -R "$ES_USER:" "$home"
        (ulimit -n 65535 2>/dev/null || true; cd "$rt" && runuser -u "$ES_USER" -- env -i "${envs[@]}" \
            "$home/bin/elasticsearch" -d -p "$rt/run/elasticsearch.pid" "${settings[@]}") \
            >>"$rt/logs/startup.out" 2>&1 9>&- || rc=$?
    else
        (ulimit -n 65535 2>/dev/null || true; cd "$rt" && env -i "${envs[@]}" \
            "$home/bin/elasticsearch" -d -p "$rt/run/elasticsearch.pid" "${settings[@]}") \
            >>"$rt/logs/startup.out" 2>&1 9>&- || rc=$?
    fi
    if [ "$rc" -ne 0 ]; then
        log_tail "$rt"
        die "Elasticsearch did not start (exit code $rc); logs in $rt/logs"
    fi
    # the pid file appears once the daemonised server has started
    local waited=0
    while ! pid="$(running_pid)"; do
        sleep 1
        waited=$((waited + 1))
        if [ "$waited" -ge 30 ]; then
            log_tail "$rt"
            die "Elasticsearch started but wrote no pid file ($rt/run/elasticsearch.pid)"
        fi
    done
    wait_for_health "$rt" "$pid"
}

wait_for_health() { # runtime-dir pid
    local rt="$1" pid="$2" deadline body status
    deadline=$(($(date +%s) + START_TIMEOUT))
    while :; do
        if ! kill -0 "$pid" 2>/dev/null; then
            log_tail "$rt"
            die "Elasticsearch (pid $pid) exited while starting; logs in $rt/logs"
        fi
        if body="$(es_get "/_cluster/health?wait_for_status=yellow&timeout=5s" 10)"; then
            status="$(echo "$body" | sed -n 's/.*"status":"\([a-z]*\)".*/\1/p')"
            if [ "$status" = "green" ] || [ "$status" = "yellow" ]; then
                if [ "$status" = "yellow" ]; then
                    log "cluster health is yellow: some index has replicas a single node cannot host (primaries are all allocated)"
                fi
                log "Elasticsearch is up at $URL (pid $pid, health $status)"
                return 0
            fi
        fi
        if [ "$(date +%s)" -ge "$deadline" ]; then
            log_tail "$rt"
            die "Elasticsearch at $URL did not reach yellow/green health within ${START_TIMEOUT}s (pid $pid); logs in $rt/logs"
        fi
        sleep 1
    done
}

# ------------------------------------------------------------------------------------------ stop, status

cmd_stop() {
    mkdir -p "$ES_CACHE"
    exec 9>"$ES_CACHE/.lock"
    flock -w 600 9 || die "another elasticsearch.sh holds $ES_CACHE/.lock"
    local pid waited=0 pidf
    pidf="$(pid_file)"
    if ! pid="$(running_pid)"; then
        log "Elasticsearch is not running (no live pid in $pidf)"
        rm -f "$pidf"
        return 0
    fi
    log "stopping Elasticsearch (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do
        sleep 1
        waited=$((waited + 1))
        if [ "$waited" -ge "$STOP_TIMEOUT" ]; then
            log "still running after ${STOP_TIMEOUT}s; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            sleep 1
            break
        fi
    done
    rm -f "$pidf"
    log "Elasticsearch stopped"
}

cmd_status() {
    local pid body
    if pid="$(running_pid)"; then
        if body="$(es_get /_cluster/health 5)"; then
            echo "running: pid $pid, $URL, health: $(echo "$body" | sed -n 's/.*"status":"\([a-z]*\)".*/\1/p')"
            return 0
        fi
        echo "starting or unresponsive: pid $pid, $URL does not answer yet"
        return 1
    fi
    if body="$(es_get /_cluster/health 5)"; then
        echo "running (not started by this script): $URL, health: $(echo "$body" | sed -n 's/.*"status":"\([a-z]*\)".*/\1/p')"
        return 0
    fi
    echo "not running ($URL)"
    return 1
}

# --------------------------------------------------------------------------------- a cluster of N nodes

# `--nodes N` (N >= 1): a cluster of its own on 127.0.0.1, beside the single node (which it never touches).
# Node i (1..N) is "<name>-<i>", HTTP on http-port-base + i - 1, transport on transport-port-base + i - 1,
# with its own config copy, data, logs and pid file under <runtime>/clusters/<name>/node-<i>.
CLUSTER_NODES=0
CLUSTER_HTTP_BASE="${ICR2_ES_CLUSTER_HTTP_PORT_BASE:-9201}"
CLUSTER_TRANSPORT_BASE="${ICR2_ES_CLUSTER_TRANSPORT_PORT_BASE:-9301}"
CLUSTER_HEAP="${ICR2_ES_CLUSTER_HEAP:-256m}"
CLUSTER="${ICR2_ES_CLUSTER_NAME:-icr2-cluster}"
CLUSTER_WIPE=0

cluster_dir() { echo "$(runtime_dir)/clusters/$CLUSTER"; }
node_dir() { echo "$(cluster_dir)/node-$1"; }
node_http_port() { echo $((CLUSTER_HTTP_BASE + $1 - 1)); }
node_transport_port() { echo $((CLUSTER_TRANSPORT_BASE + $1 - 1)); }
node_url() { echo "http://$HOST:$(node_http_port "$1")"; }

node_pid() { # i -> pid of a live node, or fail
    local pidf="$(node_dir "$1")/run/elasticsearch.pid" pid
    [ -s "$pidf" ] || return 1
    pid="$(cat "$pidf")"
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

cluster_get() { # i path [timeout]
    curl -fsS --max-time "${3:-5}" "$(node_url "$1")$2" 2>/dev/null
}

check_cluster_options() {
    [[ "$CLUSTER_NODES" =~ ^[0-9]+$ ]] && [ "$CLUSTER_NODES" -ge 1 ] && [ "$CLUSTER_NODES" -le 9 ] \
        || die "--nodes must be a number from 1 to 9, got '$CLUSTER_NODES'"
    [[ "$CLUSTER_HTTP_BASE" =~ ^[0-9]+$ ]] && [[ "$CLUSTER_TRANSPORT_BASE" =~ ^[0-9]+$ ]] \
        || die "--http-port-base and --transport-port-base must be port numbers"
    [[ "$CLUSTER" =~ ^[a-z0-9][a-z0-9_-]*$ ]] || die "--cluster-name must be lower-case letters, digits, - or _, got '$CLUSTER'"
    [[ "$CLUSTER_HEAP" =~ ^[0-9]+[mMgG]$ ]] || die "--heap must look like 256m or 1g, got '$CLUSTER_HEAP'"
    local i port last_http=$((CLUSTER_HTTP_BASE + CLUSTER_NODES - 1)) last_transport=$((CLUSTER_TRANSPORT_BASE + CLUSTER_NODES - 1))
    if [ "$CLUSTER_HTTP_BASE" -le "$PORT" ] && [ "$PORT" -le "$last_http" ]; then
        die "the cluster's HTTP ports $CLUSTER_HTTP_BASE-$last_http include the single node's port $PORT; use --http-port-base 9201"
    fi
    if [ "$last_http" -ge "$CLUSTER_TRANSPORT_BASE" ] && [ "$CLUSTER_HTTP_BASE" -le "$last_transport" ]; then
        die "the HTTP ports $CLUSTER_HTTP_BASE-$last_http overlap the transport ports $CLUSTER_TRANSPORT_BASE-$last_transport"
    fi
}

cluster_start() {
    check_cluster_options
    mkdir -p "$ES_CACHE"
    exec 9>"$ES_CACHE/.lock"
    flock -w 600 9 || die "another elasticsearch.sh holds $ES_CACHE/.lock"
    [ -x "$JAVA_HOME_17/bin/java" ] || die "OpenJDK 17 not found at $JAVA_HOME_17 (apt-get install openjdk-17-jdk-headless, or set ICR2_ES_JAVA_HOME)"

    local i running=0 port body
    for ((i = 1; i <= CLUSTER_NODES; i++)); do
        if node_pid "$i" >/dev/null; then running=$((running + 1)); fi
    done
    if [ "$running" -eq "$CLUSTER_NODES" ]; then
        log "cluster '$CLUSTER' is already running ($CLUSTER_NODES nodes)"
        cluster_wait_for_health
        return 0
    fi
    [ "$running" -eq 0 ] || die "cluster '$CLUSTER' is partly running ($running of $CLUSTER_NODES nodes); stop it first (stop --nodes $CLUSTER_NODES)"
    for ((i = 1; i <= CLUSTER_NODES; i++)); do
        for port in "$(node_http_port "$i")" "$(node_transport_port "$i")"; do
            if command -v ss >/dev/null 2>&1 && ss -Hltn "sport = :$port" | grep -q .; then
                die "port $port on $HOST is already taken; choose other ports with --http-port-base / --transport-port-base"
            fi
        done
    done

    local version rt home seeds="" masters="" dir
    version="$(installed_version)"
    install_rest_root "$ES_CACHE/elasticsearch-$version" "$version"
    install_english_analysis "$ES_CACHE/elasticsearch-$version" "$version"
    rt="$(runtime_dir)"
    mkdir -p "$rt"
    home="$(distribution_home "$version" "$rt")"
    is_root && ensure_es_user
    if [ "$CLUSTER_WIPE" -eq 1 ] && [ -d "$(cluster_dir)" ]; then
        log "wiping the data of cluster '$CLUSTER' ($(cluster_dir))"
        rm -rf "$(cluster_dir)"
    fi
    for ((i = 1; i <= CLUSTER_NODES; i++)); do
        seeds+="${seeds:+,}$HOST:$(node_transport_port "$i")"
        masters+="${masters:+,}$CLUSTER-$i"
    done
    log "starting cluster '$CLUSTER': $CLUSTER_NODES nodes of Elasticsearch $version, HTTP $(node_http_port 1)-$(node_http_port "$CLUSTER_NODES"), transport $(node_transport_port 1)-$(node_transport_port "$CLUSTER_NODES"), heap $CLUSTER_HEAP each"

    local pids=() rc=0
    for ((i = 1; i <= CLUSTER_NODES; i++)); do
        dir="$(node_dir "$i")"
        mkdir -p "$dir"/{data,logs,run,tmp}
        # its own config directory: the keystore and jvm options are per node (no race between nodes starting)
        [ -f "$dir/config/elasticsearch.yml" ] || { rm -rf "$dir/config"; cp -a "$home/config" "$dir/config"; }
        rm -f "$dir/run/elasticsearch.pid"
        : >"$dir/logs/startup.out"
        local settings=(
            -E "cluster.name=$CLUSTER"
            -E "node.name=$CLUSTER-$i"
            -E "network.host=$HOST"
            -E "http.port=$(node_http_port "$i")"
            -E "transport.port=$(node_transport_port "$i")"
            -E "path.data=$dir/data"
            -E "path.logs=$dir/logs"
            -E "xpack.security.enabled=false"
            -E "cluster.routing.allocation.disk.threshold_enabled=false"
        )
        if [ "$CLUSTER_NODES" -eq 1 ]; then
            settings+=(-E "discovery.type=single-node")
        else
            settings+=(-E "discovery.seed_hosts=$seeds")
            # bootstrapping only on a fresh data directory (Elasticsearch warns when it stays set afterwards)
            [ -n "$(ls -A "$dir/data" 2>/dev/null)" ] || settings+=(-E "cluster.initial_master_nodes=$masters")
        fi
        local envs=(
            "ES_JAVA_HOME=$JAVA_HOME_17"
            "ES_JAVA_OPTS=-Xms$CLUSTER_HEAP -Xmx$CLUSTER_HEAP ${ICR2_ES_EXTRA_JAVA_OPTS:-}"
            "ES_PATH_CONF=$dir/config"
            "ES_TMPDIR=$dir/tmp"
            "PATH=/usr/local/bin:/usr/bin:/bin"
            "HOME=$dir"
            "LANG=C.UTF-8"
        )
        if is_root; then
            chown -R "$ES_USER:" "$dir"
            (ulimit -n 65535 2>/dev/null || true; cd "$dir" && runuser -u "$ES_USER" -- env -i "${envs[@]}" \
                "$home/bin/elasticsearch" -d -p "$dir/run/elasticsearch.pid" "${settings[@]}") \
                >>"$dir/logs/startup.out" 2>&1 9>&- &
        else
            (ulimit -n 65535 2>/dev/null || true; cd "$dir" && env -i "${envs[@]}" \
                "$home/bin/elasticsearch" -d -p "$dir/run/elasticsearch.pid" "${settings[@]}") \
                >>"$dir/logs/startup.out" 2>&1 9>&- &
        fi
        pids+=($!)
    done
    # the nodes start side by side (`-d` returns once a node is up, which needs the others to form a cluster)
    for i in "${!pids[@]}"; do
        if ! wait "${pids[$i]}"; then
            rc=1
            log "node $CLUSTER-$((i + 1)) did not start"
            cluster_log_tail "$((i + 1))"
        fi
    done
    if [ "$rc" -ne 0 ]; then
        cluster_stop_nodes
        die "cluster '$CLUSTER' did not start; logs in $(cluster_dir)/node-*/logs"
    fi
    cluster_wait_for_health
}

cluster_log_tail() { # i
    local dir f
    dir="$(node_dir "$1")"
    for f in "$dir/logs/$CLUSTER.log" "$dir/logs/startup.out"; do
        if [ -s "$f" ]; then
            log "---- last lines of $f ----"
            tail -n 30 "$f" >&2
        fi
    done
}

# Waits until node 1 reports all N nodes and yellow/green health.
cluster_wait_for_health() {
    local deadline body status nodes i
    deadline=$(($(date +%s) + START_TIMEOUT))
    while :; do
        for ((i = 1; i <= CLUSTER_NODES; i++)); do
            node_pid "$i" >/dev/null || { cluster_log_tail "$i"; die "node $CLUSTER-$i exited while the cluster was forming"; }
        done
        if body="$(cluster_get 1 "/_cluster/health?wait_for_nodes=$CLUSTER_NODES&wait_for_status=yellow&timeout=5s" 10)" \
            && echo "$body" | grep -q "\"cluster_name\":\"$CLUSTER\""; then
            status="$(echo "$body" | sed -n 's/.*"status":"\([a-z]*\)".*/\1/p')"
            nodes="$(echo "$body" | sed -n 's/.*"number_of_nodes":\([0-9]*\).*/\1/p')"
            if [ "$nodes" = "$CLUSTER_NODES" ] && { [ "$status" = "green" ] || [ "$status" = "yellow" ]; }; then
                log "cluster '$CLUSTER' is up: $nodes nodes, health $status, $(node_url 1) .. $(node_url "$CLUSTER_NODES")"
                return 0
            fi
        fi
        if [ "$(date +%s)" -ge "$deadline" ]; then
            for ((i = 1; i <= CLUSTER_NODES; i++)); do cluster_log_tail "$i"; done
            die "cluster '$CLUSTER' did not reach $CLUSTER_NODES nodes with yellow/green health within ${START_TIMEOUT}s"
        fi
        sleep 1
    done
}

# SIGTERM to every node, SIGKILL after the timeout; the single node is never among them (other pid files).
# Waits on the pids read before the SIGTERM, not on the pid files: Elasticsearch deletes its pid file in a
# shutdown hook while the JVM is still flushing translogs, so a wait on the file ends early and a --wipe that
# follows races the node's last writes ("Directory not empty").
cluster_stop_nodes() {
    local i pid waited
    local -a pids=()
    for ((i = 1; i <= CLUSTER_NODES; i++)); do
        if pid="$(node_pid "$i")"; then
            log "stopping $CLUSTER-$i (pid $pid)"
            kill -TERM "$pid" 2>/dev/null || true
            pids+=("$i:$pid")
        fi
    done
    for entry in "${pids[@]}"; do
        i="${entry%%:*}"
        pid="${entry#*:}"
        waited=0
        while kill -0 "$pid" 2>/dev/null; do
            sleep 1
            waited=$((waited + 1))
            if [ "$waited" -ge "$STOP_TIMEOUT" ]; then
                log "$CLUSTER-$i still running after ${STOP_TIMEOUT}s; sending SIGKILL"
                kill -KILL "$pid" 2>/dev/null || true
                while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
                break
            fi
        done
    done
    for ((i = 1; i <= CLUSTER_NODES; i++)); do
        rm -f "$(node_dir "$i")/run/elasticsearch.pid"
    done
}

cluster_stop() {
    check_cluster_options
    mkdir -p "$ES_CACHE"
    exec 9>"$ES_CACHE/.lock"
    flock -w 600 9 || die "another elasticsearch.sh holds $ES_CACHE/.lock"
    cluster_stop_nodes
    if [ "$CLUSTER_WIPE" -eq 1 ]; then
        rm -rf "$(cluster_dir)"
        log "cluster '$CLUSTER' stopped, its data wiped"
    else
        log "cluster '$CLUSTER' stopped (data kept in $(cluster_dir); --wipe deletes it)"
    fi
}

# One line per node: name, HTTP URL, pid (or "-" when not running); exit 0 when node 1 answers health.
cluster_status() {
    check_cluster_options
    local i pid body rc=1
    for ((i = 1; i <= CLUSTER_NODES; i++)); do
        pid="$(node_pid "$i" || echo -)"
        echo "$CLUSTER-$i $(node_url "$i") $pid"
    done
    for ((i = 1; i <= CLUSTER_NODES; i++)); do
        # only this cluster's answer counts (another node may hold the port)
        if body="$(cluster_get "$i" /_cluster/health 5)" && echo "$body" | grep -q "\"cluster_name\":\"$CLUSTER\""; then
            echo "health: $(echo "$body" | sed -n 's/.*"status":"\([a-z]*\)".*/\1/p'), nodes: $(echo "$body" | sed -n 's/.*"number_of_nodes":\([0-9]*\).*/\1/p')"
            rc=0
            break
        fi
    done
    [ "$rc" -eq 0 ] || echo "cluster '$CLUSTER' does not answer"
    return "$rc"
}

usage() {
    cat >&2 <<USAGE
usage: $0 {fetch|start|stop|status}
       $0 {start|stop|status} --nodes N [--http-port-base 9201] [--transport-port-base 9301] [--heap 256m]
                                        [--cluster-name icr2-cluster] [--wipe]
  --nodes N              a cluster of N nodes on $HOST of its own (the single node on port $PORT is left alone)
  --http-port-base P     HTTP port of node 1; node i gets P+i-1 (default 9201)
  --transport-port-base  transport port of node 1; node i gets T+i-1 (default 9301)
  --heap SIZE            heap of each node (default 256m)
  --cluster-name NAME    cluster name and directory (default icr2-cluster)
  --wipe                 start: delete the cluster's old data first; stop: delete it afterwards
USAGE
}

COMMAND="${1:-}"
[ $# -gt 0 ] && shift
while [ $# -gt 0 ]; do
    case "$1" in
        --nodes) CLUSTER_NODES="${2:?--nodes needs a number}"; shift 2 ;;
        --nodes=*) CLUSTER_NODES="${1#*=}"; shift ;;
        --http-port-base) CLUSTER_HTTP_BASE="${2:?--http-port-base needs a port}"; shift 2 ;;
        --http-port-base=*) CLUSTER_HTTP_BASE="${1#*=}"; shift ;;
        --transport-port-base) CLUSTER_TRANSPORT_BASE="${2:?--transport-port-base needs a port}"; shift 2 ;;
        --transport-port-base=*) CLUSTER_TRANSPORT_BASE="${1#*=}"; shift ;;
        --heap) CLUSTER_HEAP="${2:?--heap needs a size}"; shift 2 ;;
        --heap=*) CLUSTER_HEAP="${1#*=}"; shift ;;
        --cluster-name) CLUSTER="${2:?--cluster-name needs a name}"; shift 2 ;;
        --cluster-name=*) CLUSTER="${1#*=}"; shift ;;
        --wipe) CLUSTER_WIPE=1; shift ;;
        *) usage; die "unknown option '$1'" ;;
    esac
done

if [ "$CLUSTER_NODES" != 0 ]; then
    case "$COMMAND" in
        start) cluster_start ;;
        stop) cluster_stop ;;
        status) cluster_status ;;
        *) usage; exit 2 ;;
    esac
    exit $?
fi
[ "$CLUSTER_WIPE" -eq 0 ] || die "--wipe applies to a cluster (--nodes N) only; the single node's data is never wiped by this script"

case "$COMMAND" in
    fetch) cmd_fetch ;;
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    *)
        usage
        exit 2
        ;;
esac
