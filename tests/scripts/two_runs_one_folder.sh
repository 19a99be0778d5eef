#!/usr/bin/env bash
# Two runs of zs-train-gpt saving into one folder (a job started twice): while
# run A (2 ranks, --save-every) runs, run B with the same --save is refused
# before its steps (its claim of the folder), naming A's process and host; a
# run that only loads from A's folder warns and runs; once A has ended, a run
# resumes from the folder and saves into it. Then the same for the MoE
# trainer's folder of slots (--moe-experts): refused before its slots change.
#   two_runs_one_folder.sh MPIEXEC TRAINER WORK
# Every wait is bounded (60 s); A is ended on exit, whatever happened.
set -u
mpiexec=$1 trainer=$2 work=$3
rm -rf "$work" && mkdir -p "$work" || exit 1
a=""
end_a() {
  if [ -n "$a" ]; then
    kill -TERM "$a" 2>/dev/null
    for _ in $(seq 100); do kill -0 "$a" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$a" 2>/dev/null
    wait "$a" 2>/dev/null
    a=""
  fi
}
trap 'end_a; rm -rf "$work"' EXIT
fail() { echo "two_runs_one_folder: $*"; for f in "$work"/*.log; do echo "--- $f"; tail -20 "$f"; done; exit 1; }
common=(--layers 1 --channels 32 --heads 2 --seq 16 --batch 4 --val-seqs 0 --quiet)

one_kind() { # $1: a name; the rest: the trainer's flags of this kind
  local name=$1 ck=$work/$1 pair=manifest.json
  shift
  [ "$name" = moe ] && pair=moe_pair
  "$mpiexec" -n 2 --oversubscribe "$trainer" "${common[@]}" "$@" --steps 1000000 --save "$ck" --save-every 20 \
    >"$work/$name-a.log" 2>&1 &
  a=$!
  for _ in $(seq 600); do [ -f "$ck/$pair" ] && break; kill -0 "$a" 2>/dev/null || break; sleep 0.1; done
  [ -f "$ck/$pair" ] || fail "$name: run A saved nothing within 60 s"
  # B, the same --save: refused at its claim, before its steps and any file
  "$mpiexec" -n 1 "$trainer" "${common[@]}" "$@" --steps 3 --save "$ck" >"$work/$name-b.log" 2>&1 &&
    fail "$name: run B saved into run A's folder"
  grep -q "zs_checkpoint_claim.*another run's checkpoint folder: process [0-9]* on host .* saves there and still runs" \
    "$work/$name-b.log" || fail "$name: run B's message does not name run A"
  kill -0 "$a" 2>/dev/null || fail "$name: run A ended"
  # B, --load only: a warning, and it runs
  "$mpiexec" -n 1 "$trainer" "${common[@]}" "$@" --steps 1 --load "$ck" >"$work/$name-c.log" 2>&1 ||
    fail "$name: a run that only loads from A's folder failed"
  grep -q "checkpoint folder of a run that still runs" "$work/$name-c.log" || fail "$name: no warning on the load"
  end_a
  # A ended: the folder is free
  "$mpiexec" -n 1 "$trainer" "${common[@]}" "$@" --steps 1 --load "$ck" --save "$ck" >"$work/$name-d.log" 2>&1 ||
    fail "$name: resuming into the folder after run A ended failed"
}
one_kind dense --stage 2
one_kind moe --moe-experts 2
echo "two runs, one folder: refused while the first runs (dense, MoE), loads warn, free once it ended"
