# Sourced by the peer scripts that start servers: `port_free PORT` refuses a port already in use;
# `stop_server` stops the server whose pid is in $server_pid (TERM, then KILL after 10 s).
server_pid=""

port_free() {
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then
        echo "port $1 on 127.0.0.1 is already in use; set PORT" >&2
        exit 1
    fi
}

stop_server() {
    if [ -n "$server_pid" ]; then
        kill "$server_pid" 2>/dev/null || true
        for _ in $(seq 100); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
        server_pid=""
    fi
}
