# Sourced by the tests that run specd's daemons beside a host: waits on events, never on time.
# wait_until WHAT SECONDS COMMAND...: polls COMMAND until it succeeds; after SECONDS (generous:
# a loaded machine is slow, and a wait that ends early fails a correct build) fails naming WHAT.
wait_until() {
  local what=$1 end=$((SECONDS + $2))
  shift 2
  until "$@"; do
    if [ "$SECONDS" -ge "$end" ]; then echo "timed out waiting for $what"; return 1; fi
    sleep 0.05
  done
}

# start_daemon VAR LOG BINARY ARGS...: starts a daemon with its stderr in LOG (a new file per
# instance), sets VAR to its pid and returns once it logged that it listens (it has bound its
# endpoint; a socket file alone may be a killed instance's).
start_daemon() {
  local var=$1 log=$2
  shift 2
  "$@" 2> "$log" &
  printf -v "$var" '%s' $!
  wait_until "$(basename "$1") to listen (its log: $log)" 300 listening "$log" "${!var}"
}
# listening LOG PID: the daemon logged its ready line; one that exited instead fails the test now.
listening() {
  grep -q 'listening on' "$1" && return 0
  kill -0 "$2" 2>/dev/null && return 1
  grep -q 'listening on' "$1" && return 0
  cat "$1"
  echo "the daemon exited before it listened"
  exit 1
}

# ms_since NS: milliseconds since a `date +%s%N` reading.
ms_since() { echo $((($(date +%s%N) - $1) / 1000000)); }
# at_least_ms NS MS: true once MS milliseconds have passed since NS (a lower bound the host's
# reconnect back-off needs, which runs on the wall clock also while the host is stopped).
at_least_ms() { [ "$(ms_since "$1")" -ge "$2" ]; }
