# settings.sh — sourced by ab-8b.sh, ab-smol.sh and ab-synth-prefill.sh: the settings of an A/B, each TAG:ASSIGNMENTS
# (comma-separated VAR=VALUE; BIN=DIR runs that setting's binaries from DIR instead of $B).

# The tag of a setting, and its assignments as `env` arguments.
tag_of() { echo "${1%%:*}"; }
env_of() {
    local a=${1#*:}
    [ -n "$a" ] && tr ',' '\n' <<<"$a" | grep -v '^BIN=' | tr '\n' ' '
}
# The setting's binary folder: its BIN=, else $B.
bin_of() {
    local a=${1#*:} d=$B kv
    for kv in ${a//,/ }; do [[ $kv == BIN=* ]] && d=${kv#BIN=}; done
    echo "$d"
}
# Runs a command under a setting's assignments.
run_with() {
    local s=$1
    shift
    # shellcheck disable=SC2046 # the assignments split into env's arguments on purpose
    env $(env_of "$s") "$@"
}
# The GPU machine's environment for plumb's binaries: CUDA's libraries, GPU tests that fail
# rather than skip without a GPU, and a plumb home of the run's (kept if set).
gpu_env() {
    export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export PLUMB_REQUIRE_GPU=1
    export PLUMB_HOME=${PLUMB_HOME:-/tmp/plumb-home}
}
# Its arguments in reverse order (settings hold no spaces): the next round's order of settings.
reversed() {
    local i
    for ((i = $#; i >= 1; i--)); do echo "${!i}"; done
}
# ROUNDS (the second argument) rounds of `plumb bench --device cuda --model $M --kv-dtype $KV ARGS`
# (KV: the KV cache's type, default f16)
# under every setting of SET, each run's receipt in $OUT/bench-TAG-ROUND.json and its pp/tg lines
# in $L under "## [TAG] TITLE (round N)"; each round takes the settings in the last one's order
# reversed, so neither side always runs first.
bench_rounds() {
    local title=$1 rounds=$2 round s
    shift 2
    local order=("${SET[@]}")
    for round in $(seq 1 "$rounds"); do
        for s in "${order[@]}"; do
            echo "## [$(tag_of "$s")] $title (round $round)" >>"$L"
            run_with "$s" timeout 90 "$(bin_of "$s")/plumb" bench --device cuda --model "$M" --kv-dtype "${KV:-f16}" "$@" \
                --receipt "$OUT/bench-$(tag_of "$s")-$round.json" 2>&1 | grep -E "^(pp|tg)" >>"$L"
        done
        mapfile -t order < <(reversed "${order[@]}")
    done
}
