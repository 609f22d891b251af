# Sourced by the e2e scripts that serve a model over HTTP: serve WHAT starts
# "$bin/troupe-serve" on "$work/serve.toml" (log in "$work/log"), sets $pid
# and its HTTP address $http, and fails naming WHAT if it does not start
# (exits 77, skipped, where it stopped for want of a CUDA device).
serve() {
  : > "$work/log" # there before the server's shell opens it: read at once below, under set -e
  "$bin/troupe-serve" --config "$work/serve.toml" --endpoint "tcp://127.0.0.1:*" --log-level warn > "$work/log" 2>&1 &
  pid=$!
  http=""
  for _ in $(seq 1 400); do
    http="$(sed -n 's/^troupe-serve: http on //p' "$work/log")"
    [ -n "$http" ] && break
    if ! kill -0 "$pid" 2>/dev/null; then
      cat "$work/log"
      # backend.kind "cuda" where no GPU is visible: skipped (ctest's 77).
      grep -q "no CUDA device is visible" "$work/log" && { pid=""; exit 77; }
      exit 1
    fi
    sleep 0.05
  done
  [ -n "$http" ] || { echo "$(basename "$0"): the server did not start ($1)"; cat "$work/log"; exit 1; }
}

# Stops the server serve started, as a person would (SIGINT), and waits.
stop() {
  kill -INT "$pid"
  wait "$pid"
  pid=""
}
