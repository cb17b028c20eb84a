#!/usr/bin/env bash
# Write failures of the checkpoint-writing subcommands (transform, convert, merge): a full disk
# and a read-only destination end with exit code 1, one line on stderr naming the file and
# errno's reason, and no partial output: no file with a final name, no temporary, no directory
# the run created; the sources are unchanged.
#
#   full disk, ENOSPC   a tmpfs of 1-4 MiB mounted in a private mount namespace (unshare -m)
#   file too large      RLIMIT_FSIZE (ulimit -f) with SIGXFSZ at its default action: the program
#                       must ignore SIGXFSZ itself to report EFBIG instead of dying (always runs)
#   read-only, EROFS    a tmpfs mounted read-only, and one remounted read-only under existing
#                       rank directories (mount namespace)
#   no permission       an unprivileged user (setpriv --reuid 65534) and a root-owned 0555 tree
#
# A mechanism this machine lacks (no mount namespaces, no setpriv) is skipped with a loud
# "SKIPPED" line; RLIMIT_FSIZE needs nothing and always runs.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.bash"
chmod 755 "$tmp"  # readable by the unprivileged user of the permission tests
skipped=()
skip() {
  skipped+=("$1")
  echo "SKIPPED: $1" | tee /dev/stderr
}

# 8 ranks -> 3, outputs of about 1.5 MiB each (ms_scenario.py's generator)
s=$tmp/s
"$PY" - "$SRC/verify/python" "$s" <<'EOF'
import sys
sys.dont_write_bytecode = True
sys.path.insert(0, sys.argv[1])
import ms_scenario as m
L, P = m.L, m.Param
def faults_scenario(name):
    params = [
        P("w", "Float32", [1536, 512], L([2, 4], [1, 0]), L([3], [0, -1])),
        P("emb", "Float16", [3072, 256], L([2, 4], [[1, 0], -1]), L([3], [0, -1])),
        P("bias", "Float32", [1536], L([2, 4], [1]), L([3], [-1])),
    ]
    return params, 8, 3, {"absent": "tensors"}
m.scenario = faults_scenario
sys.exit(m.gen("faults_8to3", sys.argv[2]))
EOF
chmod -R a+rX "$s"
strategies=(--src-strategy "$s/src_strategy.ckpt" --dst-strategy "$s/dst_strategy.ckpt")
transform=(transform --src-dir "$s/src" "${strategies[@]}")
src_sums() { (cd "$s" && find . -type f -print0 | sort -z | xargs -0 sha256sum); }
src_before=$(src_sums)
run "${transform[@]}" --dst-dir "$tmp/ref"
[[ $rc -eq 0 ]] || fail "the transform works without faults" "stderr: $err"
one_file=$tmp/ref/rank_0/checkpoint_0.ckpt
echo "outputs: 3 files of $(stat -c %s "$one_file") bytes"

# expect_fault NAME AFTER WANT TEXT...: $rc/$out/$err are of a failed run: exit code 1, nothing on
# stdout, one line on stderr containing every TEXT and no crash report; AFTER (the listing of the
# destination afterwards) equals WANT.
expect_fault() {
  local name=$1 after=$2 want=$3 lines t
  shift 3
  lines=$(printf '%s\n' "$err" | grep -c .) || true
  if [[ $rc -ne 1 ]]; then
    fail "$name" "exit code $rc, expected 1" "stderr: $err"
    return
  fi
  if [[ -n $out || $lines -ne 1 ]]; then
    fail "$name" "expected nothing on stdout and one line on stderr" "stdout: $out" "stderr: $err"
    return
  fi
  for t in "$@"; do
    if [[ $err != *"$t"* ]]; then
      fail "$name" "stderr lacks '$t'" "stderr: $err"
      return
    fi
  done
  if grep -qiE "terminate called|what\(\)|exception|core dumped" <<<"$err"; then
    fail "$name" "crash report" "stderr: $err"
  elif [[ $after != "$want" ]]; then
    fail "$name: no partial output" "left: $(tr '\n' ' ' <<<"$after")" "expected: $(tr '\n' ' ' <<<"$want")"
  elif [[ $(src_sums) != "$src_before" ]]; then
    fail "$name: the sources are unchanged"
  else
    pass
  fi
}

tree() { if [[ -e $1 ]]; then (cd "$1" && find . -mindepth 1 | sort); fi; }

# -- RLIMIT_FSIZE: EFBIG (always runs)
# limited KIB NAME ARGS...: runs the program with `ulimit -f KIB` and SIGXFSZ at its default
limited() {
  local kib=$1 e
  shift
  e=$(mktemp)
  rc=0
  out=$(
    trap - XFSZ
    ulimit -f "$kib"
    exec "$RESHARD" "$@" 2>"$e"
  ) || rc=$?
  err=$(cat "$e")
  rm -f "$e"
}
limited 1024 "${transform[@]}" --dst-dir "$tmp/big/out"
expect_fault "transform, file size limit 1 MiB" "$(tree "$tmp/big")" "" \
  "$tmp/big/out/rank_0/checkpoint_0.ckpt" "File too large"
limited 1024 "${transform[@]}" --dst-dir "$tmp/big/out" --format safetensors --jobs 2
expect_fault "transform --format safetensors --jobs 2, limit 1 MiB" "$(tree "$tmp/big")" "" \
  "checkpoint_" ".safetensors" "File too large"
mkdir -p "$tmp/big/out/rank_1" && echo keep >"$tmp/big/out/keep"
limited 1024 "${transform[@]}" --dst-dir "$tmp/big/out" --jobs 3
expect_fault "transform into existing directories, limit 1 MiB" "$(tree "$tmp/big")" \
  "$(printf '%s\n' ./out ./out/keep ./out/rank_1)" "File too large"
rm -rf "$tmp/big"
limited 1024 convert --in "$one_file" --out "$tmp/c/c.safetensors"
expect_fault "convert, limit 1 MiB" "$(mkdir -p "$tmp/c" && tree "$tmp/c")" "" "$tmp/c/c.safetensors" "File too large"
limited 4096 merge --src-dir "$s/src" --out "$tmp/c/merged.ckpt" --src-strategy "$s/src_strategy.ckpt"
expect_fault "merge, limit 4 MiB" "$(tree "$tmp/c")" "" "$tmp/c/merged.ckpt" "File too large"
# the same runs without the limit work (the faults above came from the limit)
run merge --src-dir "$s/src" --out "$tmp/c/merged.ckpt" --src-strategy "$s/src_strategy.ckpt"
if [[ $rc -eq 0 && $(stat -c %s "$tmp/c/merged.ckpt") -gt $((4096 * 1024)) ]]; then pass; else
  fail "merge without a limit writes more than the limit" "exit $rc, stderr: $err"
fi

# -- mount namespace: a small tmpfs (ENOSPC), a read-only one (EROFS)
# in_tmpfs OPTIONS SETUP ARGS...: in a private mount namespace, mounts a tmpfs with OPTIONS on
# $mnt, evaluates SETUP, runs the program with ARGS; sets rc, out, err, and after (the tree of
# $mnt when the program ended).
mnt=$tmp/mnt
mkdir -p "$mnt"
in_tmpfs() {
  local opts=$1 setup=$2
  shift 2
  rc=0
  unshare -m --propagation private bash -c '
    set -e
    mnt=$1 opts=$2 setup=$3
    shift 3
    mount -t tmpfs -o "$opts" reshard-test "$mnt"
    eval "$setup"
    rc=0
    "$RESHARD" "$@" >"$mnt.out" 2>"$mnt.err" || rc=$?
    echo "$rc" >"$mnt.rc"
    (cd "$mnt" && find . -mindepth 1 | sort) >"$mnt.after"
  ' in_tmpfs "$mnt" "$opts" "$setup" "$@" || rc=$?
  if [[ $rc -ne 0 ]]; then
    out="" err="the mount namespace failed (exit $rc)" after=""
    return
  fi
  rc=$(cat "$mnt.rc") out=$(cat "$mnt.out") err=$(cat "$mnt.err") after=$(cat "$mnt.after")
}
if unshare -m --propagation private bash -c "mount -t tmpfs -o size=64k reshard-test '$mnt'" 2>/dev/null; then
  in_tmpfs size=1m "" "${transform[@]}" --dst-dir "$mnt/out"
  expect_fault "transform, full disk (tmpfs of 1 MiB)" "$after" "" "$mnt/out/rank_0/checkpoint_0.ckpt" \
    "No space left on device"
  # two files fit, the third does not: an order only one job has (the default is one per core,
  # and with two jobs either of the last two files may be the one that finds the disk full)
  in_tmpfs size=4m "" "${transform[@]}" --dst-dir "$mnt/out" --jobs 1
  expect_fault "transform --jobs 1, full disk after two of three files (tmpfs of 4 MiB)" "$after" "" \
    "$mnt/out/rank_2/checkpoint_2.ckpt" "No space left on device"
  in_tmpfs size=3m "mkdir -p '$mnt/out/rank_0'; echo keep >'$mnt/out/keep'" "${transform[@]}" --dst-dir "$mnt/out" \
    --format safetensors --jobs 2
  expect_fault "transform --format safetensors --jobs 2, full disk (3 MiB)" "$after" \
    "$(printf '%s\n' ./out ./out/keep ./out/rank_0)" "checkpoint_" "No space left on device"
  in_tmpfs size=6m "" "${transform[@]}" --dst-dir "$mnt/out" --force
  if [[ $rc -eq 0 && $(grep -c '/checkpoint_[0-2]\.ckpt$' <<<"$after") -eq 3 ]]; then pass; else
    fail "transform fits in a tmpfs of 6 MiB (the faults above came from the size)" "exit $rc" "stderr: $err"
  fi
  in_tmpfs size=1m "" convert --in "$one_file" --out "$mnt/c.safetensors"
  expect_fault "convert, full disk" "$after" "" "$mnt/c.safetensors" "No space left on device"

  in_tmpfs ro,size=1m "" "${transform[@]}" --dst-dir "$mnt/out"
  expect_fault "transform to a read-only file system" "$after" "" "cannot create directory $mnt/out" \
    "Read-only file system"
  in_tmpfs size=1m "mkdir -p '$mnt'/out/rank_{0,1,2}; mount -o remount,ro '$mnt'" "${transform[@]}" --dst-dir "$mnt/out"
  expect_fault "transform into read-only rank directories" "$after" \
    "$(printf '%s\n' ./out ./out/rank_0 ./out/rank_1 ./out/rank_2)" "cannot create temporary file" \
    "Read-only file system"
else
  skip "ENOSPC and EROFS through a tmpfs: this machine allows no mount namespace (unshare -m + mount)"
fi

# -- an unprivileged user and a root-owned read-only tree (EACCES)
ro=$tmp/ro
mkdir -p "$ro/out/rank_0" "$ro/out/rank_1" "$ro/out/rank_2"
chmod -R 555 "$ro"
as_nobody=(setpriv --reuid=65534 --regid=65534 --clear-groups)
if command -v setpriv >/dev/null && "${as_nobody[@]}" "$RESHARD" --version >/dev/null 2>&1; then
  RESHARD_REAL=$RESHARD
  RESHARD=$tmp/as_nobody.sh
  printf '#!/bin/sh\nexec %s "%s" "$@"\n' "${as_nobody[*]}" "$RESHARD_REAL" >"$RESHARD"
  chmod 755 "$RESHARD"
  run "${transform[@]}" --dst-dir "$ro/new"
  expect_fault "transform as an unprivileged user under a read-only directory" "$(tree "$ro")" \
    "$(printf '%s\n' ./out ./out/rank_0 ./out/rank_1 ./out/rank_2)" "cannot create directory $ro/new" \
    "Permission denied"
  run "${transform[@]}" --dst-dir "$ro/out"
  expect_fault "transform as an unprivileged user into read-only rank directories" "$(tree "$ro")" \
    "$(printf '%s\n' ./out ./out/rank_0 ./out/rank_1 ./out/rank_2)" "cannot create temporary file" \
    "$ro/out/rank_0/checkpoint_0.ckpt" "Permission denied"
  RESHARD=$RESHARD_REAL
else
  skip "EACCES as an unprivileged user: setpriv is missing or cannot run the program as uid 65534"
fi
chmod -R u+w "$ro"

if ((${#skipped[@]})); then echo "SKIPPED ${#skipped[@]} mechanism(s): ${skipped[*]}"; fi
finish
