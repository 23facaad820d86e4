# Sourced by the peer scripts: builds llama.cpp (commit 0c1e570, as vendored in the PyPI sdist
# llama-cpp-python==0.3.36) in $PEER_DIR (default /tmp/plumb-peer-llamacpp) as a peer to measure
# against; none of it is committed. `ensure_llamacpp TARGET...` builds the targets that are
# missing and sets `bin` (their folder) and LD_LIBRARY_PATH.
llamacpp_work="${PEER_DIR:-/tmp/plumb-peer-llamacpp}"
llamacpp_src="$llamacpp_work/llama_cpp_python-0.3.36/vendor/llama.cpp"
bin="$llamacpp_src/build/bin"

ensure_llamacpp() {
    local missing=()
    for t in "$@"; do
        [ -x "$bin/$t" ] || missing+=("$t")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        mkdir -p "$llamacpp_work"
        python3 -m pip install --quiet cmake ninja
        if [ ! -d "$llamacpp_src" ]; then
            python3 -m pip download --quiet --no-deps --no-binary llama-cpp-python llama-cpp-python==0.3.36 -d "$llamacpp_work"
            tar -xzf "$llamacpp_work/llama_cpp_python-0.3.36.tar.gz" -C "$llamacpp_work"
        fi
        # No web UI for llama-server (it would be fetched from the network) and no HTTPS: the
        # peers only answer benchmarks on loopback.
        cmake -S "$llamacpp_src" -B "$llamacpp_src/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
            -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
            -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF >/dev/null
        cmake --build "$llamacpp_src/build" -j"$(nproc)" --target "${missing[@]}" >/dev/null
    fi
    export LD_LIBRARY_PATH="$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}
