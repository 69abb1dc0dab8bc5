#!/usr/bin/env bash
# The newcomer's first run: start a daemon on a fresh home, show it healthy, record a first project,
# check the sandbox against reward hacking, evaluate the suite's gold solutions, and stop. (The full campaign demo replaces this when `bashgym demo` lands.)
set -euo pipefail
HOME_DIR="${BASHGYM_DEMO_HOME:-$(mktemp -d -t bashgym-demo.XXXXXX)}"
export BASHGYM_HOME="$HOME_DIR"
LOG="$HOME_DIR/daemon.log"
mkdir -p "$HOME_DIR"
echo "BashGym home: $HOME_DIR"
bashgym daemon --port 0 >"$HOME_DIR/daemon.out" 2>"$LOG" &
DAEMON=$!
trap 'kill -TERM $DAEMON 2>/dev/null || true; wait $DAEMON 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  [ -s "$HOME_DIR/daemon.json" ] && break
  sleep 0.1
done
cat "$HOME_DIR/daemon.out"
bashgym status
bashgym project create --id demo --name "Demo project" --description "Created by make demo"
bashgym experiment create --project demo --id first --name "First experiment" --objective "See the ledger work"
bashgym ledger context --project demo --json | head -40
echo "Reward-hacking canaries against the sandbox:"
bashgym eval canaries
echo "The terminal-task suite's own gold solutions, one task per family, sandboxed:"
bashgym eval run --project demo --gold --limit-tasks 11
bashgym ledger verify
sleep 2  # the console channel prints a notice within a couple of seconds of its event
echo "What the console channel showed (the posts Discord would get, once it is configured):"
tail -n +2 "$HOME_DIR/daemon.out"
echo "Done. The daemon stops now; start your own with: BASHGYM_HOME=$HOME_DIR bashgym daemon"
