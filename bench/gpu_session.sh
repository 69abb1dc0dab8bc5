#!/usr/bin/env bash
# Issue 13's whole H200 measurement in one device call (bench/README.md, "Trainer speed"): the device facts, then
# bench/gpu_sft.py on fixed and on variable lengths, each under its own time limit so that a slow first half
# still leaves the second its turn, and everything in $OUT (JSON lines appended as each run ends, so a run cut
# short keeps what it measured). Extra arguments go to both gpu_sft.py runs (`--tiny` rehearses it on a CPU).
#
#   OUT=/tmp/out bash bench/gpu_session.sh --tiny          # rehearsal here, about a minute
#   bash bench/gpu_session.sh                              # on the GPU host, in the repository root, .whl carried
set -u
out=${OUT:?set OUT to the folder the results go to}
wheels=${WHEELS:-.whl}
if ! compgen -G "$wheels/*.whl" >/dev/null; then
    echo "no wheels in $wheels: download them first (bench/README.md, 'Trainer speed') and carry the folder" >&2
    exit 2
fi
mkdir -p "$out"
{
    date -u +%FT%TZ
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 || true
    python3 -c 'import sys, torch, transformers; print(sys.version.split()[0], torch.__version__, transformers.__version__, torch.cuda.is_available())'
    python3 -m pip list 2>/dev/null | grep -i -E '^(pyarrow|typing.extensions|triton|peft|accelerate|fsspec) ' || true
} >"$out/device.txt" 2>&1
cat "$out/device.txt"

export PYTHONUNBUFFERED=1
# Each recompilation of the compiled model is logged with its reason: how often packed rows recompile is one of
# the things only the GPU can show.
export TORCH_LOGS=${TORCH_LOGS:-recompiles}

run() {  # name, seconds, gpu_sft.py arguments...
    local name=$1 seconds=$2
    shift 2
    local started=$SECONDS
    timeout -k 10 "$seconds" python3 bench/gpu_sft.py --wheels "$wheels" --out "$out/$name.jsonl" "$@" \
        >"$out/$name.log" 2>&1
    local rc=$?
    echo "$name: exit $rc after $((SECONDS - started)) s$([ "$rc" = 124 ] && echo " (cut at its ${seconds} s limit)")"
    grep -c 'Recompiling function' "$out/$name.log" | sed "s/^/$name: recompilations logged: /"
    grep -E '"check"|"trainer"|bashgym_over_trl' "$out/$name.jsonl" 2>/dev/null || tail -n 20 "$out/$name.log"
}

run gpu_sft "${FIXED_S:-290}" "$@"
run gpu_sft_variable "${VARIABLE_S:-270}" --variable-lengths "$@"
