#!/usr/bin/env bash
# Record what a user sees in a terminal: doctor, a build with its progress bar, verify.
# Runs the commands in a detached tmux session (a real TTY, so colours and the one-line
# progress bar are on) and writes snapshots of the screen to docs/lab/<date>-terminal-session.md.
#   scripts/record-session.sh [OUT_MD]
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$REPO/docs/lab/$(date -u +%F)-terminal-session.md}
S=assemble-rec-$$
tmp=$(mktemp -d)
tmux new-session -d -s "$S" -x 118 -y 48 "cd $tmp && PS1='$ ' bash --norc -i"
# the whole output of the current command (history is cleared before each one)
snap() { tmux capture-pane -p -J -S - -t "$S" | sed -e :a -e '/^\n*$/{$d;N;ba' -e '}' > "$tmp/$1.txt"; }
run() { tmux send-keys -t "$S" "clear" Enter; sleep 0.5; tmux clear-history -t "$S"; tmux send-keys -t "$S" "$1" Enter; }
wait_prompt() { for _ in $(seq 1 900); do sleep 1; tmux capture-pane -p -t "$S" | grep -q '^\$ *$' && return; done; }
A="python3 -m builder"
export PYTHONPATH=$REPO
tmux set-environment -t "$S" PYTHONPATH "$REPO"
run "export PYTHONPATH=$REPO ${ASSEMBLE_CACHE:+ASSEMBLE_CACHE=$ASSEMBLE_CACHE}; alias assemble='$A'"; sleep 1
run "assemble doctor --recipe vulkan"; wait_prompt; snap 1-doctor
# A changed define makes a new build folder: a real Ninja run (ccache serves most objects).
run "assemble build --recipe cpu -D ${RECORD_DEFINE:-GGML_CPU_REPACK=OFF} --out runtime-cpu"
sleep 25; snap 2-build-progress
wait_prompt; snap 3-build-done
run "mv runtime-cpu 'moved runtime' && assemble verify 'moved runtime' --smoke"; wait_prompt; snap 4-verify
tmux kill-session -t "$S"
{
  echo "# A terminal session, as a user sees it"
  echo
  echo "Recorded $(date -u '+%Y-%m-%d') on the 2-core Debian 12 development machine with \`scripts/record-session.sh\`"
  echo "(tmux, 118x48; colours stripped). The build is a new build folder (one changed -D) served partly by ccache."
  for f in "$tmp"/*.txt; do
    name=$(basename "$f" .txt)
    echo; echo "## ${name#*-}"; echo; echo '```'; cat "$f"; echo '```'
  done
} > "$OUT"
rm -rf "$tmp"
echo "wrote $OUT"
