# settings.sh — sourced by ab-8b.sh and ab-smol.sh: the settings of an A/B, each TAG:ASSIGNMENTS
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
